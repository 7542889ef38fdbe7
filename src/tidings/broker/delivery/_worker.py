"""One subscription's delivery worker: reads, records, pushes in order, and retries.

The worker of a subscription reads the events after its position, records the batch as
pending notifications with its new cursor in one commit, and only then pushes it
(``Delivery.post``). One batch is in flight at a time, which keeps order. What an
answer leads to (docs/delivery.md):

* an ack settles the batch (``trusted``) or starts its ack deadline (``oneshot``);
* back-pressure (``429``/``503`` with ``Retry-After``) waits and pushes again, without
  counting a try;
* an error answer or no answer is a failed try: retried with back-off, within the
  subscription's attempt and age limits, then dead-lettered; a subscription that is not
  reliable ends (or dead-letters) on an error answer.

Every timing (ack deadline, back-off, maximum age) is the subscription's own when it
sets one, on every path. Nothing is pushed while the subscription is stopped, retries
included: what is pending stays in the store and is pushed again, in event order, when
it is started. What is pushed again and when a notification is given up on is in
``_redelivery``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ...core.namespaces import is_pattern
from ...core.retry import Outcome
from ...errors import LeaseLost, StoreError
from ...store import PendingNotification, StoredEvent, SubscriptionRecord
from ...tasks import stop_if_cancelled
from ._accounting import event_stats
from ._behind import Behind
from ._direct import DirectPush
from ._notes import ENDPOINT_GONE, NOT_SENT, SUBSCRIPTION_ENDED, Gone, Note, Pushed, failed_items
from ._ports import WorkerHub
from ._redelivery import ERROR_ANSWER, Redelivery

__all__ = ["Worker"]

log = logging.getLogger("tidings.delivery")

_NOT_SENT_PAUSE_S = 0.05
"""After a push that sent nothing (``NOT_SENT``): the lease gate then decides."""


class Worker(Behind, Redelivery, DirectPush):
    d: WorkerHub

    def __init__(self, d: WorkerHub, sub: SubscriptionRecord) -> None:
        self.d = d
        self.sub = sub
        self.fence = d.fence_of(sub.id)
        """The lease this worker delivers under, taken when it starts: every write it makes
        carries it, and a store shared with other broadcasters refuses them once the lease
        has passed to another (``LeaseLost``: the worker ends)."""
        self.scan = sub.cursor
        """Seq of the last event considered; ahead of the stored cursor while events are
        being filtered out, since only a batch that is sent moves the stored one."""
        self.started = False
        """Set when a stopped subscription is started, until the worker has skipped what
        was published while it was stopped (``_skip_stopped``); routing leaves it alone."""
        self.resume_at = 0
        """The end of the log when the subscription was started."""
        self.stopped_at: int | None = None
        """The end of the log when it was stopped: what came before is still delivered."""
        self._skip: tuple[int, int] | None = None
        """Events published while stopped, ``(stopped_at, resume_at]``: not delivered."""
        self.parked = False
        """Stopped with notifications left pending in the store: they are pushed again
        (``_resend_stored``) before anything else when the subscription is started."""
        self.wakeup = asyncio.Event()
        # oneshot mode: notifications pushed and awaiting icrc72_confirm_notifications.
        self.unconfirmed: dict[int, tuple[Note, float]] = {}
        self.redriven: list[PendingNotification] = []
        self.settling: set[asyncio.Task[Any]] = set()
        self.routed: list[tuple[int, StoredEvent]] = []
        """Notifications opened at append (``_routing``), to push next."""
        self.taken: list[StoredEvent] = []
        """Events routed at append to a subscription that pushes before recording
        (``_direct``): recorded nowhere yet, to push next."""
        self.acked = sub.cursor
        """The seq up to which everything owed is recorded in the store, as confirmed or
        as pending (the publication's ``events:sent``)."""
        self.done_upto = sub.cursor
        """The seq up to which everything owed is confirmed or pending; ahead of ``acked``
        while a confirmed batch's record is being written. What a stopped worker took and
        did not push is read again from here (``_park``)."""
        self.generation = 0
        """Counts restarts after failures (``run``)."""
        self.opening: tuple[int, int] | None = None
        """(cursor, generation) of the ``open_notifications`` this worker awaits: once the
        store has it, routing at append may go on from there (``_routing``)."""
        self.resumed = asyncio.Event()
        """Set once this run's first resend of the store's pending notifications is done;
        ``resent`` holds their ids. A replay's push waits for it and leaves those out:
        a replay that records its notifications while the worker starts would otherwise
        see them pushed twice, by the replay and by the resend."""
        self.resent: set[int] = set()
        self.dormant = False
        """Stopped, its task ended: a stopped subscription costs no task while it waits
        (``Delivery.subscription_changed`` starts one again)."""
        self.leaving = False
        """Handed to another broadcaster (``Delivery.hand_off``): end as when draining."""
        self.write_failed: Exception | None = None
        """A store write made behind the pushes (a settle, a confirmed batch's record)
        that failed: the worker starts again from the store before anything else."""

    def confirmed(self, nid: int) -> None:
        if self.unconfirmed.pop(nid, None) is not None and self.saturated(1):
            self.wakeup.set()  # room again below the cap: read on

    def saturated(self, slack: int = 0) -> bool:
        """Whether this subscription has as many notifications pushed and unconfirmed (or
        routed and not yet pushed) as it may (``max_unconfirmed_per_subscription``): it
        then reads no further, and routing leaves it to read the log itself later."""
        cap = self.d.settings.max_unconfirmed_per_subscription
        return len(self.unconfirmed) + len(self.routed) + len(self.taken) + slack >= cap

    async def run(self) -> None:
        """Deliver until the subscription is deleted or ended, surviving failures.

        An unexpected error (the store refusing a write, say) must not stop this
        subscription for good, nor, through the task group, every other one while
        publishes are still accepted: the worker logs it, backs off, and starts again
        from what the store holds (its cursor and its pending notifications)."""
        failures = 0
        last_failure = self.d.monotonic()
        while True:
            stop_if_cancelled()  # ``_stored`` may have returned from a cancel as if done
            try:
                await self._run()
                return
            except LeaseLost as e:
                # Another broadcaster holds the lease now: it sends again what is pending.
                log.warning("subscription %s: %s; stopping here", self.sub.id, e)
                self.d.lease_lost(self.sub.id)
                return
            except Exception as e:  # CancelledError is not an Exception: shutdown still works
                stop_if_cancelled(e)  # ...unless a client library turned it into its own error
                self.generation += 1  # routes planned before this no longer move ``scan``
                if self.d.monotonic() - last_failure > 60:
                    failures = 0  # an outage long past does not slow the restart after this one
                last_failure = self.d.monotonic()
                failures += 1
                delay = min(30.0, 0.25 * 2 ** min(failures, 7))
                self.d.metrics.worker_restarts += 1
                if isinstance(e, StoreError):  # the store's trouble, said in its message: no traceback
                    log.warning("subscription %s: %s; restarting in %.2f s", self.sub.id, e, delay)
                else:
                    log.exception("subscription %s: delivery failed; restarting in %.2f s", self.sub.id, delay)
                stored = await self._stored(delay)
                if not stored:
                    return
                # Back to what is stored: what was read but not opened is read again. (An
                # event routed meanwhile may then be sent twice: at least once, still.)
                self.sub.cursor = self.scan = self.acked = self.done_upto = stored[0].cursor
                self.unconfirmed.clear()  # still pending in the store: sent again by _resend_stored
                self.routed.clear()  # likewise
                self.taken.clear()  # past the stored cursor: read again
                self._last_record = None  # what it recorded, or failed to, is in the store now

    async def _stored(self, delay: float) -> list[SubscriptionRecord]:
        """The subscription as stored, read after ``delay`` and again, with back-off, for
        as long as the store cannot be read."""
        while True:
            await self.d.sleep(delay)
            try:
                return [r for r in await self.d.store.list_subscriptions(self.sub.namespace) if r.id == self.sub.id]
            except StoreError as e:
                stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                delay = min(30.0, delay * 2)
                log.warning("subscription %s: reading it back failed (%s); again in %.2f s", self.sub.id, e, delay)

    async def _run(self) -> None:
        s = self.d.settings
        registry = self.d.registry
        try:
            await self.settled()  # started again after dormancy: what is being confirmed is not resent
            self.resumed.clear()
            try:
                pending = await self.d.store.pending(self.sub.id)
                self.resent = {p.id for p in pending}
                await self._resend(pending)
            finally:
                self.resumed.set()
            while True:
                stop_if_cancelled()  # a store call may have returned from a cancel as if done
                # Cleared before looking for work, not when going idle: a wake-up that
                # comes while this round awaits (a route, a redrive, new events) is kept,
                # and the worker looks again instead of sleeping on work already queued.
                self.wakeup.clear()
                if self.d.draining or self.leaving:  # what was pushed is recorded; then end
                    await self.settled()
                    return
                if self.write_failed is not None:
                    failed, self.write_failed = self.write_failed, None
                    await self.settled()
                    raise failed
                if not self.taken:
                    # Nothing in flight: everything considered is confirmed, pending or
                    # filtered out; and recorded, once no record is being written.
                    self.done_upto = max(self.done_upto, self.scan)
                    if not self.recording:
                        self.acked = max(self.acked, self.scan)
                conf = registry.sub_configs.get(self.sub.id)
                if conf is None:  # deleted
                    return
                if conf.stopped:
                    # Everything owed is pending in the store (``_park``): nothing to wait
                    # for here, so end the task rather than hold one per stopped subscription.
                    self._park()
                    self.parked = False  # the next run begins by sending the store's pending
                    self.dormant = True
                    return
                if self.parked:
                    self.parked = False
                    await self.settled()  # what was confirmed meanwhile is not sent again
                    await self._resend_stored()
                    continue
                await self._resend_redriven()
                await self._resend_overdue()
                if self.routed:
                    batch, self.routed = self.routed[:s.delivery_batch_size], self.routed[s.delivery_batch_size:]
                    now = self.d.now_ns()
                    await self.deliver([Note(i, e, 0, now) for i, e in batch])
                    continue
                if self.taken:
                    events, self.taken = self.taken[:s.delivery_batch_size], self.taken[s.delivery_batch_size:]
                    if not await self._send(events, events[-1].seq):
                        return
                    continue
                if self.started and self._skip is None:
                    # Events published while stopped are not delivered (a replay can fetch
                    # them); those published before the stop and not read yet still are.
                    start = self.stopped_at if self.stopped_at is not None else self.scan
                    self._skip = (start, max(start, self.resume_at))
                    self.stopped_at = None
                await self._skip_stopped()
                if self.saturated():
                    await self._idle()  # a confirmation or the oldest's ack deadline wakes it
                    continue
                events = await self._next(s.delivery_batch_size)
                if not events:
                    if self._skip is not None and self.scan >= self._skip[0]:
                        continue  # past the stop: _skip_stopped jumps over the rest
                    await self._idle()
                    continue
                if s.delivery_linger_ms > 0 and len(events) < s.delivery_batch_size:
                    await self.d.sleep(s.delivery_linger_ms / 1000)
                    more = await self._next(s.delivery_batch_size - len(events), after=events[-1].seq)
                    events = events + more
                last = events[-1].seq
                ns = None if is_pattern(self.sub.namespace) else self.sub.namespace
                passing = registry.deliverable(self.sub.subscriber, conf, events, self.d.data_of, ns)
                if not passing:
                    self.scan = max(self.scan, last)
                    continue
                if not await self._send(passing, last):
                    return  # the subscription was deleted under us
        except Gone as gone:
            await self.d.ended(self.sub.id, gone)

    async def _send(self, events: list[StoredEvent], cursor: int) -> bool:
        """Deliver ``events``, everything up to seq ``cursor`` that passes: pushed first
        (``_direct``), or recorded as pending with the new cursor in one commit, then
        pushed. False if the subscription is gone."""
        # Live work under way, however the events came: routed, woken, or read by a worker
        # that started after they were appended (a lease taken at the next heartbeat).
        self.d.gate.arrived(self.sub.id)
        if self.direct():
            self.scan = max(self.scan, cursor)
            return await self.push_direct(events, cursor)
        # Counted as recorded now, as sent when the endpoint takes them (``_settle``,
        # ``_mark_sent``).
        self.opening = (cursor, self.generation)
        try:
            ids = await self.d.store.open_notifications(
                self.sub.id, events, cursor, event_stats(self.sub, events, "recorded", prefix="tidings"),
                fence=self.fence,
            )
        finally:
            self.opening = None
        if not ids:
            return False
        self.scan = max(self.scan, cursor)
        self.acked, self.done_upto = max(self.acked, cursor), max(self.done_upto, cursor)
        now = self.d.now_ns()
        await self.deliver([Note(i, e, 0, now) for i, e in zip(ids, events, strict=True)])
        return True

    def drop_taken(self) -> None:
        """Forget the events taken and not pushed: read again from ``done_upto``."""
        if self.taken:
            self.taken.clear()
            self.scan = min(self.scan, self.done_upto)

    def _stopped(self) -> bool:
        """Nothing more is pushed: the subscription is stopped, or the process is
        (what is not pushed stays pending in the store)."""
        if self.d.draining or self.leaving:
            return True
        conf = self.d.registry.sub_configs.get(self.sub.id)
        return conf is not None and conf.stopped

    def _park(self) -> None:
        """Stopped: forget what is queued in memory. All of it is pending in the store
        (routed and redriven notifications, pushes awaiting confirmation), and is pushed
        again from there, in order, when the subscription is started."""
        if self.routed or self.unconfirmed or self.redriven:
            self.parked = True
        self.routed.clear()
        self.unconfirmed.clear()
        self.redriven.clear()
        self.drop_taken()  # recorded nowhere: read again, as published before the stop

    async def _idle(self) -> None:
        self.d.gate.idle(self.sub.id)  # replays waiting for live work may go on
        timeout = None
        if self.unconfirmed and not self._stopped():
            oldest = min(t for _, t in self.unconfirmed.values())
            timeout = max(0.0, oldest + self._ack_deadline(oneshot=True) - self.d.monotonic())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.wakeup.wait()

    async def _skip_stopped(self) -> None:
        """Once everything up to the stop is read, jump over what was published while
        stopped, and let routing serve the subscription again."""
        if self._skip is None or self.scan < self._skip[0]:
            return
        self.scan = max(self.scan, self._skip[1])
        self._skip = None
        self.started = False
        await self.d.store.move_cursor(self.sub.id, self.scan, fence=self.fence)

    async def _next(self, limit: int, after: int | None = None) -> list[StoredEvent]:
        events = await self._read(limit, after)
        if self._skip is not None and events:
            lo, hi = self._skip
            kept = [e for e in events if e.seq <= lo or e.seq > hi]
            if not kept and after is None:
                self.scan = max(self.scan, events[-1].seq)  # considered: all published while stopped
            events = kept
        return events

    async def _read(self, limit: int, after: int | None = None) -> list[StoredEvent]:
        pos = self.scan if after is None else after
        ns = self.d.registry.namespaces_for(self.sub)
        if not ns:
            return []
        events = self.d.tail.read_after(pos, ns, limit)
        if events is None:
            head = self.d.tail.head
            # Nothing past the tail's head: those events may be routed to this worker at
            # append and handed over only after their commit (``_routing``).
            events = [e for e in await self.d.store.read_after(pos, ns, limit) if e.seq <= head]
            if len(events) < limit and after is None:
                # Everything of ours up to the head we knew of is read: skip ahead so the
                # next look is served by the tail again.
                self.scan = max(self.scan, head)
        return events

    async def deliver(self, batch: list[Note], first: Pushed | None = None) -> None:
        """Push until the endpoint takes the batch, or the notifications are given up on.

        Reliable subscriptions retry error answers and failures with back-off, within the
        attempt and age limits, then dead-letter. A subscription that is not reliable
        ends (or, configured so, dead-letters) on an error answer; a push that got no
        answer at all is retried either way. Back-pressure only delays the next push.
        Nothing is pushed once the subscription is stopped: the rest stays pending.
        ``first``: the answer to a push of this batch already made (:meth:`push_once`),
        taken as the first try.
        """
        failures = 0
        metrics = self.d.metrics
        while batch:
            stop_if_cancelled()  # a push answers a cancel turned into an error as "no answer": retried
            if self._stopped():
                self.parked = True
                return
            if first is not None:
                (outcome, answer, reason, retry_after), first = first, None
            else:
                outcome, answer, reason, retry_after = await self.d.post(self.sub, batch, self._conf())
            if outcome is Outcome.GONE:
                raise Gone(ENDPOINT_GONE, reason, {n.id: n.attempts + 1 for n in batch})
            if outcome is Outcome.NO_ANSWER and reason == NOT_SENT:
                # Nothing left: the lease lapsed before the push's first byte. Not a try;
                # the next one waits for the lease (and this worker is stopped if it moved).
                await self.d.sleep(_NOT_SENT_PAUSE_S)
                continue
            if outcome is Outcome.BACK_PRESSURE and retry_after is not None:
                # Not a failed try: neither an attempt nor an error answer (docs/delivery.md).
                metrics.notifications_deferred += len(batch)
                await self.d.sleep(self._backoff().pressure_delay(retry_after, self.d.settings.retry_after_max_s))
                batch = await self._expire(batch, None)
                continue
            for n in batch:
                n.attempts += 1
            if failures:
                metrics.notifications_retried += len(batch)
            conf = self._conf()
            if outcome is Outcome.ACK:
                if self.sub.mode == "oneshot":
                    metrics.notifications_sent += len(batch)
                    self._background(self._mark_sent(batch))
                    now = self.d.monotonic()
                    for n in batch:
                        self.unconfirmed[n.id] = (n, now)
                    return
                failed = failed_items(answer, len(batch))
                done = [n for i, n in enumerate(batch) if i not in failed]
                metrics.notifications_sent += len(done)
                if done:
                    self._settle(done)
                batch = [n for i, n in enumerate(batch) if i in failed]
                if not batch:
                    return
                outcome, reason = Outcome.ERROR_ANSWER, "the endpoint answered Err"
            if outcome is Outcome.ERROR_ANSWER and not conf.reliable:
                if conf.on_error == "deadletter":
                    await self._dead_letter(batch, ERROR_ANSWER, reason)
                    return
                raise Gone(
                    SUBSCRIPTION_ENDED, f"{reason}; not reliable: unsubscribed (XEP-0021 3.5)",
                    {n.id: n.attempts for n in batch},
                )
            batch = await self._expire(batch, reason)
            await self._count_retries(batch)
            if batch:
                failures += 1
                await self.d.sleep(self._backoff().delay(failures, self.d.random()))

    async def push_once(self, batch: list[Note]) -> Pushed | None:
        """One push of a batch recorded nowhere yet (a replay's, ``replay._flow``): what
        :meth:`Delivery.post` answered, or None when the subscription is stopped (nothing
        pushed). Nothing is counted here: a batch the endpoint takes whole is recorded by
        the caller; anything else is recorded as pending and given to :meth:`deliver`
        with this answer as its first try."""
        if self._stopped():
            return None
        return await self.d.post(self.sub, batch, self._conf())
