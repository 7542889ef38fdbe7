"""Push delivery: one worker per subscription POSTs batches of notifications in order.

This module holds the workers' registry and the push itself (``Delivery.post``); the
worker's loop, retries and redelivery are in ``_worker``, its counters in ``_accounting``.

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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from ...core.namespaces import is_pattern
from ...core.wire import ConfirmResult
from ...outbound import Outbound
from ...settings import Settings
from ...store import (
    DeadLetter,
    Fence,
    PendingNotification,
    PrincipalRecord,
    Stat,
    Store,
    StoredEvent,
    SubscriptionRecord,
)
from ...tracing import Tracing
from ..metrics import Metrics
from ..registry import Registry
from . import _confirmation as confirmation
from ._accounting import event_stats
from ._direct import NoteIds
from ._notes import Gone, Note, Pushed, RoutedTo
from ._push import Leases, Push, Transport
from ._routing import Router
from ._tail import Tail
from ._worker import Worker
from ._yielding import LiveFirst

__all__ = ["Delivery", "Leases", "Transport"]  # Leases and Transport: from ``_push``

log = logging.getLogger("tidings.delivery")



_decode_data = msgspec.json.Decoder().decode


class Delivery:
    def __init__(
        self,
        store: Store,
        tail: Tail,
        settings: Settings,
        registry: Registry,
        *,
        on_gone: Callable[[int, str], Awaitable[None]] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        now_ns: Callable[[], int] = time.time_ns,
        rand: Callable[[], float] = random.random,
        metrics: Metrics | None = None,
        outbound: Outbound,
        signer: Callable[[int, str, bytes], dict[str, str]] | None = None,
        owns: Callable[[int], bool] | None = None,
        leases: Leases | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.store = store
        self._owns = owns
        """Whether this process delivers a subscription (``Membership.owns``); all if None."""
        self._leases = leases
        """With other broadcasters: nothing is pushed unless the lease is surely held."""
        self.tail = tail
        self.settings = settings
        self.registry = registry
        self._on_gone = on_gone
        # Decoded event data, shared by every subscription's filter; bounded.
        self._data: dict[int, Any] = {}
        self.sleep = sleep
        self.monotonic = monotonic
        self.now_ns = now_ns
        self.random = rand
        self.metrics = metrics or Metrics()
        # The clock is looked up on this object at each push: tests put their own in.
        self._push = Push(settings, tail, outbound, signer=signer, leases=leases, fence_of=self.fence_of,
                          now_ns=lambda: self.now_ns(), tracing=tracing)
        self.post = self._push.post
        """One push (``_push.Push.post``)."""
        self.notifications = self._push.notifications
        self.transports = self._push.transports
        """Pushes to endpoints of another scheme than http(s), by scheme (``xmpp``)."""
        self._workers: dict[int, Worker] = {}
        # The workers a publish may wake, by the namespace or pattern they subscribe to: a
        # publish wakes only its own, and never visits stopped ones (a namespace may hold
        # thousands of them; they are woken when started).
        self._by_namespace: dict[str, dict[int, Worker]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.task_group: asyncio.TaskGroup | None = None
        self._ready = asyncio.Event()
        self._router: Router | None = None
        self.note_ids = NoteIds(store)
        """Ids for batches pushed before they are recorded (``_direct``)."""
        self.draining = False
        """The process is stopping: workers finish the push in flight and what records it,
        then end; nothing new starts (:meth:`drain`)."""
        self.gate = LiveFirst(settings.replay_yield_ms, settings.replay_max_rate, monotonic=monotonic, sleep=sleep)
        """Replays and redrives wait for live work through it (``_yielding``)."""

    async def run(self, subscriptions: Sequence[SubscriptionRecord]) -> None:
        """Deliver until cancelled."""
        async with asyncio.TaskGroup() as tg:
            self.task_group = tg
            for sub in subscriptions:
                self.add(sub)
            if self.settings.delivery_linger_ms <= 0:  # lingering workers gather batches themselves
                router = Router(self, asyncio.get_running_loop(), event_stats)
                if self.store.route_appends(router):
                    self._router = router
            self._ready.set()
            try:
                await asyncio.Event().wait()
            finally:
                if self._router is not None:
                    self.store.route_appends(None)
                    self._router = None
                self.task_group = None
                for t in self._tasks.values():
                    t.cancel()

    async def ready(self) -> None:
        await self._ready.wait()

    # -- RegistryListener ---------------------------------------------------------------

    def subscription_added(self, sub: SubscriptionRecord) -> None:
        self.add(sub)

    def subscription_changed(self, sub: SubscriptionRecord, *, started: bool) -> None:
        w = self._workers.get(sub.id)
        if w is not None:
            w.sub = sub
            self._index(w)
            conf = self.registry.sub_configs.get(sub.id)
            if conf is not None and conf.stopped and w.stopped_at is None:
                # What was published up to now is still owed, read or not.
                w.stopped_at = self.tail.head
            if started:
                # Resume after what was published up to now, not up to when the worker
                # gets to it (it may still be pushing an earlier batch).
                w.started = True
                w.resume_at = self.tail.head
            if w.dormant and (conf is None or not conf.stopped) and self.task_group is not None:
                # Queued while stopped: all of it is pending in the store, sent from there.
                w.routed.clear()
                w.drop_taken()
                w.redriven.clear()
                w.unconfirmed.clear()
                self._spawn(w)
            w.wakeup.set()

    def subscription_removed(self, sub_id: int) -> None:
        self.remove(sub_id)

    def sent_position(self, namespace: str) -> int | None:
        """The seq up to which every subscription delivered here has been sent the events
        of ``namespace`` it is owed: confirmed, or pending in the store."""
        done = [w.acked for w in self._workers.values() if namespace in self.registry.namespaces_for(w.sub)]
        return min(done) if done else None

    @property
    def workers_running(self) -> int:
        """Subscriptions with a worker task now."""
        return len(self._tasks)

    def delivers(self, sub_id: int) -> bool:
        return sub_id in self._workers

    # -- workers ----------------------------------------------------------------------

    def data_of(self, e: StoredEvent) -> Any:
        d = self._data.get(e.seq)
        if d is None:
            if len(self._data) >= 50_000:
                self._data.clear()
            d = self._data[e.seq] = _decode_data(e.data)
        return d

    async def drain(self, timeout_s: float) -> int:
        """Let every worker finish its push in flight and the writes that record it, for at
        most ``timeout_s``; return how many were still running then (they are cancelled
        with the rest, and what they pushed is pending, or past the stored cursor: pushed
        again by whoever delivers the subscription next)."""
        self.draining = True
        for w in self._workers.values():
            w.wakeup.set()
        tasks = list(self._tasks.values())
        if not tasks:
            return 0
        _, running = await asyncio.wait(tasks, timeout=timeout_s)
        return len(running)

    def add(self, sub: SubscriptionRecord) -> None:
        if self.task_group is None or sub.id in self._workers or self.draining:
            return
        if self._owns is not None and not self._owns(sub.id):
            return  # another broadcaster delivers it (docs/scaling.md)
        w = Worker(self, sub)
        self._workers[sub.id] = w
        self._index(w)
        conf = self.registry.sub_configs.get(sub.id)
        if conf is not None and conf.stopped:
            # Dormant from the start: its first run would only find it stopped and end, and
            # the run its start spawns begins with the store's pending notifications. (At a
            # restart with many stopped subscriptions, those runs at once cost memory the
            # process kept.)
            w.dormant = True
            w.resumed.set()
            return
        self._spawn(w)

    def _spawn(self, w: Worker) -> None:
        assert self.task_group is not None
        w.dormant = False
        w.resumed.clear()
        self.metrics.worker_runs += 1
        task = self.task_group.create_task(w.run(), name=f"tidings-sub-{w.sub.id}")
        self._tasks[w.sub.id] = task
        task.add_done_callback(functools.partial(self._forget, w.sub.id))

    def _index(self, w: Worker) -> None:
        """Keep ``w`` among the workers a publish wakes while its subscription runs."""
        conf = self.registry.sub_configs.get(w.sub.id)
        if conf is None or conf.stopped:
            self._unindex(w)
            return
        group = self._by_namespace.get(w.sub.namespace, {})
        if group.get(w.sub.id) is not w:
            # Copy on write: the router reads these from the store's thread.
            self._by_namespace[w.sub.namespace] = {**group, w.sub.id: w}

    def _unindex(self, w: Worker) -> None:
        group = self._by_namespace.get(w.sub.namespace)
        if group is not None and w.sub.id in group:
            rest = {k: v for k, v in group.items() if k != w.sub.id}
            if rest:
                self._by_namespace[w.sub.namespace] = rest
            else:
                del self._by_namespace[w.sub.namespace]

    def wakeable(self, namespace: str) -> Sequence[Worker]:
        """The running workers subscribed to exactly this namespace (a snapshot)."""
        group = self._by_namespace.get(namespace)
        return tuple(group.values()) if group else ()

    def _forget(self, sub_id: int, task: asyncio.Task[None] | None = None) -> None:
        current = self._tasks.get(sub_id)
        if task is not None and current is not None and current is not task:
            # An earlier run's end, after a start spawned the next run (the start came
            # between the run going dormant and this callback): the worker is running.
            return
        w = self._workers.get(sub_id)
        if w is not None and w.dormant and task is not None and not task.cancelled():
            self._tasks.pop(sub_id, None)  # stopped: the worker stays, without a task
            return
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
            self.gate.arrived(r.subscription_id)
            if not r.record:
                # Recorded nowhere: taken only by a worker that has considered everything
                # before them. One that went back since the plan (a restart from its stored
                # cursor, a stop) reads them from the log instead.
                if r.generation == w.generation and w.scan >= r.after:
                    w.taken.extend(r.events)
                    w.scan = max(w.scan, r.cursor)
                w.wakeup.set()
                continue
            if r.ids:
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
        elif sub_id in self._workers:  # dormant
            self._forget(sub_id)

    async def hand_off(self, sub_ids: set[int], grace_s: float) -> None:
        """Stop delivering ``sub_ids`` here, letting each worker finish its push in flight
        and record it first, for at most ``grace_s`` (the lease goes to another broadcaster,
        which then need not push that batch again); stop the rest at once."""
        tasks = []
        for sub_id in sub_ids:
            w, task = self._workers.get(sub_id), self._tasks.get(sub_id)
            if w is not None and task is not None:
                w.leaving = True
                w.wakeup.set()
                tasks.append(task)
        if tasks and grace_s > 0:
            await asyncio.wait(tasks, timeout=grace_s)
        for sub_id in sorted(sub_ids):
            await self.stop_worker(sub_id)

    async def stop_worker(self, sub_id: int) -> None:
        """Stop delivering ``sub_id`` here and wait until its worker has stopped (its
        lease goes to another broadcaster, which sends again what is pending)."""
        w, task = self._workers.get(sub_id), self._tasks.get(sub_id)
        if task is None:
            if w is not None:  # dormant
                self._forget(sub_id)
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait([task])
        if self._workers.get(sub_id) is w:  # never a worker started while this one stopped
            self._forget(sub_id)

    def wake(self, events: Sequence[StoredEvent]) -> None:
        """Wake the workers these events concern; a stopped one is woken when started."""
        namespaces = {e.namespace for e in events}
        for key, group in self._by_namespace.items():
            if key in namespaces or (is_pattern(key) and any(map(self.registry.matcher(key), namespaces))):
                for w in group.values():
                    self.gate.arrived(w.sub.id)
                    w.wakeup.set()

    def redrive(self, notes: Sequence[PendingNotification]) -> None:
        """Dead letters made pending again: their subscriptions' workers send them next."""
        for n in notes:
            w = self._workers.get(n.subscription_id)
            if w is not None:
                w.redriven.append(n)
                w.wakeup.set()

    async def events_of(self, notes: Sequence[PendingNotification]) -> dict[int, StoredEvent]:
        """Each notification's event, by notification id: a replayed one carries its own
        copy (with the replay headers; an archived event is not in the log any more)."""
        copies = await self.store.replay_events([p.id for p in notes])
        rest = [p.seq for p in notes if p.id not in copies]
        by_seq = {e.seq: e for e in await self.store.read_seqs(rest)} if rest else {}
        out = dict(copies)
        out.update((p.id, by_seq[p.seq]) for p in notes if p.id not in copies and p.seq in by_seq)
        return out

    async def push(
        self, sub_id: int, notes: Sequence[tuple[int, StoredEvent]], created_at: int, first: Pushed | None = None
    ) -> bool:
        """Push notifications recorded outside the live path (a replay's) through the
        subscription's own retry, confirmation and dead-letter handling, beside its live
        batches; ``first``: the answer to a push of them already made (``Worker.push_once``).
        False when the subscription is gone, or ended by this push."""
        w = self._workers.get(sub_id)
        if w is None:
            return False
        await w.resumed.wait()  # what the worker's start resent is not pushed again
        batch = [Note(i, e, 0, created_at) for i, e in notes if i not in w.resent]
        if len(batch) < len(notes):
            first = None  # its answer was to the whole batch
        try:
            if batch:
                await w.deliver(batch, first)
            await w.settled()  # a replay's progress counts confirmations: store them first
        except Gone as gone:
            await self.ended(sub_id, gone)
            return False
        w.wakeup.set()  # oneshot: its idle wait now has an ack deadline to watch
        return True

    async def ended(self, sub_id: int, gone: Gone) -> None:
        """Delivery ends the subscription: what is still pending goes to the dead letters,
        under the cause's code (``endpoint_gone``, ``subscription_ended``); they outlive the
        subscription, for its subscriber to list and drop (docs/delivery.md)."""
        self.metrics.subscriptions_ended += 1
        sub = self.registry.subscriptions.get(sub_id)
        if sub is not None:
            pending = await self.store.pending(sub_id)
            events = await self.events_of(pending)
            now = self.now_ns()
            letters = [
                DeadLetter(id=p.id, subscription_id=sub_id, subscriber=sub.subscriber, seq=p.seq,
                           namespace=p.namespace, event_id=events[p.id].id if p.id in events else 0,
                           attempts=gone.attempts.get(p.id, p.attempts), reason=gone.code, dead_at=now)
                for p in pending
            ]
            stats = [
                *(event_stats(sub, [events[p.id] for p in pending if p.id in events], "deadLetters", "tidings")
                  if pending else []),
                Stat("subscriber", sub.subscriber, "tidings:subscriber:stats:subscriptionsEnded"),
                Stat("subscriber", sub.subscriber, "tidings:subscriber:stats:notifications:ended", len(pending)),
            ]
            moved = await self.store.dead_letter(letters, stats, fence=self.fence_of(sub_id))
            self.metrics.notifications_dead_lettered += len(moved)
        if self._on_gone is not None:
            await self._on_gone(sub_id, f"{gone.code}: {gone}")

    async def confirm(
        self, caller: PrincipalRecord, ids: Sequence[int], subscriptions: dict[int, SubscriptionRecord]
    ) -> ConfirmResult:
        """``icrc72_confirm_notifications`` (``_confirmation``)."""
        return await confirmation.confirm(self, caller, ids, subscriptions)

    def worker(self, sub_id: int) -> Worker | None:
        return self._workers.get(sub_id)

    def lease_lost(self, sub_id: int) -> None:
        """A write for ``sub_id`` was refused by its fence: the lease is another's."""
        if self._leases is not None:
            self._leases.lost(sub_id)

    def acts_until(self, sub_id: int) -> float | None:
        """Until when (``time.monotonic``) a push of ``sub_id`` may leave this host: the
        lease's sure end when broadcasters share the store, 0 when it is not surely held;
        None alone (no lease)."""
        return None if self._leases is None else self._leases.acts_until(sub_id)

    def fence_of(self, sub_id: int) -> Fence | None:
        """The lease this process delivers ``sub_id`` under, for its writes to carry."""
        w = self._workers.get(sub_id)
        if w is not None:
            return w.fence
        return self._leases.fence(sub_id) if self._leases is not None else None
