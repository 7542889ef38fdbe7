"""What a subscription's worker pushes again, and when it gives a notification up.

* Pending notifications in the store (after a restart, a start, a redrive) are pushed
  again in event order (``_resend``).
* In ``oneshot`` mode, a notification not confirmed within the subscription's ack
  deadline is pushed again with every unconfirmed one after it, in event order
  (``_resend_overdue``), so the subscriber never sees a later re-push before an earlier one.
* A notification older than the subscription's maximum age, or failed as many times as
  its attempt limit, becomes a dead letter whose reason is a short code (``_expire``).

Every timing here is the subscription's own when it sets one (``tidings.core.config``),
the service's setting otherwise. The worker (``_worker.Worker``) builds on this.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...core.config import SubscriptionConfig
from ...core.retry import Backoff
from ...store import DeadLetter, Fence, PendingNotification, SubscriptionRecord
from ._accounting import event_stats
from ._notes import Note
from ._ports import RedeliveryHub

__all__ = ["ATTEMPTS_EXHAUSTED", "ERROR_ANSWER", "MAX_AGE", "Redelivery"]

log = logging.getLogger("tidings.delivery")

# Dead-letter reasons (``DeadLetterInfo.reason``): short, stable codes.
ATTEMPTS_EXHAUSTED = "attempts_exhausted"
MAX_AGE = "max_age"
ERROR_ANSWER = "error_answer"


def by_event(notes: list[Note]) -> list[Note]:
    # seq is the log's order: event-id order within a namespace, publish order across them.
    return sorted(notes, key=lambda n: (n.event.seq, n.id))


class Redelivery:
    """The re-push and give-up half of a subscription's worker."""

    d: RedeliveryHub
    sub: SubscriptionRecord
    fence: Fence | None
    parked: bool
    unconfirmed: dict[int, tuple[Note, float]]
    redriven: list[PendingNotification]

    async def deliver(self, batch: list[Note]) -> None:
        raise NotImplementedError

    def _stopped(self) -> bool:
        raise NotImplementedError

    async def _resend_stored(self) -> None:
        await self._resend(await self.d.store.pending(self.sub.id))

    async def _resend(self, pending: Sequence[PendingNotification], background: bool = False) -> None:
        """Send ``pending`` again in order; ``background`` (a redrive of dead letters):
        each batch waits for other subscriptions' live work first (``_yielding``)."""
        size = self.d.settings.delivery_batch_size
        ordered = sorted(pending, key=lambda p: (p.seq, p.id))
        for i in range(0, len(ordered), size):
            if self._stopped():
                self.parked = True  # the rest stays pending in the store
                return
            chunk = ordered[i : i + size]
            if background:
                await self.d.gate.turn(len(chunk), self.sub.id)
            events = await self.d.events_of(chunk)
            notes = [Note(p.id, events[p.id], p.attempts, p.created_at) for p in chunk if p.id in events]
            await self.deliver(await self._expire(notes, None))

    async def _resend_redriven(self) -> None:
        while self.redriven:
            batch, self.redriven = self.redriven, []
            await self._resend(batch, background=True)

    async def _resend_overdue(self) -> None:
        if not self.unconfirmed:
            return
        deadline = self.d.monotonic() - self._ack_deadline(oneshot=True)
        if not any(t <= deadline for _, t in self.unconfirmed.values()):
            return
        # A confirmation that came while its push was still open found nothing to clear
        # in ``unconfirmed``: ask the store what is still pending before sending again.
        waiting = [n for n, _ in self.unconfirmed.values()]
        pending = {p.id for p in await self.d.store.get_notifications([n.id for n in waiting])}
        for n in waiting:
            if n.id not in pending:
                self.unconfirmed.pop(n.id, None)
        waiting = by_event([n for n in waiting if n.id in pending])
        overdue = [n for n in waiting if self.unconfirmed[n.id][1] <= deadline]
        if not overdue:
            return
        # Order per subscription holds across re-pushes: the earliest overdue notification
        # is pushed again together with every unconfirmed one after it, in event order (as
        # Pub/Sub's ordered delivery does), so the subscriber never sees a later event's
        # re-push before an earlier one's.
        first = waiting.index(overdue[0])
        again = waiting[first:]
        for n in again:
            self.unconfirmed.pop(n.id, None)
        again = await self._expire(again, "not confirmed within the ack deadline")
        await self._count_retries(again)
        self.d.metrics.notifications_retried += len(again)
        size = self.d.settings.delivery_batch_size
        for i in range(0, len(again), size):
            await self.deliver(again[i : i + size])

    def _conf(self) -> SubscriptionConfig:
        return self.d.registry.sub_configs.get(self.sub.id) or SubscriptionConfig()

    def _ack_deadline(self, *, oneshot: bool) -> float:
        s = self.d.settings
        own = self._conf().ack_deadline_s
        return own if own is not None else (s.ack_deadline_s if oneshot else s.push_timeout_s)

    def _backoff(self) -> Backoff:
        s, c = self.d.settings, self._conf()
        return Backoff(
            c.retry_initial_s if c.retry_initial_s is not None else s.retry_initial_s,
            c.retry_max_s if c.retry_max_s is not None else s.retry_max_s,
        )

    def _max_age_ns(self) -> float:
        c = self._conf()
        return (c.max_age_s if c.max_age_s is not None else self.d.settings.max_age_s) * 1e9

    async def _expire(self, notes: list[Note], failure: str | None) -> list[Note]:
        """Dead-letter the notes past their age limit, and, after a failed try
        (``failure`` says what failed), those past their attempt limit; return the others."""
        s, c = self.d.settings, self._conf()
        max_attempts = c.max_attempts or s.max_attempts
        oldest = self.d.now_ns() - self._max_age_ns()
        aged = [n for n in notes if n.created_at <= oldest]
        tried = [n for n in notes if failure is not None and n.created_at > oldest and n.attempts >= max_attempts]
        if aged:
            await self._dead_letter(aged, MAX_AGE, failure or "not confirmed in time")
        if tried:
            await self._dead_letter(tried, ATTEMPTS_EXHAUSTED, failure or "")
        gone = {n.id for n in aged} | {n.id for n in tried}
        return [n for n in notes if n.id not in gone]

    async def _count_retries(self, notes: list[Note]) -> None:
        """Count a failed try of each of ``notes``, which are to be pushed again: a retry
        each (one given up on instead is counted as dead-lettered, not retried)."""
        if notes:
            await self.d.store.count_attempt(
                [n.id for n in notes], event_stats(self.sub, [n.event for n in notes], "retries", prefix="tidings"),
                fence=self.fence,
            )

    async def _dead_letter(self, notes: list[Note], reason: str, detail: str) -> None:
        now = self.d.now_ns()
        sub = self.sub
        letters = [
            DeadLetter(id=n.id, subscription_id=sub.id, subscriber=sub.subscriber, seq=n.event.seq,
                       namespace=n.event.namespace, event_id=n.event.id, attempts=n.attempts, reason=reason,
                       dead_at=now)
            for n in notes
        ]
        stats = event_stats(sub, [n.event for n in notes], "deadLetters", prefix="tidings")
        moved = await self.d.store.dead_letter(letters, stats, fence=self.fence)
        self.d.metrics.notifications_dead_lettered += len(moved)
        log.warning("subscription %s: %d notification(s) dead-lettered (%s): %s", sub.id, len(moved), reason, detail)
