"""Live batches pushed first and recorded once confirmed (``trusted`` subscriptions).

A batch recorded first costs, per notification, a pending row written before the push
and deleted after it, beside the delivery record; that bookkeeping was half of the
broker's time in fan-out (docs/benchmarks/history/2026-11-26-08-live-pushes-without-rows.md). A ``trusted``
subscription's endpoint confirms a batch by answering its push, so the worker can
instead push first, under ids set aside in the store (:class:`NoteIds`), and write only
what a confirmation leaves: a delivery record per notification, the subscription's
cursor and the counters, in one write beside the next push.

Nothing acknowledged is lost by it: the stored cursor only moves past a batch once its
record, or its pending rows, are written, so after a crash the worker reads from there
and pushes again what was not recorded (at least once, as before; a batch pushed again
after a crash gets new notification ids, its events keep theirs). A batch the endpoint
does not take whole (an ``Err`` item, an error or no answer, back-pressure, ``410``, a
stop) is recorded as pending under the same ids and goes on through the subscription's
own retries with that answer as its first try, exactly as a batch recorded first would.
``oneshot`` subscriptions confirm later, by id, so they always record first.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Coroutine
from typing import Any

from ...store import Fence, Store, StoredEvent, SubscriptionRecord
from ._accounting import counted, event_stats
from ._notes import Note, Pushed, taken_whole
from ._ports import DirectHub

__all__ = ["DirectPush", "NoteIds"]

log = logging.getLogger("tidings.delivery")


class NoteIds:
    """Notification ids for batches pushed before they are recorded, set aside in the
    store a block at a time (``Store.take_notification_ids``): a crash wastes the rest of
    a block, never gives an id twice."""

    def __init__(self, store: Store, block: int = 10_000) -> None:
        self._store = store
        self._block = block
        self._next = self._end = 0
        self._lock = asyncio.Lock()

    async def take(self, n: int) -> int:
        """``n`` consecutive ids; the first."""
        if self._end - self._next < n:
            async with self._lock:
                if self._end - self._next < n:
                    size = max(n, self._block)
                    self._next = await self._store.take_notification_ids(size)
                    self._end = self._next + size
        first = self._next
        self._next += n
        return first


class DirectPush:
    """The push-first half of a subscription's worker (``_worker.Worker``)."""

    d: DirectHub
    sub: SubscriptionRecord
    fence: Fence | None
    acked: int
    done_upto: int
    recording = 0
    """Confirmed batches whose record is being written: until it is, ``acked`` (and the
    publication's ``events:sent``, and its counters) do not count them."""
    wakeup: asyncio.Event

    async def deliver(self, batch: list[Note], first: Pushed | None = None) -> None:
        raise NotImplementedError

    async def push_once(self, batch: list[Note]) -> Pushed | None:
        raise NotImplementedError

    def _background(self, job: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
        raise NotImplementedError

    def _unrecorded(self, what: str, n: int, e: Exception) -> None:
        raise NotImplementedError

    _last_record: asyncio.Task[bool] | None = None
    """The latest confirmed batch's record being written: the next waits for it, so that
    no record moves the cursor past one that failed."""

    def direct(self) -> bool:
        """Whether this subscription's live batches are pushed before being recorded."""
        return self.sub.mode == "trusted" and self.d.settings.push_before_record

    async def push_direct(self, events: list[StoredEvent], cursor: int) -> bool:
        """Push ``events`` (everything up to seq ``cursor`` that passes) first; False if
        the subscription is gone."""
        d = self.d
        base = await d.note_ids.take(len(events))
        now = d.now_ns()
        batch = [Note(base + k, e, 0, now) for k, e in enumerate(events)]
        pushed = await self.push_once(batch)
        if taken_whole(pushed, len(batch)):
            d.metrics.notifications_sent += len(batch)
            self.done_upto = max(self.done_upto, cursor)
            # Written beside the next push; the writer keeps the order of what is queued.
            self.recording += 1
            self._last_record = self._background(self._record_confirmed(batch, cursor, self._last_record))
            return True
        ids = await d.store.open_notifications(
            self.sub.id, events, cursor, event_stats(self.sub, events, "recorded", prefix="tidings"),
            ids=[n.id for n in batch], fence=self.fence,
        )
        if not ids:
            return False
        self.acked, self.done_upto = max(self.acked, cursor), max(self.done_upto, cursor)
        await self.deliver(batch, pushed)
        return True

    async def _record_confirmed(self, batch: list[Note], cursor: int, before: asyncio.Task[bool] | None) -> bool:
        """Record a batch the endpoint took whole, once the record before it is written;
        whether it was."""
        sub, d = self.sub, self.d
        per_ns = Counter(n.event.namespace for n in batch)
        stats = [
            *counted(sub, per_ns, "recorded", "tidings"),
            *counted(sub, per_ns, "confirmations"),
            *counted(sub, per_ns, "notifications"),
        ]
        try:
            if before is not None:
                await asyncio.wait([before])
                if before.cancelled() or before.exception() is not None or not before.result():
                    return False  # the one before failed: this cursor would step over it
            await d.store.record_confirmed(
                sub.id, sub.subscriber, [(n.id, n.event) for n in batch], cursor, stats,
                created_at=batch[0].created_at, now=d.now_ns(), fence=self.fence,
            )
        except Exception as e:  # the cursor stays behind: pushed again from it; never fail the task group
            self._unrecorded("recording confirmed", len(batch), e)
            return False
        else:
            self.acked = max(self.acked, cursor)
            d.metrics.confirmed(d.now_ns(), [n.event.timestamp for n in batch])
            return True
        finally:
            self.recording -= 1
            self.wakeup.set()  # an idle worker moves ``acked`` over what it filtered out since
