"""A replay's pusher: the process (``python -m tidings.broker.replay._pusher``, started by
the broker, never by hand) that reads a replay's range, filters it and pushes its
batches, so that a replay at full speed spends its own interpreter, not the live path's
(docs/replay.md, "Where a replay runs").

It runs in the kernel's idle scheduling class (``replay_idle_class``) at a lower CPU
priority (``replay_nice``): on a busy host the kernel gives the
broker's live work the core first. It decides nothing: the broker sends one ``Step`` per
batch with everything the push needs, and records what the answer says (the position,
the delivery records, the counters) in its own store transaction, under its own fence.
So cancel, pause, a config change, the lease and the credit stay where they were
checked before: in the broker, between two steps.

It dies with the broker (``PR_SET_PDEATHSIG``, and the end of its stdin).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from ...core import webhooks
from ...core.config import SubscriptionConfig
from ...core.filters import compile_predicate, parse
from ...core.replay import kept_id
from ...outbound import Outbound
from ...settings import Settings
from ...store import StoredEvent
from ...store.range_reader import RangeReader, open_range_reader
from ..delivery import Note, PushBodies, answer_of, http_push, policy_for, taken_whole
from . import _pusher_wire as wire
from ._source import ReadAhead, ReplaySource, passing

__all__ = ["main"]

log = logging.getLogger("tidings.replay")
_PR_SET_PDEATHSIG = 1
_NO_CACHE = 2**63
"""``keep_above`` for replayed events: none of them is kept (``PushBodies``)."""
_json = msgspec.json.Encoder()
_PARTS_SLICE = 250
"""Events whose body parts are made between two looks at the event loop, while the
previous batch is pushed."""


def settings_from(raw: bytes) -> Settings:
    def path(t: type, v: Any) -> Any:
        if t is Path:
            return Path(v)
        raise NotImplementedError

    return msgspec.json.decode(raw, type=Settings, dec_hook=path)


def _noted(events: list[StoredEvent], base: int, from_id: int) -> list[Note]:
    """The events under the replay's kept notification ids (``Store.replay_id_base``)."""
    return [Note(kept_id(base, from_id, e.id), e) for e in events]


class _Prepared(NamedTuple):
    """A run's next batch made while the one before it was pushed: read, and its body's
    per-event parts made (``PushBodies.parts``), for the step shaped as ``shape``."""

    n: int
    shape: tuple[int, int, str | None]
    events: list[StoredEvent]
    position: int
    notes: list[Note]
    parts: list[bytes]


class _Run:
    """One replay's reading: the chunk read, what of it passed, and the read ahead."""

    def __init__(self, source: ReplaySource, step: wire.Step) -> None:
        self.key = (step.filter, step.skip, step.namespace, step.before, step.pairs)
        self.at = step.after
        """Where the next batch starts: a step from elsewhere resets the run."""
        self._before = step.before
        self._read_to = step.after
        self._chunk_upto = step.after
        self._buf: deque[StoredEvent] = deque()
        self._ahead = ReadAhead(source, step.namespace, step.before, step.pairs)
        self._conf = SubscriptionConfig(
            filter=step.filter, predicate=None if step.filter is None else compile_predicate(parse(step.filter)),
            skip=step.skip,
        )
        self._prepared: asyncio.Task[_Prepared] | None = None

    async def next(self, n: int) -> tuple[list[StoredEvent], int]:
        """The next batch of at most ``n`` events that pass, and the position after it."""
        if not self._buf:
            events, upto = await self._ahead.read(self._read_to, self._conf.filter)
            if upto < self._before - 1:
                self._ahead.start(upto, self._conf.filter)  # read while this chunk is pushed
            self._buf.extend(passing(self._conf, events))
            self._read_to = self._chunk_upto = upto
        batch = [self._buf.popleft() for _ in range(min(n, len(self._buf)))]
        return batch, batch[-1].id if self._buf else self._chunk_upto

    def prepare(self, n: int, shape: tuple[int, int, str | None], bodies: PushBodies) -> None:
        """Start making the batch after ``self.at`` while the current one is pushed: the
        step that asks for it then only stamps, signs and sends (``take``)."""
        if self.at < self._before - 1 and self._prepared is None:
            self._prepared = asyncio.get_running_loop().create_task(self._prepare(n, shape, bodies))

    async def _prepare(self, n: int, shape: tuple[int, int, str | None], bodies: PushBodies) -> _Prepared:
        events, position = await self.next(n)
        base, from_id, echo = shape
        notes = _noted(events, base, from_id)
        parts: list[bytes] = []
        for k in range(0, len(notes), _PARTS_SLICE):
            await asyncio.sleep(0)  # the push in flight and its answer go first
            parts += bodies.parts(notes[k:k + _PARTS_SLICE], echo, _NO_CACHE)
        return _Prepared(n, shape, events, position, notes, parts)

    async def take(self, n: int, shape: tuple[int, int, str | None] | None) -> _Prepared | None:
        """The prepared batch if it is the one asked for (``n`` events, the same ids and
        filter echo; ``shape`` None: no parts wanted); otherwise its events go back."""
        task, self._prepared = self._prepared, None
        if task is None:
            return None
        got = await task
        if got.n == n and got.shape == shape:
            return got
        self._buf.extendleft(reversed(got.events))
        return None

    def close(self) -> None:
        if self._prepared is not None:
            self._prepared.cancel()
            self._prepared = None
        self._ahead.cancel()


class Pusher:
    def __init__(self, settings: Settings, reader: RangeReader, outbound: Outbound) -> None:
        self._settings = settings
        self._source = ReplaySource(reader, settings)  # type: ignore[arg-type]
        self._outbound = outbound
        self._bodies = PushBodies()
        self._runs: dict[int, _Run] = {}

    def forget(self, replay: int) -> None:
        run = self._runs.pop(replay, None)
        if run is not None:
            run.close()

    async def step(self, s: wire.Step) -> wire.Stepped:
        run = self._runs.get(s.replay)
        if run is None or run.at != s.after or run.key != (s.filter, s.skip, s.namespace, s.before, s.pairs):
            self.forget(s.replay)
            run = self._runs[s.replay] = _Run(self._source, s)
        shape = None if s.cloudevents is not None else (s.base, s.from_id, s.echo_filter)
        ready = await run.take(s.batch, shape)
        parts: list[bytes] | None = None
        if ready is not None:
            events, position, notes, parts = ready.events, ready.position, ready.notes, ready.parts
        else:
            events, position = await run.next(s.batch)
            notes = _noted(events, s.base, s.from_id)
        run.at = position
        if not events:
            return wire.Stepped(req=s.req, position=position, whole=True)

        def now_ns() -> int:
            return time.time_ns() + s.clock_offset_ns

        def signer(sub_id: int, msg_id: str, body: bytes) -> dict[str, str]:
            return webhooks.sign(s.secrets, msg_id, now_ns() // 1_000_000_000, body) if s.secrets else {}

        conf = SubscriptionConfig(filter=s.echo_filter, cloudevents=s.cloudevents)
        body, headers = http_push(
            self._bodies, notes, conf, sub_id=s.sub, mode=s.mode, sent_ns=now_ns(), keep_above=_NO_CACHE,
            epoch=s.epoch, signer=signer, parts=parts,
        )
        if s.act_until is not None and time.monotonic() > s.act_until:
            run.at = -1  # not pushed: the broker records this batch itself, and the next step resets
            return wire.Stepped(req=s.req, position=position, whole=False, events=events)
        if shape is not None:
            run.prepare(s.batch, shape, self._bodies)  # the next batch, while this one is out
        got = await self._outbound.post(
            s.endpoint, body, headers, timeout_s=s.deadline_s, max_bytes=self._settings.answer_max_bytes,
            until=None if s.act_until is None else functools.partial(float, s.act_until),  # as of the step
        )
        pushed = answer_of(got, now_ns())
        if taken_whole(pushed, len(notes)):
            return wire.Stepped(
                req=s.req, position=position, whole=True, seqs=[e.seq for e in events], ids=[e.id for e in events],
                sources=[e.source for e in events], timestamps=[e.timestamp for e in events],
            )
        run.at = -1  # the broker takes this batch over: the next step reads again
        return wire.Stepped(
            req=s.req, position=position, whole=False, outcome=pushed[0].value,
            answer=None if pushed[1] is None else _json.encode(pushed[1]), code=pushed[2], retry_after=pushed[3],
            events=events,
        )

    async def serve(self, reader: asyncio.StreamReader, write: Any) -> None:
        tasks: set[asyncio.Task[None]] = set()

        async def one(s: wire.Step) -> None:
            try:
                answer: wire.Stepped | wire.Failed = await self.step(s)
            except Exception as e:  # said to the broker, which pushes this batch itself
                log.warning("replay %s: the pusher failed a step: %s: %s", s.replay, type(e).__name__, e)
                self.forget(s.replay)
                answer = wire.Failed(s.req, f"{type(e).__name__}: {e}")
            write(wire.frame(answer))

        while True:
            try:
                size = int.from_bytes(await reader.readexactly(4), "big")
                msg = wire.decode_request(await reader.readexactly(size))
            except asyncio.IncompleteReadError:
                return  # the broker is gone
            if isinstance(msg, wire.Forget):
                self.forget(msg.replay)
            elif isinstance(msg, wire.Step):
                t = asyncio.create_task(one(msg))
                tasks.add(t)
                t.add_done_callback(tasks.discard)


async def _main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    size = int.from_bytes(await reader.readexactly(4), "big")
    init = wire.decode_request(await reader.readexactly(size))
    if not isinstance(init, wire.Init):
        raise SystemExit("the first frame is not Init")
    settings = settings_from(init.settings)
    from ...logs import configure

    configure(settings.log_level, settings.log_format, process="replay")
    with contextlib.suppress(OSError):
        os.nice(settings.replay_nice)
    if settings.replay_idle_class and hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):  # not on this kernel, or not allowed: the nice value stays
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    store = await open_range_reader(init.reader, timeout_s=settings.store_timeout_s)
    try:
        async with Outbound(
            policy_for(settings), per_host=settings.outbound_per_host, total=settings.outbound_max_connections,
            connect_timeout_s=settings.connect_timeout_s,
        ) as outbound:
            transport.write(wire.frame(wire.Ready()))
            await Pusher(settings, store, outbound).serve(reader, transport.write)
    finally:
        await store.close()


def main() -> int:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the broker ends it (its stdin closes), not a ^C
    try:
        import uvloop

        uvloop.run(_main())
    except ImportError:
        asyncio.run(_main())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
