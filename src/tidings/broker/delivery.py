"""Push delivery: one worker per subscription POSTs batches of notifications in order.

A worker reads events after its position (from the in-memory tail, or from the store
when it has fallen behind), records the batch as pending notifications together with
its new cursor in one commit, and only then POSTs it. So after a crash every
notification that may have been seen is pending in the store and is sent again: delivery
is at least once, and a repeat carries the same ``(namespace, eventId)``.

Confirmation:

* ``trusted``: a 2xx answer confirms. If its body is a JSON array with one
  ``{"Ok": ...}``/``{"Err": ...}`` per notification, the ``Err`` ones stay pending and are
  sent again after a back-off.
* ``oneshot``: a 2xx answer is only receipt; the subscriber confirms later with
  ``icrc72_confirm_notifications``. What is still unconfirmed after the ack deadline is
  sent again.

One batch is in flight per subscription at a time, which keeps order; a slow endpoint
therefore only slows its own subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import msgspec

from ..core.config import SubscriptionConfig
from ..core.namespaces import is_pattern
from ..core.retry import Backoff, Outcome, classify, retry_after_seconds
from ..core.wire import ConfirmResult, ItemResult, err, ok
from ..settings import Settings
from ..store import (
    DeadLetter,
    PendingNotification,
    PrincipalRecord,
    Stat,
    Store,
    StoredEvent,
    SubscriptionRecord,
)
from .metrics import Metrics
from .orchestrator import Orchestrator
from .routing import RoutedTo, Router
from .tail import Tail

__all__ = ["Delivery"]

log = logging.getLogger("tidings.delivery")


class _Push(msgspec.Struct):
    """EventNotification for encoding: data and headers pass through as stored bytes."""

    id: int
    eventId: int
    prev_id: int | None
    timestamp: int
    namespace: str
    data: msgspec.Raw
    source: str
    filter: str | None
    headers: msgspec.Raw


_encode = msgspec.json.Encoder().encode
_decode_answer = msgspec.json.Decoder().decode
_decode_data = msgspec.json.Decoder().decode
_SENT_KEY = b'["icrc72:broadcaster:sent",{"Nat":'


def _with_sent(headers: bytes, ts: int) -> msgspec.Raw:
    pair = _SENT_KEY + str(ts).encode() + b"}]"
    if headers == b"[]":
        return msgspec.Raw(b"[" + pair + b"]")
    return msgspec.Raw(headers[:-1] + b"," + pair + b"]")


def _stats(
    sub: SubscriptionRecord, events: Sequence[StoredEvent], name: str, prefix: str = "icrc72"
) -> list[Stat]:
    """Counter increments for the subscription, its subscriber and each event's publication."""
    n = len(events)
    out = [
        Stat("subscription", str(sub.id), f"{prefix}:subscription:stats:{name}", n),
        Stat("subscriber", sub.subscriber, f"{prefix}:subscriber:stats:{name}", n),
    ]
    per_ns = Counter(e.namespace for e in events)
    out.extend(Stat("publication", ns, f"{prefix}:publication:stats:{name}", c) for ns, c in per_ns.items())
    return out


def _settle_stats(sub: SubscriptionRecord, notes: Sequence[_Note]) -> dict[int, list[Stat]]:
    """Each notification's confirmation counters, for ``settle_notifications`` (which
    applies only those of notifications still pending). Shared per namespace: this runs
    for every confirmed notification."""
    by_ns: dict[str, list[Stat]] = {}
    out: dict[int, list[Stat]] = {}
    for n in notes:
        ns = n.event.namespace
        stats = by_ns.get(ns)
        if stats is None:
            stats = by_ns[ns] = _stats(sub, [n.event], "confirmations")
        out[n.id] = stats
    return out


class Delivery:
    def __init__(
        self,
        store: Store,
        tail: Tail,
        settings: Settings,
        registry: Orchestrator,
        *,
        on_gone: Callable[[int, str], Awaitable[None]] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        now_ns: Callable[[], int] = time.time_ns,
        rand: Callable[[], float] = random.random,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._tail = tail
        self._settings = settings
        self.registry = registry
        self._on_gone = on_gone
        # Decoded event data, shared by every subscription's filter; bounded.
        self._data: dict[int, Any] = {}
        self.sleep = sleep
        self.monotonic = monotonic
        self.now_ns = now_ns
        self.random = rand
        self.metrics = metrics or Metrics()
        self.signer: Callable[[int, str, bytes], dict[str, str]] | None = None
        """Signs a push: (subscription id, message id, body) -> headers to add."""
        self._workers: dict[int, _Worker] = {}
        # The workers a publish may wake, by the namespace or pattern they subscribe to: a
        # publish wakes only its own, and never visits stopped ones (a namespace may hold
        # thousands of them; they are woken when started).
        self._by_namespace: dict[str, dict[int, _Worker]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ready = asyncio.Event()
        self._last_notification = 0
        self._router: Router | None = None

    async def run(self, subscriptions: Sequence[SubscriptionRecord]) -> None:
        """Deliver until cancelled."""
        self._last_notification = await self._store.last_notification_id()
        timeout = aiohttp.ClientTimeout(total=self._settings.push_timeout_s)
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, enable_cleanup_closed=True)
        async with (
            aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=False) as session,
            asyncio.TaskGroup() as tg,
        ):
            self._session, self._tg = session, tg
            for sub in subscriptions:
                self.add(sub)
            if self._settings.delivery_linger_ms <= 0:  # lingering workers gather batches themselves
                router = Router(self, asyncio.get_running_loop(), _stats)
                if self._store.route_appends(router):
                    self._router = router
            self._ready.set()
            try:
                await asyncio.Event().wait()
            finally:
                if self._router is not None:
                    self._store.route_appends(None)
                    self._router = None
                self._tg = None
                for t in self._tasks.values():
                    t.cancel()

    async def ready(self) -> None:
        await self._ready.wait()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("delivery is not running")
        return self._session

    # -- RegistryListener ---------------------------------------------------------------

    def subscription_added(self, sub: SubscriptionRecord) -> None:
        self.add(sub)

    def subscription_changed(self, sub: SubscriptionRecord, *, started: bool) -> None:
        w = self._workers.get(sub.id)
        if w is not None:
            w.sub = sub
            self._index(w)
            if started:
                # Resume after what was published up to now, not up to when the worker
                # gets to it (it may still be pushing an earlier batch).
                w.started = True
                w.resume_at = self._tail.head
            w.wakeup.set()

    def subscription_removed(self, sub_id: int) -> None:
        self.remove(sub_id)

    def sent_position(self, namespace: str) -> int | None:
        scans = [w.scan for w in self._workers.values() if namespace in self.registry.namespaces_for(w.sub)]
        return min(scans) if scans else None

    # -- workers ----------------------------------------------------------------------

    def data_of(self, e: StoredEvent) -> Any:
        d = self._data.get(e.seq)
        if d is None:
            if len(self._data) >= 50_000:
                self._data.clear()
            d = self._data[e.seq] = _decode_data(e.data)
        return d

    def add(self, sub: SubscriptionRecord) -> None:
        if self._tg is None or sub.id in self._workers:
            return
        w = _Worker(self, sub)
        self._workers[sub.id] = w
        self._index(w)
        task = self._tg.create_task(w.run(), name=f"tidings-sub-{sub.id}")
        self._tasks[sub.id] = task
        task.add_done_callback(functools.partial(self._forget, sub.id))

    def _index(self, w: _Worker) -> None:
        """Keep ``w`` among the workers a publish wakes while its subscription runs."""
        conf = self.registry.sub_configs.get(w.sub.id)
        if conf is None or conf.stopped:
            self._unindex(w)
            return
        group = self._by_namespace.get(w.sub.namespace, {})
        if group.get(w.sub.id) is not w:
            # Copy on write: the router reads these from the store's thread.
            self._by_namespace[w.sub.namespace] = {**group, w.sub.id: w}

    def _unindex(self, w: _Worker) -> None:
        group = self._by_namespace.get(w.sub.namespace)
        if group is not None and w.sub.id in group:
            rest = {k: v for k, v in group.items() if k != w.sub.id}
            if rest:
                self._by_namespace[w.sub.namespace] = rest
            else:
                del self._by_namespace[w.sub.namespace]

    def wakeable(self, namespace: str) -> Sequence[_Worker]:
        """The running workers subscribed to exactly this namespace (a snapshot)."""
        group = self._by_namespace.get(namespace)
        return tuple(group.values()) if group else ()

    def _forget(self, sub_id: int, _task: object = None) -> None:
        w = self._workers.pop(sub_id, None)
        if w is not None:
            self._unindex(w)
        if self._router is not None:
            self._router.forget(sub_id)
        self._tasks.pop(sub_id, None)

    def routed(self, routes: Sequence[RoutedTo]) -> None:
        """Hand notifications opened at append to their workers (on the event loop, before
        the tail shows their events)."""
        for r in routes:
            w = self._workers.get(r.subscription_id)
            if w is None:
                continue
            if r.ids:
                self.note_issued(r.ids)
                w.routed.extend(zip(r.ids, r.events, strict=True))
            if r.generation == w.generation:
                w.scan = max(w.scan, r.cursor)
            # else the worker restarted from its stored cursor since: it reads these events
            # again, and may send them twice, rather than skip what it had not opened.
            w.wakeup.set()

    def remove(self, sub_id: int) -> None:
        task = self._tasks.get(sub_id)
        if task is not None:
            task.cancel()

    def wake(self, events: Sequence[StoredEvent]) -> None:
        """Wake the workers these events concern; a stopped one is woken when started."""
        namespaces = {e.namespace for e in events}
        for key, group in self._by_namespace.items():
            if key in namespaces or (is_pattern(key) and any(map(self.registry.matcher(key), namespaces))):
                for w in group.values():
                    w.wakeup.set()

    def redrive(self, notes: Sequence[PendingNotification]) -> None:
        """Dead letters made pending again: their subscriptions' workers send them next."""
        for n in notes:
            w = self._workers.get(n.subscription_id)
            if w is not None:
                w.redriven.append(n)
                w.wakeup.set()

    def note_issued(self, ids: Sequence[int]) -> None:
        if ids:
            self._last_notification = max(self._last_notification, ids[-1])

    async def events_of(self, notes: Sequence[PendingNotification]) -> dict[int, StoredEvent]:
        """Each notification's event, by notification id: a replayed one carries its own
        copy (with the replay headers; an archived event is not in the log any more)."""
        copies = await self._store.replay_events([p.id for p in notes])
        rest = [p.seq for p in notes if p.id not in copies]
        by_seq = {e.seq: e for e in await self._store.read_seqs(rest)} if rest else {}
        out = dict(copies)
        out.update((p.id, by_seq[p.seq]) for p in notes if p.id not in copies and p.seq in by_seq)
        return out

    async def push(self, sub_id: int, notes: Sequence[tuple[int, StoredEvent]], created_at: int) -> bool:
        """Push notifications recorded outside the live path (a replay's) through the
        subscription's own retry, confirmation and dead-letter handling, beside its live
        batches. False when the subscription is gone, or ended by this push."""
        w = self._workers.get(sub_id)
        if w is None:
            return False
        self.note_issued([i for i, _ in notes])
        try:
            await w._deliver([_Note(i, e, 0, created_at) for i, e in notes])
            await w.settled()  # a replay's progress counts confirmations: store them first
        except _Gone as gone:
            await self.ended(sub_id, str(gone))
            return False
        w.wakeup.set()  # oneshot: its idle wait now has an ack deadline to watch
        return True

    async def ended(self, sub_id: int, reason: str) -> None:
        self.metrics.subscriptions_ended += 1
        if self._on_gone is not None:
            await self._on_gone(sub_id, reason)

    async def confirm(
        self, caller: PrincipalRecord, ids: Sequence[int], subscriptions: dict[int, SubscriptionRecord]
    ) -> ConfirmResult:
        """``icrc72_confirm_notifications``: settle pending notifications of the caller's."""
        pending = {p.id: p for p in await self._store.get_notifications(list(set(ids)))}
        results: list[ItemResult | None] = []
        mine: dict[int, PendingNotification] = {}
        for i in ids:
            p = pending.get(i)
            if p is None:
                if 0 < i <= self._last_notification:
                    results.append(ok())  # already confirmed: confirming is idempotent
                else:
                    results.append(err("NotFound", f"no notification {i} was issued"))
                continue
            sub = subscriptions.get(p.subscription_id)
            if sub is None or sub.subscriber != caller.name:
                results.append(err("Unauthorized", f"notification {i} was not sent to {caller.name}"))
                continue
            mine[i] = p
            results.append(ok())
        if mine:
            stats: dict[int, list[Stat]] = {}
            for p in mine.values():
                sub = subscriptions[p.subscription_id]
                stats[p.id] = [
                    Stat("subscription", str(sub.id), "icrc72:subscription:stats:confirmations"),
                    Stat("subscriber", sub.subscriber, "icrc72:subscriber:stats:confirmations"),
                    Stat("publication", p.namespace, "icrc72:publication:stats:confirmations"),
                ]
            settled = await self._store.settle_notifications(list(mine), stats)
            now = self.now_ns()
            events = {e.seq: e for e in await self._store.read_seqs([mine[i].seq for i in settled])}
            self.metrics.confirmed(
                (now - events[mine[i].seq].timestamp) / 1e9 for i in settled if mine[i].seq in events
            )
            for p in mine.values():
                w = self._workers.get(p.subscription_id)
                if w is not None:
                    w.confirmed(p.id)
        if all(r is not None and r.Ok is not msgspec.UNSET for r in results):
            return ConfirmResult(allAccepted=None)
        return ConfirmResult(itemized=results)


class _Worker:
    def __init__(self, d: Delivery, sub: SubscriptionRecord) -> None:
        self.d = d
        self.sub = sub
        self.scan = sub.cursor
        """Seq of the last event considered; ahead of the stored cursor while events are
        being filtered out, since only a batch that is sent moves the stored one."""
        self.started = False
        """Set when a stopped subscription is started: it resumes after ``resume_at``, the
        end of the log when it was started."""
        self.resume_at = 0
        self.wakeup = asyncio.Event()
        # oneshot mode: notifications pushed and awaiting icrc72_confirm_notifications.
        self.unconfirmed: dict[int, tuple[_Note, float]] = {}
        self.redriven: list[PendingNotification] = []
        self.settling: set[asyncio.Task[None]] = set()
        self.routed: list[tuple[int, StoredEvent]] = []
        """Notifications opened at append (``routing``), to push next."""
        self.generation = 0
        """Counts restarts after failures (``run``)."""

    def confirmed(self, nid: int) -> None:
        self.unconfirmed.pop(nid, None)

    async def run(self) -> None:
        """Deliver until the subscription is deleted or ended, surviving failures.

        An unexpected error (the store refusing a write, say) must not stop this
        subscription for good, nor, through the task group, every other one while
        publishes are still accepted: the worker logs it, backs off, and starts again
        from what the store holds (its cursor and its pending notifications)."""
        failures = 0
        while True:
            try:
                await self._run()
                return
            except Exception:  # CancelledError is not an Exception: shutdown still works
                self.generation += 1  # routes planned before this no longer move ``scan``
                failures += 1
                delay = min(30.0, 0.25 * 2 ** min(failures, 7))
                self.d.metrics.worker_restarts += 1
                log.exception("subscription %s: delivery failed; restarting in %.2f s", self.sub.id, delay)
                await self.d.sleep(delay)
                stored = [r for r in await self.d._store.list_subscriptions(self.sub.namespace) if r.id == self.sub.id]
                if not stored:
                    return
                # Back to what is stored: what was read but not opened is read again. (An
                # event routed meanwhile may then be sent twice: at least once, still.)
                self.sub.cursor = self.scan = stored[0].cursor
                self.unconfirmed.clear()  # still pending in the store: sent again by _resend_stored
                self.routed.clear()  # likewise

    async def _run(self) -> None:
        s = self.d._settings
        registry = self.d.registry
        try:
            await self._resend_stored()
            while True:
                await self._resend_redriven()
                await self._resend_overdue()
                conf = registry.sub_configs.get(self.sub.id)
                if conf is None:  # deleted
                    return
                if self.routed:
                    # Opened at append while the subscription ran: pushed even if it has
                    # stopped since, like a batch that was already on its way.
                    batch, self.routed = self.routed[:s.delivery_batch_size], self.routed[s.delivery_batch_size:]
                    now = self.d.now_ns()
                    await self._deliver([_Note(i, e, 0, now) for i, e in batch])
                    continue
                if self.started:
                    # Events that passed while stopped are not delivered (a replay can
                    # fetch them): resume at the end of the log.
                    self.started = False
                    self.scan = max(self.scan, self.resume_at)
                    await self.d._store.move_cursor(self.sub.id, self.scan)
                if conf.stopped:
                    await self._idle()
                    continue
                events = await self._next(s.delivery_batch_size)
                if not events:
                    await self._idle()
                    continue
                if s.delivery_linger_ms > 0 and len(events) < s.delivery_batch_size:
                    await self.d.sleep(s.delivery_linger_ms / 1000)
                    more = await self._next(s.delivery_batch_size - len(events), after=events[-1].seq)
                    events = events + more
                last = events[-1].seq
                subscriber = self.sub.subscriber
                passing = [
                    e for e in events
                    if registry.subscriber_allowed(e.namespace, subscriber, e.seq)
                    and conf.passes(e.id, self.d.data_of(e))
                ]
                if not passing:
                    self.scan = max(self.scan, last)
                    continue
                ids = await self.d._store.open_notifications(
                    self.sub.id, passing, last, _stats(self.sub, passing, "notifications")
                )
                if not ids:  # the subscription was deleted under us
                    return
                self.d.note_issued(ids)
                self.scan = max(self.scan, last)
                now = self.d.now_ns()
                await self._deliver([_Note(i, e, 0, now) for i, e in zip(ids, passing, strict=True)])
        except _Gone as gone:
            await self.d.ended(self.sub.id, str(gone))

    async def _idle(self) -> None:
        timeout = None
        if self.unconfirmed:
            oldest = min(t for _, t in self.unconfirmed.values())
            timeout = max(0.0, oldest + self.d._settings.ack_deadline_s - self.d.monotonic())
        self.wakeup.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.wakeup.wait()

    async def _next(self, limit: int, after: int | None = None) -> list[StoredEvent]:
        pos = self.scan if after is None else after
        ns = self.d.registry.namespaces_for(self.sub)
        if not ns:
            return []
        events = self.d._tail.read_after(pos, ns, limit)
        if events is None:
            head = self.d._tail.head
            # Nothing past the tail's head: those events may be routed to this worker at
            # append and handed over only after their commit (``routing``).
            events = [e for e in await self.d._store.read_after(pos, ns, limit) if e.seq <= head]
            if len(events) < limit and after is None:
                # Everything of ours up to the head we knew of is read: skip ahead so the
                # next look is served by the tail again.
                self.scan = max(self.scan, head)
        return events

    async def _resend_stored(self) -> None:
        await self._resend(await self.d._store.pending(self.sub.id))

    async def _resend(self, pending: Sequence[PendingNotification]) -> None:
        size = self.d._settings.delivery_batch_size
        for i in range(0, len(pending), size):
            chunk = pending[i : i + size]
            events = await self.d.events_of(chunk)
            await self._deliver([
                _Note(p.id, events[p.id], p.attempts, p.created_at) for p in chunk if p.id in events
            ])

    async def _resend_redriven(self) -> None:
        while self.redriven:
            batch, self.redriven = self.redriven, []
            await self._resend(batch)

    async def _resend_overdue(self) -> None:
        if not self.unconfirmed:
            return
        deadline = self.d.monotonic() - self._ack_deadline(oneshot=True)
        overdue = [n for n, t in self.unconfirmed.values() if t <= deadline]
        if overdue:
            # A confirmation that came while its push was still open found nothing to clear
            # in ``unconfirmed``: ask the store what is still pending before sending again.
            pending = {p.id for p in await self.d._store.get_notifications([n.id for n in overdue])}
            for n in overdue:
                if n.id not in pending:
                    self.unconfirmed.pop(n.id, None)
            overdue = [n for n in overdue if n.id in pending]
        if not overdue:
            return
        for n in overdue:
            self.unconfirmed.pop(n.id, None)
        overdue = await self._give_up(overdue, "not confirmed within the ack deadline")
        size = self.d._settings.delivery_batch_size
        for i in range(0, len(overdue), size):
            await self._deliver(overdue[i : i + size])

    def _conf(self) -> SubscriptionConfig:
        return self.d.registry.sub_configs.get(self.sub.id) or SubscriptionConfig()

    def _ack_deadline(self, *, oneshot: bool) -> float:
        s = self.d._settings
        own = self._conf().ack_deadline_s
        return own if own is not None else (s.ack_deadline_s if oneshot else s.push_timeout_s)

    def _backoff(self) -> Backoff:
        s, c = self.d._settings, self._conf()
        return Backoff(
            c.retry_initial_s if c.retry_initial_s is not None else s.retry_initial_s,
            c.retry_max_s if c.retry_max_s is not None else s.retry_max_s,
        )

    async def _give_up(self, notes: list[_Note], reason: str) -> list[_Note]:
        """Dead-letter the notes past their attempt or age limit; return the others."""
        s, c = self.d._settings, self._conf()
        max_attempts = c.max_attempts or s.max_attempts
        max_age_ns = (c.max_age_s if c.max_age_s is not None else s.max_age_s) * 1e9
        now = self.d.now_ns()
        expired = [n for n in notes if n.attempts >= max_attempts or now - n.created_at >= max_age_ns]
        if expired:
            worst = max(n.attempts for n in expired)
            await self._dead_letter(expired, f"gave up after {worst} attempt(s): {reason}")
        return [n for n in notes if n not in expired]

    async def _dead_letter(self, notes: list[_Note], reason: str) -> None:
        now = self.d.now_ns()
        sub = self.sub
        letters = [
            DeadLetter(id=n.id, subscription_id=sub.id, subscriber=sub.subscriber, seq=n.event.seq,
                       namespace=n.event.namespace, event_id=n.event.id, attempts=n.attempts, reason=reason,
                       dead_at=now)
            for n in notes
        ]
        stats = _stats(sub, [n.event for n in notes], "deadLetters", prefix="tidings")
        moved = await self.d._store.dead_letter(letters, stats)
        self.d.metrics.notifications_dead_lettered += len(moved)
        log.warning("subscription %s: %d notification(s) dead-lettered: %s", sub.id, len(moved), reason)

    async def _deliver(self, batch: list[_Note]) -> None:
        """Push until the endpoint takes the batch, or the notifications are given up on.

        Reliable subscriptions retry error answers and failures with back-off, within the
        attempt and age limits, then dead-letter. A subscription that is not reliable
        ends (or, configured so, dead-letters) on an error answer; a push that got no
        answer at all is retried either way.
        """
        failures = 0
        metrics = self.d.metrics
        while batch:
            for n in batch:
                n.attempts += 1
            outcome, answer, reason, retry_after = await self._post(batch)
            metrics.notifications_sent += len(batch)
            if failures:
                metrics.notifications_retried += len(batch)
            if outcome is Outcome.GONE:
                raise _Gone(reason)
            conf = self._conf()
            if outcome is Outcome.ACK:
                if self.sub.mode == "oneshot":
                    now = self.d.monotonic()
                    for n in batch:
                        self.unconfirmed[n.id] = (n, now)
                    return
                failed = _failed_items(answer, len(batch))
                done = [n for i, n in enumerate(batch) if i not in failed]
                if done:
                    self._settle(done)
                batch = [n for i, n in enumerate(batch) if i in failed]
                if not batch:
                    return
                outcome, reason = Outcome.ERROR_ANSWER, "the endpoint answered Err"
            if outcome is Outcome.ERROR_ANSWER and not conf.reliable:
                if conf.on_error == "deadletter":
                    await self._dead_letter(batch, reason)
                    return
                raise _Gone(f"{reason}; not reliable: unsubscribed (XEP-0021 3.5)")
            await self.d._store.count_attempt(
                [n.id for n in batch], _stats(self.sub, [n.event for n in batch], "retries", prefix="tidings")
            )
            batch = await self._give_up(batch, reason)
            if batch:
                failures += 1
                await self.d.sleep(self._backoff().delay(failures, self.d.random(), retry_after))

    def _settle(self, done: list[_Note]) -> None:
        """Settle confirmed notifications without holding up the next push.

        The next batch of this subscription would otherwise wait for this commit, adding
        a commit to the latency of every event that arrives meanwhile. The writer runs
        jobs in the order queued, so nothing reads a state older than what was pushed;
        a settle lost to a crash leaves the notifications pending, to be sent again."""
        tg = self.d._tg
        if tg is None:  # shutting down: the notifications stay pending
            return
        task = tg.create_task(self._settle_now(done))
        self.settling.add(task)
        task.add_done_callback(self.settling.discard)

    async def _settle_now(self, done: list[_Note]) -> None:
        try:
            settled = set(await self.d._store.settle_notifications(
                [n.id for n in done], _settle_stats(self.sub, done)
            ))
        except Exception:  # they stay pending and are sent again; never fail the task group
            log.exception("subscription %s: settling %d notification(s) failed", self.sub.id, len(done))
            return
        now = self.d.now_ns()
        # A replayed event's age is not a delivery latency (docs/replay.md).
        self.d.metrics.confirmed(
            (now - n.event.timestamp) / 1e9 for n in done
            if n.id in settled and b'"icrc77:replay:id"' not in n.event.headers
        )

    async def settled(self) -> None:
        """Wait until the confirmations of what was pushed so far are stored."""
        while self.settling:
            await asyncio.gather(*self.settling, return_exceptions=True)

    async def _post(self, batch: list[_Note]) -> tuple[Outcome, object, str, float | None]:
        """One push: its outcome, the decoded answer, a reason for logs, a Retry-After."""
        sub = self.sub
        if sub.endpoint is None:
            return Outcome.NO_ANSWER, None, "the subscription has no endpoint", None
        sent = self.d.now_ns()
        filter_text = self._conf().filter
        body = _encode([
            _Push(
                id=n.id, eventId=n.event.id, prev_id=n.event.prev_id, timestamp=n.event.timestamp,
                namespace=n.event.namespace, data=msgspec.Raw(n.event.data), source=n.event.source,
                filter=filter_text, headers=_with_sent(n.event.headers, sent),
            )
            for n in batch
        ])
        headers = {
            "content-type": "application/json",
            "x-tidings-subscription": str(sub.id),
            "x-tidings-mode": sub.mode,
        }
        if self.d.signer is not None:
            # A retry of the same batch keeps its message id, so receivers can dedupe.
            headers.update(self.d.signer(sub.id, f"{sub.id}-{batch[0].id}-{batch[-1].id}", body))
        timeout = aiohttp.ClientTimeout(total=self._ack_deadline(oneshot=False))
        try:
            async with self.d.session.post(
                sub.endpoint, data=body, headers=headers, allow_redirects=False, timeout=timeout
            ) as resp:
                raw = await resp.read()
                status = resp.status
                retry_header = resp.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.debug("push to subscription %s failed: %r", sub.id, e)
            return Outcome.NO_ANSWER, None, f"no answer: {e!r}", None
        outcome = classify(status)
        answer: object = None
        if outcome is Outcome.ACK and raw:
            with contextlib.suppress(msgspec.DecodeError):
                answer = _decode_answer(raw)
        return outcome, answer, f"HTTP {status}", retry_after_seconds(status, retry_header)


class _Note:
    """A notification on its way: its event, tries so far, and when it was recorded."""

    __slots__ = ("attempts", "created_at", "event", "id")

    def __init__(self, nid: int, event: StoredEvent, attempts: int = 0, created_at: int = 0) -> None:
        self.id = nid
        self.event = event
        self.attempts = attempts
        self.created_at = created_at


class _Gone(Exception):
    pass


def _failed_items(answer: object, n: int) -> set[int]:
    """Indexes the subscriber answered ``Err`` for; a non-itemized 2xx confirms all."""
    if not isinstance(answer, list) or len(answer) != n:
        return set()
    return {i for i, item in enumerate(answer) if isinstance(item, dict) and "Err" in item}
