"""``tidings tail NAMESPACE|PATTERN``: print events as they are published.

A ``stream:`` subscription of the command's own (``tidings:subscription:leaseMs``) is
pushed over one stream connection; the command deletes it when it ends, and the service
ends it by itself once no connection has listened to it for the lease (a killed tail
leaves nothing behind). Each push is answered only once its lines are written, so a slow
terminal holds one push in flight and the rest stays in the service's log.

``--from ID`` replays ``[ID, end)`` (ICRC-77) to the same subscription, ``end`` being one
past the last event when the replay is registered. Live pushes that come before the
replay has completed are answered with back-pressure (pushed again shortly, not counted
as attempts); once it has completed, live events below ``end`` are the replay's and are
not printed again. Events are printed once per ``(namespace, eventId)`` even when a
push is sent again (a lost answer, a restart of the server: the command reconnects).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import secrets
import signal
import stat
import sys

import msgspec

from ._cli_api import explain, say, status_of
from ._cli_profiles import Target
from .client import ClientError, EventNotification, ItemError, Replays, RetryLater, Stream, Subscriber, to_python
from .core.values import map_get

__all__ = ["run_tail"]

_REPLAY_ID = "icrc77:replay:id"
_WAIT_S = 0.2
"""How soon a live push held back during the replay is pushed again."""
_encode = msgspec.json.Encoder(enc_hook=repr).encode


def _skip(text: str | None) -> list[int] | None:
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--skip {text!r}: expected MOD or MOD,OFFSET (non-negative integers)")
    return [int(p) for p in parts]


class _Tail:
    def __init__(self, args: argparse.Namespace, stop: asyncio.Event) -> None:
        self.args = args
        self.stop = stop
        self.printed = 0
        self.last: dict[str, int] = {}
        """The highest eventId printed per namespace: what is pushed again is not printed again."""
        self.replaying = args.start is not None
        self.end: int | None = args.start
        """Below it, live events are the replay's."""
        self.lock = asyncio.Lock()

    async def handle(self, n: EventNotification) -> None:
        replayed = map_get(n.headers, _REPLAY_ID) is not None
        if not replayed:
            if self.replaying:
                raise RetryLater(_WAIT_S)
            if self.end is not None and n.namespace == self.args.namespace and n.eventId < self.end:
                return
        if self.stop.is_set() or n.eventId <= self.last.get(n.namespace, 0):
            return
        self.last[n.namespace] = n.eventId
        line = self.format(n)
        async with self.lock:  # written in a thread: a slow terminal holds the push, not the loop
            try:
                await asyncio.to_thread(_write, line)
            except BrokenPipeError:  # `tidings tail ... | head -3`: the reader is gone, so is the tail
                self.stop.set()
                return
        self.printed += 1
        if self.args.count is not None and self.printed >= self.args.count:
            self.stop.set()

    def format(self, n: EventNotification) -> str:
        data = n.data if self.args.typed else to_python(n.data)
        if self.args.json:
            headers = {k: (v if self.args.typed else to_python(v)) for k, v in n.headers}
            return _encode({"namespace": n.namespace, "eventId": n.eventId, "timestamp": n.timestamp,
                            "source": n.source, "data": data, "headers": headers}).decode()
        when = datetime.datetime.fromtimestamp(n.timestamp / 1e9, datetime.UTC).isoformat(timespec="milliseconds")
        return f"{when[:-6]}Z {n.namespace} #{n.eventId} {_encode(data).decode()}"


def _write(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def run_tail(args: argparse.Namespace, target: Target) -> int:
    if args.start is not None and "*" in args.namespace:
        say("tidings: --from replays one namespace: give a namespace, not a pattern")
        return 2
    if not 1 <= args.lease <= 86_400 or (args.count is not None and args.count < 1):
        say("tidings: --lease is 1 to 86400 seconds; --count at least 1")
        return 2
    try:
        skip = _skip(args.skip)
    except ValueError as e:
        say(f"tidings: {e}")
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    tail = _Tail(args, stop)
    _end_when_reader_leaves(loop, stop)
    admin = Subscriber(lambda n: None, url=target.url, token=target.token)
    replays = Replays(target.url, target.token)
    sub_id: int | None = None
    try:
        sub_id = await admin.subscribe(
            args.namespace, f"stream:tail-{secrets.token_hex(6)}", filter=args.filter, skip=skip,
            config={"tidings:subscription:leaseMs": int(args.lease * 1000),
                    "tidings:subscription:ackDeadlineMs": 600_000},
        )
        watcher = asyncio.create_task(_listen(target, sub_id, tail, stop))
        if args.start is not None:
            await _replay(replays, args, sub_id, tail, stop)
        await stop.wait()
        return await watcher
    except ClientError as e:
        say(f"tidings: {explain(e)}")
        return status_of(e)
    finally:
        stop.set()
        with contextlib.suppress(ClientError):
            if sub_id is not None:
                await admin.unsubscribe(sub_id)
        await admin.close()
        await replays.close()


def _end_when_reader_leaves(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """``tidings tail | head -1``: the reader may leave after a line whose write already
    succeeded, and no further write may ever come to fail. A pipe's write end reports an
    error to epoll once its reader has gone; stop then, not at the next event."""
    try:
        fd = sys.stdout.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):
        return
    if not stat.S_ISFIFO(mode):  # a socket would also wake on data its peer sends
        return

    def gone() -> None:
        loop.remove_reader(fd)
        stop.set()

    with contextlib.suppress(OSError, ValueError, NotImplementedError):
        loop.add_reader(fd, gone)


async def _replay(replays: Replays, args: argparse.Namespace, sub_id: int, tail: _Tail, stop: asyncio.Event) -> None:
    try:
        rid = await replays.register(args.namespace, args.start, None, subscription=sub_id)
    except ItemError as e:
        if e.code != "ImproperConfig":  # an empty range: nothing to replay, live from ID on
            raise
        tail.replaying = False
        return
    while not stop.is_set():
        try:
            status = await replays.status(rid)
        except ClientError:  # the server restarting: the replay resumes with it
            status = None
        if status is not None:
            state = msgspec.structs.asdict(status.status) if isinstance(status.status, msgspec.Struct) else {}
            end = map_get(status.stats, "icrc77:replay:stats:end_id")
            if isinstance(end, dict) and isinstance(end.get("Nat"), int):
                tail.end = end["Nat"]
            done = [k for k, v in state.items() if v is not msgspec.UNSET and k != "running" and k != "pending"]
            if done:
                if done[0] != "completed":
                    say(f"tidings: the replay ended {done[0]}: {state[done[0]]}; continuing live")
                tail.replaying = False
                return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)


async def _listen(target: Target, sub_id: int, tail: _Tail, stop: asyncio.Event) -> int:
    """Hold a connection listening to the subscription; reconnect while the lease lasts."""
    lost_at: float | None = None
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        stream = Stream(target.url, target.token, handler=tail.handle)
        try:
            await stream.connect()
            (r,) = await stream.listen([sub_id])
            if r is None or r.Err is not msgspec.UNSET:
                say(f"tidings: cannot listen to subscription {sub_id}: {r}")
                stop.set()
                return 1
            lost_at = None
            closed = asyncio.ensure_future(stream.wait_closed())
            halted = asyncio.ensure_future(stop.wait())
            await asyncio.wait([closed, halted], return_when=asyncio.FIRST_COMPLETED)
            closed.cancel()
            halted.cancel()
        except ClientError as e:
            if lost_at is None:
                lost_at = loop.time()
            if loop.time() - lost_at > tail.args.lease:
                say(f"tidings: {explain(e)}")
                stop.set()
                return 2
        finally:
            await stream.close()
        if not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    return 0

