"""The console's live feeds as server-sent events: counters of subscriptions for the
charts, and the tail of a namespace.

The page reads them with ``fetch`` (so the bearer token travels in the Authorization
header, as for every other request; ``EventSource`` cannot send one). Each feed checks
the token and the caller's right again on every tick: a revoked token or a lost right
ends the stream within a tick. A feed also ends after ``lifetime_s``, and within a tick of
the server starting to shut down (``stopping``); the page reconnects, and the tail resumes
after the last event it showed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from ..broker import Broker
from ..errors import ApiError
from ..store import PrincipalRecord
from .queries import event_view, may_tail, subscription_counters, visible_subscription

__all__ = ["MAX_WATCHED", "sse", "stats_feed", "tail_feed"]

MAX_WATCHED = 20
"""Subscriptions one stats feed follows at most (one page of the table)."""
_encode = msgspec.json.Encoder().encode
Recheck = Callable[[], Any]
Stopping = Callable[[], bool]


def sse(event: str, data: Any) -> bytes:
    """One server-sent event: its name and JSON data on one line."""
    return b"event: " + event.encode() + b"\ndata: " + _encode(data) + b"\n\n"


async def _still_allowed(recheck: Recheck) -> str | None:
    try:
        await recheck()
    except ApiError as e:
        return e.message
    return None


async def stats_feed(
    b: Broker, caller: PrincipalRecord, ids: list[int], recheck: Recheck, stopping: Stopping,
    interval_s: float = 1.0, lifetime_s: float = 300.0,
) -> AsyncIterator[bytes]:
    """Every ``interval_s``, the counters of the watched subscriptions the caller may see."""
    end = time.monotonic() + lifetime_s
    while time.monotonic() < end and not stopping():
        refused = await _still_allowed(recheck)
        if refused is not None:
            yield sse("end", {"reason": refused})
            return
        pending = await b.store.pending_counts()
        subs: dict[str, Any] = {}
        for i in ids:
            s = b.orchestrator.subscriptions.get(i)
            if s is not None and visible_subscription(b, caller, s):
                subs[str(i)] = await subscription_counters(b, s, pending)
        yield sse("stats", {"t": time.time_ns() // 1_000_000, "subs": subs})
        await asyncio.sleep(interval_s)


async def tail_feed(
    b: Broker, caller: PrincipalRecord, namespace: str, recheck: Recheck, stopping: Stopping,
    after: int | None = None, backlog: int = 20, interval_s: float = 0.25, lifetime_s: float = 300.0,
) -> AsyncIterator[bytes]:
    """The events of ``namespace`` after the log position ``after``; without one, the last
    ``backlog`` events (of the most recent thousand in the log) first. Each event carries
    its position (``seq``), which a reconnecting page passes back as ``after``."""
    if after is None:
        head = await b.store.head()
        recent = await b.store.read_after(max(0, head - 1000), [namespace], limit=1000)
        for e in recent[-backlog:]:
            yield sse("event", event_view(e))
        position = head
    else:
        position = after
    yield sse("ready", {"position": position})
    end = time.monotonic() + lifetime_s
    while time.monotonic() < end and not stopping():
        refused = await _still_allowed(recheck) or may_tail(b, caller, namespace)
        if refused is not None:
            yield sse("end", {"reason": refused})
            return
        events = await b.store.read_after(position, [namespace], limit=200)
        for e in events:
            position = e.seq
            yield sse("event", event_view(e))
        if not events:
            yield b": tick\n\n"  # a comment: keeps proxies from closing an idle stream
            await asyncio.sleep(interval_s)
