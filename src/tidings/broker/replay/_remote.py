"""The broker's side of the replay pusher process (``_pusher``): started on the first
replay that can use it, started again after it dies, and asked one step at a time.

A step the pusher cannot answer (it died, it hangs past the push's deadline, it failed)
raises ``PusherUnavailable``; the replay then goes on in the broker from where its
record stands (``_send``), pushing that batch again under the same notification ids, as
after a crash: at least once, never under other ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import sys
import time
from pathlib import Path

import msgspec

from ...settings import Settings
from . import _pusher_wire as wire

__all__ = ["PusherUnavailable", "RemotePusher"]

log = logging.getLogger("tidings.replay")
_RESTART_AFTER_S = 5.0
"""After the pusher failed to start or died, replays run in the broker for this long."""


class PusherUnavailable(Exception):
    pass


def _settings_json(settings: Settings) -> bytes:
    return msgspec.json.encode(
        {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)},
        enc_hook=lambda v: str(v) if isinstance(v, Path) else NotImplemented,
    )


class RemotePusher:
    def __init__(self, settings: Settings, reader: str) -> None:
        self._init = wire.frame(wire.Init(_settings_json(settings), reader))
        self._slack_s = settings.replay_step_slack_s
        self._proc: asyncio.subprocess.Process | None = None
        self._reading: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[wire.Stepped]] = {}
        self._ids = itertools.count(1)
        self._down_until = 0.0
        self._starting = asyncio.Lock()
        self._closed = False

    @property
    def pid(self) -> int | None:
        p = self._proc
        return p.pid if p is not None and p.returncode is None else None

    def available(self) -> bool:
        """Whether a step may be asked now (not after a recent failure, not closed)."""
        return not self._closed and time.monotonic() >= self._down_until

    async def _started(self) -> asyncio.subprocess.Process:
        async with self._starting:
            p = self._proc
            if p is not None and p.returncode is None:
                return p
            if not self.available():
                raise PusherUnavailable("the replay process is down")
            try:
                p = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "tidings.broker.replay._pusher",
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                )
            except OSError as e:
                self._down(f"cannot start it: {e}")
                raise PusherUnavailable(str(e)) from None
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(self._init)
            self._proc = p
            self._reading = asyncio.create_task(self._read(p), name="tidings-replay-pusher-answers")
            log.info("replay process %d started", p.pid)
            return p

    def _down(self, why: str) -> None:
        self._down_until = time.monotonic() + _RESTART_AFTER_S
        log.warning("replay process: %s; replays run in the broker for %g s", why, _RESTART_AFTER_S)

    async def _read(self, p: asyncio.subprocess.Process) -> None:
        assert p.stdout is not None
        try:
            while True:
                size = int.from_bytes(await p.stdout.readexactly(4), "big")
                answer = wire.decode_answer(await p.stdout.readexactly(size))
                fut = self._waiting.pop(answer.req, None)
                if fut is None or fut.done():
                    continue
                if isinstance(answer, wire.Failed):
                    fut.set_exception(PusherUnavailable(answer.error))
                else:
                    fut.set_result(answer)
        except (asyncio.IncompleteReadError, ConnectionError, msgspec.DecodeError) as e:
            if not self._closed:
                self._down(f"process {p.pid} ended ({type(e).__name__})")
        finally:
            self._kill(p)
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(PusherUnavailable("the replay process ended"))
            self._waiting.clear()

    def _kill(self, p: asyncio.subprocess.Process) -> None:
        if p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
        if self._proc is p:
            self._proc = None

    async def step(self, **fields: object) -> wire.Stepped:
        """One step (``wire.Step``'s fields but ``req``); raises ``PusherUnavailable``."""
        p = await self._started()
        req = next(self._ids)
        s = wire.Step(req=req, **fields)  # type: ignore[arg-type]
        fut: asyncio.Future[wire.Stepped] = asyncio.get_running_loop().create_future()
        self._waiting[req] = fut
        assert p.stdin is not None
        try:
            p.stdin.write(wire.frame(s))
            async with asyncio.timeout(s.deadline_s + self._slack_s):
                return await asyncio.shield(fut)
        except TimeoutError:
            self._down(f"process {p.pid} did not answer a step within {s.deadline_s + self._slack_s:g} s")
            self._kill(p)
            raise PusherUnavailable("the replay process hung") from None
        except (ConnectionError, RuntimeError) as e:  # its stdin closed under us
            raise PusherUnavailable(str(e)) from None
        finally:
            self._waiting.pop(req, None)

    def forget(self, replay: int) -> None:
        p = self._proc
        if p is not None and p.returncode is None and p.stdin is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                p.stdin.write(wire.frame(wire.Forget(replay)))

    async def close(self) -> None:
        self._closed = True
        p = self._proc
        if p is not None:
            if p.stdin is not None:
                with contextlib.suppress(Exception):
                    p.stdin.close()  # it ends at the end of its input
            try:
                await asyncio.wait_for(p.wait(), 5)
            except TimeoutError:
                self._kill(p)
                await p.wait()
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(BaseException):
                await self._reading
