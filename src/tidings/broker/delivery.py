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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import msgspec

from ..core.namespaces import is_pattern
from ..core.wire import ConfirmResult, ItemResult, err, ok
from ..settings import Settings
from ..store import PendingNotification, PrincipalRecord, Stat, Store, StoredEvent, SubscriptionRecord
from .orchestrator import Orchestrator
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


def _stats(sub: SubscriptionRecord, events: Sequence[StoredEvent], name: str) -> list[Stat]:
    n = len(events)
    out = [
        Stat("subscription", str(sub.id), f"icrc72:subscription:stats:{name}", n),
        Stat("subscriber", sub.subscriber, f"icrc72:subscriber:stats:{name}", n),
    ]
    out.extend(Stat("publication", e.namespace, f"icrc72:publication:stats:{name}") for e in events)
    return out


class _PushFailed(Exception):
    def __init__(self, reason: str, retry_after: float | None = None, gone: bool = False) -> None:
        super().__init__(reason)
        self.retry_after = retry_after
        self.gone = gone


class Delivery:
    def __init__(
        self,
        store: Store,
        tail: Tail,
        settings: Settings,
        registry: Orchestrator,
        *,
        on_gone: Callable[[int], Awaitable[None]] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
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
        self._workers: dict[int, _Worker] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ready = asyncio.Event()
        self._last_notification = 0

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
            self._ready.set()
            try:
                await asyncio.Event().wait()
            finally:
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
        task = self._tg.create_task(w.run(), name=f"tidings-sub-{sub.id}")
        self._tasks[sub.id] = task
        task.add_done_callback(functools.partial(self._forget, sub.id))

    def _forget(self, sub_id: int, _task: object = None) -> None:
        self._workers.pop(sub_id, None)
        self._tasks.pop(sub_id, None)

    def remove(self, sub_id: int) -> None:
        task = self._tasks.get(sub_id)
        if task is not None:
            task.cancel()

    def wake(self, events: Sequence[StoredEvent]) -> None:
        namespaces = {e.namespace for e in events}
        for w in self._workers.values():
            ns = w.sub.namespace
            if ns in namespaces or (is_pattern(ns) and any(map(self.registry.matcher(ns), namespaces))):
                w.wakeup.set()

    def note_issued(self, ids: Sequence[int]) -> None:
        if ids:
            self._last_notification = max(self._last_notification, ids[-1])

    async def ended(self, sub_id: int) -> None:
        if self._on_gone is not None:
            await self._on_gone(sub_id)

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
            stats: list[Stat] = []
            for p in mine.values():
                sub = subscriptions[p.subscription_id]
                stats += [
                    Stat("subscription", str(sub.id), "icrc72:subscription:stats:confirmations"),
                    Stat("subscriber", sub.subscriber, "icrc72:subscriber:stats:confirmations"),
                    Stat("publication", p.namespace, "icrc72:publication:stats:confirmations"),
                ]
            await self._store.settle_notifications(list(mine), stats)
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
        self.unconfirmed: dict[int, tuple[StoredEvent, float]] = {}
        self.failures = 0

    def confirmed(self, nid: int) -> None:
        self.unconfirmed.pop(nid, None)

    async def run(self) -> None:
        s = self.d._settings
        registry = self.d.registry
        try:
            await self._resend_stored()
            while True:
                await self._resend_overdue()
                conf = registry.sub_configs.get(self.sub.id)
                if conf is None:  # deleted
                    return
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
                await self._deliver(list(zip(ids, passing, strict=True)))
        except _Gone:
            await self.d.ended(self.sub.id)

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
            events = await self.d._store.read_after(pos, ns, limit)
            if len(events) < limit and after is None:
                # Everything of ours up to the head we knew of is read: skip ahead so the
                # next look is served by the tail again.
                self.scan = max(self.scan, head)
        return events

    async def _resend_stored(self) -> None:
        pending = await self.d._store.pending(self.sub.id)
        size = self.d._settings.delivery_batch_size
        for i in range(0, len(pending), size):
            chunk = pending[i : i + size]
            events = {e.seq: e for e in await self.d._store.read_seqs([p.seq for p in chunk])}
            await self._deliver([(p.id, events[p.seq]) for p in chunk if p.seq in events])

    async def _resend_overdue(self) -> None:
        if not self.unconfirmed:
            return
        deadline = self.d.monotonic() - self.d._settings.ack_deadline_s
        overdue = [(nid, e) for nid, (e, t) in self.unconfirmed.items() if t <= deadline]
        if overdue:
            # A confirmation that came while its push was still open found nothing to clear
            # in ``unconfirmed``: ask the store what is still pending before sending again.
            pending = {p.id for p in await self.d._store.get_notifications([nid for nid, _ in overdue])}
            for nid, _ in overdue:
                if nid not in pending:
                    self.unconfirmed.pop(nid, None)
            overdue = [(nid, e) for nid, e in overdue if nid in pending]
        size = self.d._settings.delivery_batch_size
        for i in range(0, len(overdue), size):
            chunk = overdue[i : i + size]
            await self.d._store.count_attempt([nid for nid, _ in chunk])
            await self._deliver(chunk)

    async def _deliver(self, batch: list[tuple[int, StoredEvent]]) -> None:
        """Push until the endpoint takes it; confirm what the answer confirms."""
        while batch:
            try:
                answer = await self._post(batch)
            except _PushFailed as f:
                if f.gone:
                    raise _Gone from None
                self.failures += 1
                await self.d.sleep(self._backoff(f.retry_after))
                continue
            self.failures = 0
            if self.sub.mode == "oneshot":
                now = self.d.monotonic()
                for nid, e in batch:
                    self.unconfirmed[nid] = (e, now)
                return
            failed = _failed_items(answer, len(batch))
            done = [b for i, b in enumerate(batch) if i not in failed]
            if done:
                await self.d._store.settle_notifications(
                    [nid for nid, _ in done], _stats(self.sub, [e for _, e in done], "confirmations")
                )
            batch = [b for i, b in enumerate(batch) if i in failed]
            if batch:
                self.failures += 1
                await self.d.sleep(self._backoff(None))

    def _backoff(self, retry_after: float | None) -> float:
        s = self.d._settings
        if retry_after is not None:
            return min(retry_after, s.retry_max_s)
        base = min(s.retry_max_s, s.retry_initial_s * 2 ** max(0, self.failures - 1))
        return base * random.uniform(0.5, 1.0)

    async def _post(self, batch: list[tuple[int, StoredEvent]]) -> object:
        sub = self.sub
        if sub.endpoint is None:
            raise _PushFailed("no endpoint")
        sent = time.time_ns()
        conf = self.d.registry.sub_configs.get(sub.id)
        filter_text = conf.filter if conf is not None else None
        body = _encode([
            _Push(
                id=nid, eventId=e.id, prev_id=e.prev_id, timestamp=e.timestamp, namespace=e.namespace,
                data=msgspec.Raw(e.data), source=e.source, filter=filter_text,
                headers=_with_sent(e.headers, sent),
            )
            for nid, e in batch
        ])
        headers = {
            "content-type": "application/json",
            "x-tidings-subscription": str(sub.id),
            "x-tidings-mode": sub.mode,
        }
        try:
            async with self.d.session.post(
                sub.endpoint, data=body, headers=headers, allow_redirects=False
            ) as resp:
                raw = await resp.read()
                if resp.status == 410:
                    raise _PushFailed("410 Gone", gone=True)
                if not 200 <= resp.status < 300:
                    retry_after = None
                    if resp.status in (429, 503):
                        with contextlib.suppress(TypeError, ValueError):
                            retry_after = float(resp.headers.get("Retry-After", ""))
                    raise _PushFailed(f"HTTP {resp.status}", retry_after=retry_after)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.debug("push to subscription %s failed: %r", sub.id, e)
            raise _PushFailed(repr(e)) from None
        try:
            return _decode_answer(raw) if raw else None
        except msgspec.DecodeError:
            return None


class _Gone(Exception):
    pass


def _failed_items(answer: object, n: int) -> set[int]:
    """Indexes the subscriber answered ``Err`` for; a non-itemized 2xx confirms all."""
    if not isinstance(answer, list) or len(answer) != n:
        return set()
    return {i for i, item in enumerate(answer) if isinstance(item, dict) and "Err" in item}
