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
_IDLE_S = 60.0
"""A pusher with no step for this long ends (its memory is given back); the next replay
starts another."""


class PusherUnavailable(Exception):
    pass


def _settings_json(settings: Settings) -> bytes:
    return msgspec.json.encode(
        {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)},
        enc_hook=lambda v: str(v) if isinstance(v, Path) else NotImplemented,
    )


class _Proc:
    """One pusher process and the steps waiting for its answers."""

    def __init__(self, p: asyncio.subprocess.Process) -> None:
        self.p = p
        self.waiting: dict[int, asyncio.Future[wire.Stepped]] = {}
        self.retired = False
        """Ended because it was idle: no warning when its output ends."""
        self.reading: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        """Set when it said it has opened the store and may take steps."""

    def alive(self) -> bool:
        return self.p.returncode is None and not self.retired

    def kill(self) -> None:
        if self.p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.p.kill()


class RemotePusher:
    def __init__(self, settings: Settings, reader: str, *, idle_s: float = _IDLE_S) -> None:
        self._idle_s = idle_s
        self._init = wire.frame(wire.Init(_settings_json(settings), reader))
        self._slack_s = settings.replay_step_slack_s
        self._proc: _Proc | None = None
        self._ids = itertools.count(1)
        self._down_until = 0.0
        self._starting = asyncio.Lock()
        self._closed = False
        self._last_step = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._warming: set[asyncio.Task[None]] = set()

    @property
    def pid(self) -> int | None:
        p = self._proc
        return p.p.pid if p is not None and p.alive() else None

    def available(self) -> bool:
        """Whether a step may be asked now (not after a recent failure, not closed)."""
        return not self._closed and time.monotonic() >= self._down_until

    def ready(self) -> bool:
        """Whether a process is up and has said it takes steps. When not, :meth:`warm`
        starts one, and replays go on in the broker meanwhile (no start-up gap)."""
        p = self._proc
        return p is not None and p.alive() and p.ready.is_set() and self.available()

    async def up(self, timeout: float) -> None:
        """Return once a process is ready, has failed, or ``timeout`` passed, starting one
        if none is up (a failed start leaves replays in the broker for a while)."""
        if self.ready() or not self.available():
            return
        self.warm()
        until = time.monotonic() + timeout
        while not self.ready() and self.available() and time.monotonic() < until:
            proc = self._proc
            if proc is None:
                await asyncio.sleep(0.01)  # being spawned
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(until - time.monotonic()):
                    await proc.ready.wait()
            if not proc.alive():
                return

    def warm(self) -> None:
        """Start a process in the background, unless one is up or starting."""
        if self.available() and not self._starting.locked() and (self._proc is None or not self._proc.alive()):
            task = asyncio.get_running_loop().create_task(self._warm())
            self._warming.add(task)
            task.add_done_callback(self._warming.discard)

    async def _warm(self) -> None:
        with contextlib.suppress(PusherUnavailable):
            await self._started()

    async def _started(self) -> _Proc:
        async with self._starting:
            proc = self._proc
            if proc is not None and proc.alive():
                return proc
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
            assert p.stdin is not None
            p.stdin.write(self._init)
            proc = self._proc = _Proc(p)
            proc.reading = asyncio.create_task(self._read(proc), name="tidings-replay-pusher-answers")
            log.info("replay process %d started", p.pid)
            return proc

    def _down(self, why: str) -> None:
        self._down_until = time.monotonic() + _RESTART_AFTER_S
        log.warning("replay process: %s; replays run in the broker for %g s", why, _RESTART_AFTER_S)

    async def _read(self, proc: _Proc) -> None:
        out = proc.p.stdout
        assert out is not None
        try:
            while True:
                size = int.from_bytes(await out.readexactly(4), "big")
                answer = wire.decode_answer(await out.readexactly(size))
                if isinstance(answer, wire.Ready):
                    proc.ready.set()
                    continue
                fut = proc.waiting.pop(answer.req, None)
                if fut is None or fut.done():
                    continue
                if isinstance(answer, wire.Failed):
                    fut.set_exception(PusherUnavailable(answer.error))
                else:
                    fut.set_result(answer)
        except (asyncio.IncompleteReadError, ConnectionError, msgspec.DecodeError) as e:
            if not self._closed and not proc.retired:
                self._down(f"process {proc.p.pid} ended ({type(e).__name__})")
        finally:
            self._end(proc)

    def _end(self, proc: _Proc) -> None:
        proc.kill()
        for fut in proc.waiting.values():
            if not fut.done():
                fut.set_exception(PusherUnavailable("the replay process ended"))
        proc.waiting.clear()
        proc.ready.set()  # a step waiting for it to be up finds it gone
        if self._proc is proc:
            self._proc = None

    async def step(self, **fields: object) -> wire.Stepped:
        """One step (``wire.Step``'s fields but ``req``); raises ``PusherUnavailable``."""
        proc = await self._started()
        req = next(self._ids)
        s = wire.Step(req=req, **fields)  # type: ignore[arg-type]
        fut: asyncio.Future[wire.Stepped] = asyncio.get_running_loop().create_future()
        proc.waiting[req] = fut
        stdin = proc.p.stdin
        assert stdin is not None
        try:
            async with asyncio.timeout(s.deadline_s + self._slack_s):
                await proc.ready.wait()
                stdin.write(wire.frame(s))
                return await asyncio.shield(fut)
        except TimeoutError:
            self._down(f"process {proc.p.pid} did not answer a step within {s.deadline_s + self._slack_s:g} s")
            self._end(proc)
            raise PusherUnavailable("the replay process hung") from None
        except (ConnectionError, RuntimeError) as e:  # its stdin closed under us
            raise PusherUnavailable(str(e)) from None
        finally:
            proc.waiting.pop(req, None)
            self._last_step = time.monotonic()
            if self._idle_timer is None:
                self._idle_timer = asyncio.get_running_loop().call_later(self._idle_s, self._end_if_idle)

    def _end_if_idle(self) -> None:
        self._idle_timer = None
        proc = self._proc
        if proc is None or not proc.alive():
            return
        idle = time.monotonic() - self._last_step
        if proc.waiting or idle < self._idle_s:
            self._idle_timer = asyncio.get_running_loop().call_later(self._idle_s - idle + 0.1, self._end_if_idle)
            return
        proc.retired = True  # the next step starts another
        self._proc = None
        if proc.p.stdin is not None:
            proc.p.stdin.close()  # it ends at the end of its input
        log.info("replay process %d ended: idle for %g s", proc.p.pid, self._idle_s)

    def forget(self, replay: int) -> None:
        proc = self._proc
        if proc is not None and proc.alive() and proc.p.stdin is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                proc.p.stdin.write(wire.frame(wire.Forget(replay)))

    async def close(self) -> None:
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        for task in list(self._warming):
            task.cancel()
        await asyncio.gather(*self._warming, return_exceptions=True)
        proc = self._proc
        if proc is None:
            return
        p = proc.p
        if p.stdin is not None:
            with contextlib.suppress(Exception):
                p.stdin.close()  # it ends at the end of its input
        try:
            await asyncio.wait_for(p.wait(), 5)
        except TimeoutError:
            proc.kill()
            await p.wait()
        if proc.reading is not None:
            proc.reading.cancel()
            with contextlib.suppress(BaseException):
                await proc.reading
