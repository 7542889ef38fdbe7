"""The writes a subscription's worker makes behind its pushes, so that the next push need
not wait for a commit: settling confirmed notifications, counting what a ``oneshot``
endpoint took, and what happens when one of them fails (``Behind._unrecorded``: the worker
starts again from the store, so a later record never steps over a failed one)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from ...errors import LeaseLost
from ...store import Fence, SubscriptionRecord
from ._accounting import per_notification_stats
from ._notes import Note
from ._ports import BehindHub

__all__ = ["Behind"]

log = logging.getLogger("tidings.delivery")


class Behind:
    """The write-behind half of a subscription's worker (``_worker.Worker``)."""

    d: BehindHub
    sub: SubscriptionRecord
    fence: Fence | None
    settling: set[asyncio.Task[Any]]
    write_failed: Exception | None
    wakeup: asyncio.Event

    def _settle(self, done: list[Note]) -> None:
        """Settle confirmed notifications without holding up the next push.

        The next batch of this subscription would otherwise wait for this commit, adding
        a commit to the latency of every event that arrives meanwhile. The writer runs
        jobs in the order queued, so nothing reads a state older than what was pushed;
        a settle lost to a crash leaves the notifications pending, to be sent again."""
        self._background(self._settle_now(done))

    def _background(self, job: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
        """Run a store write beside the next push; ``settled`` waits for them."""
        tg = self.d.task_group
        if tg is None:  # shutting down: the notifications stay pending
            job.close()
            return None
        task = tg.create_task(job)
        self.settling.add(task)
        task.add_done_callback(self.settling.discard)
        return task

    def _unrecorded(self, what: str, n: int, e: Exception) -> None:
        """A write behind the pushes failed: nothing after it may be recorded past it.
        The worker starts again from what the store holds (its cursor and pending
        notifications), pushing again what the failed write would have recorded."""
        if isinstance(e, LeaseLost):
            log.warning("subscription %s: %s", self.sub.id, e)
        else:
            log.error("subscription %s: %s %d notification(s) failed: %s: %s; starting again from the store",
                      self.sub.id, what, n, type(e).__name__, e)
        self.write_failed = e
        self.wakeup.set()

    async def _mark_sent(self, batch: list[Note]) -> None:
        """Count what a oneshot endpoint took as sent, once per notification."""
        try:
            stats = per_notification_stats(self.sub, batch, "notifications")
            await self.d.store.mark_sent([n.id for n in batch], stats, fence=self.fence)
        except Exception:  # counted when it is confirmed instead; never fail the task group
            log.exception("subscription %s: counting %d notification(s) as sent failed", self.sub.id, len(batch))

    async def _settle_now(self, done: list[Note]) -> None:
        try:
            settled = set(await self.d.store.settle_notifications(
                [n.id for n in done], per_notification_stats(self.sub, done, "confirmations"),
                per_notification_stats(self.sub, done, "notifications"), fence=self.fence,
            ))
        except Exception as e:  # they stay pending and are sent again; never fail the task group
            self._unrecorded("settling", len(done), e)
            return
        # A replayed event's age is not a delivery latency (docs/replay.md).
        self.d.metrics.confirmed(self.d.now_ns(), [
            n.event.timestamp for n in done if n.id in settled and b'"icrc77:replay:id"' not in n.event.headers
        ])

    async def settled(self) -> None:
        """Wait until the confirmations of what was pushed so far are stored."""
        while self.settling:
            await asyncio.gather(*self.settling, return_exceptions=True)
