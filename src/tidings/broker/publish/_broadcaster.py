"""The broadcaster's publish path: check and stamp (``core.ingest``, here or in a front
process), then rights, schemas and back-pressure, the durable append, and the hand-off to
delivery."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from sys import intern
from typing import Any, Protocol

import msgspec

from ...core import ingest, values
from ...core.ingest import ERR_RESERVED_HEADER
from ...core.wire import Event, GenericError, ItemResult, err, ok
from ...errors import BadRequest, KeysFull, KeyTaken, StoreError, StoreUnavailable, Unavailable
from ...store import NewEvent, PrincipalRecord, Stat, Store, StoredEvent
from ...tasks import stop_if_cancelled
from ...tracing import PublishSpans, Tracing
from ..cluster import Forwarding
from ..registry import Orchestrator
from . import _keys
from ._overload import CommitTimeout, Overload

__all__ = [
    "ERR_RESERVED_HEADER", "ERR_SCHEMA_REFUSED", "ERR_SCHEMA_VIOLATION", "Broadcaster", "SchemaCheck", "check_event",
]

ERR_SCHEMA_VIOLATION = 2
"""``GenericError.error_code``: the event's data does not match its publication's schema."""
ERR_SCHEMA_REFUSED = 3
"""``GenericError.error_code``: the publication's schema takes no events (Retracted, expired, deleted)."""


class SchemaCheck(Protocol):
    """The schema a namespace's events must match now (``tidings.schemas.SchemaBinder``)."""

    def bind(self, ref: int | str, now: int) -> Any: ...

def check_event(e: Event, where: str) -> None:
    """Raise ``BadRequest`` (``invalid_value``) if the event's data or a header value is
    not a valid ICRC-16 value; ``where`` names the event in the message."""
    try:
        ingest.check_values(e, where)
    except values.InvalidValue as x:
        raise BadRequest(str(x), code="invalid_value") from None


_decode_value = msgspec.json.decode
_RECLAIM_ROUND = 10_000
"""Keys deleted per transaction: a round holds the writer (SQLite) for tens of ms at most."""
log = logging.getLogger("tidings.broker")


class Broadcaster:
    def __init__(
        self,
        store: Store,
        orchestrator: Orchestrator,
        *,
        broadcaster_id: str,
        max_batch_items: int,
        max_pending_events: int,
        on_appended: Callable[[list[StoredEvent]], None],
        schemas: SchemaCheck | None = None,
        forwarding: Forwarding | None = None,
        clock: Callable[[], int] = time.time_ns,
        uncertainty_ns: Callable[[], int] = lambda: 0,
        tracing: Tracing | None = None,
        max_clock_offset_s: float = 0.5,
        overload: Overload | None = None,
    ) -> None:
        self._max_offset_ns = int(max_clock_offset_s * 1e9)
        self._store = store
        self._overload = overload
        """Bounds the wait for each commit and watches for a stall (None: unbounded, tests only)."""
        self._orch = orchestrator
        self._id = broadcaster_id
        self._max_items = max_batch_items
        self._max_pending = max_pending_events
        self._on_appended = on_appended
        self._clock = clock
        self._uncertainty = uncertainty_ns
        self._pending = 0
        self.schemas = schemas
        self._forwarding = forwarding
        self._tracing = tracing

    async def reclaim_keys(self, interval_s: float) -> None:
        """Delete expired idempotency keys every ``interval_s`` until cancelled: their
        space is bounded by the keys published within a window (a store that cannot be
        reached now is tried again next round, silently: its outage is logged elsewhere)."""
        while True:
            stop_if_cancelled()  # also when a store call returned from a cancel as if done
            await asyncio.sleep(interval_s)
            try:
                # Rounds of at most _RECLAIM_ROUND keys, until the expired are gone: a keyed
                # rate above a round per interval would otherwise outgrow the reclaimer.
                n = _RECLAIM_ROUND
                while n >= _RECLAIM_ROUND:
                    n = await self._store.expire_keys(self._clock(), _RECLAIM_ROUND)
                    if n:
                        log.debug("deleted %d expired idempotency keys", n)
            except StoreError as e:
                stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                continue

    def _bindings(self, namespaces: set[str], now: int) -> dict[str, Any]:
        """The schema binding of each namespace in the batch that has one."""
        out: dict[str, Any] = {}
        if self.schemas is None:
            return out
        confs = self._orch.pub_configs
        for ns in namespaces:
            conf = confs.get(ns)
            if conf is not None and conf.schema is not None:
                out[ns] = self.schemas.bind(conf.schema, now)
        return out

    async def publish(
        self, caller: PrincipalRecord, events: Sequence[Event], warnings: list[str] | None = None,
        *, checked: bool = False,
    ) -> list[ItemResult | None]:
        """``icrc72_publish``: one result per event, ``Ok: [eventId]`` or ``Err``.

        Events of a publication bound to a schema are validated one by one: an invalid
        one gets its error and the others are still published. What a publisher should
        know (a Deprecated schema) is added to ``warnings``. ``checked``: the caller has
        already run :func:`check_event` on each event (the stream face, item by item)."""
        n = len(events)
        if n > self._max_items:
            return [err("GenericBatchError", f"a batch holds at most {self._max_items} events")] * n
        await self._orch.known({e.namespace for e in events})
        # This process's wall clock, as a front reads it: on one host every receiving process
        # then states its time by the same clock, and ``commit`` keeps a reading that agrees
        # with the cluster's clock (a wall clock off by more is replaced there).
        now = time.time_ns()
        try:
            rows, refused = ingest.prepare(events, now, checked=checked)
        except values.InvalidValue as x:
            raise BadRequest(str(x), code="invalid_value") from None
        return await self.commit(caller, n, rows, refused, now, warnings, [e.data for e in events])

    async def commit(
        self,
        caller: PrincipalRecord,
        n: int,
        rows: Sequence[ingest.Prepared],
        refused: dict[int, tuple[str, ItemResult]],
        now: int,
        warnings: list[str] | None = None,
        decoded: Sequence[Any] | None = None,
        *,
        relayed: bool = False,
        relay_token: str | None = None,
    ) -> list[ItemResult | None]:
        """The stateful half of a publish of ``n`` events, given what ``ingest.prepare``
        made of them (here or in a front process): rights, schemas, back-pressure, the
        durable append. ``decoded`` holds the events' data as decoded, when at hand; a
        schema check decodes the row's bytes otherwise.

        Events of publications another broadcaster owns are sent there (``Forwarding``),
        unless they were ``relayed`` here already: a relay is stored where it lands, even
        if the owner changed meanwhile, so an event never travels in a loop; with its
        ``relay_token``, so that the broadcaster that sent it can tell afterwards whether
        it was stored (``Forwarding``)."""
        if n > self._max_items:
            return [err("GenericBatchError", f"a batch holds at most {self._max_items} events")] * n
        fw = self._forwarding
        if fw is None or relayed:
            return await self._commit_here(caller, n, rows, refused, now, warnings, decoded, relay_token)
        here, away = fw.split(rows)
        if not away:
            return await self._commit_here(caller, n, rows, refused, now, warnings, decoded)
        urls = list(away)
        answers = await asyncio.gather(*(fw.send(u, caller, n, away[u], now) for u in urls))
        for url, answer in zip(urls, answers, strict=True):
            if answer is None:  # the owner surely has not stored them: store them here
                here.extend(away[url])
        results: list[ItemResult | None] = [None] * n
        if here or refused:
            results = await self._commit_here(caller, n, here, refused, now, warnings, decoded)
        for answer in answers:
            if answer is None:
                continue
            for i, r in enumerate(answer.results[:n]):
                if r is not None:
                    results[i] = r
            if warnings is not None:
                warnings.extend(w for w in answer.warnings if w not in warnings)
        return results

    async def _commit_here(
        self,
        caller: PrincipalRecord,
        n: int,
        rows: Sequence[ingest.Prepared],
        refused: dict[int, tuple[str, ItemResult]],
        now: int,
        warnings: list[str] | None,
        decoded: Sequence[Any] | None,
        relay_token: str | None = None,
    ) -> list[ItemResult | None]:
        spans = self._tracing.receive(rows) if self._tracing is not None else None
        if spans is None:
            return await self._store_here(caller, n, rows, refused, now, warnings, decoded, relay_token, None)
        results = None
        try:
            results = await self._store_here(caller, n, rows, refused, now, warnings, decoded, relay_token, spans)
            return results
        finally:
            spans.end(results)

    async def _store_here(
        self,
        caller: PrincipalRecord,
        n: int,
        rows: Sequence[ingest.Prepared],
        refused: dict[int, tuple[str, ItemResult]],
        now: int,
        warnings: list[str] | None,
        decoded: Sequence[Any] | None,
        relay_token: str | None,
        spans: PublishSpans | None,
    ) -> list[ItemResult | None]:
        namespaces = {r.namespace for r in rows}
        namespaces.update(ns for ns, _ in refused.values())
        await self._orch.known(namespaces)
        results: list[ItemResult | None] = [None] * n
        accepted: list[tuple[int, NewEvent]] = []
        # The receiving process's reading (``now``: the front's, the forwarding member's,
        # or this one's) is the event's time when it agrees with the cluster's clock; a
        # front or a member whose wall clock is off gets the cluster's clock's time here
        # instead. The store then keeps the later of it and the namespace's previous one.
        # A reading ahead of the clock by no more than the clock's own error bar agrees
        # with it: the cluster's clock, read over a loaded connection, may lag a front's
        # true wall clock by up to half that round trip.
        stamp = self._clock()
        if stamp - self._max_offset_ns <= now and (
                now <= stamp or now <= stamp + min(self._uncertainty(), self._max_offset_ns)):
            stamp = now
        busy = self._pending + len(rows) > self._max_pending
        bindings = self._bindings(namespaces, stamp)
        # Asked once per namespace of the batch, not once per event.
        refusals = await self._orch.publish_refusals(caller.name, namespaces)
        for i, (ns, why) in refused.items():
            # A publisher refused on a namespace hears that first, whatever else was wrong.
            refusal = refusals[ns]
            results[i] = err("Unauthorized", refusal) if refusal is not None else why
        until: dict[str, int] = {}
        for row in rows:
            i = row.index
            refusal = refusals[row.namespace]
            if refusal is not None:
                results[i] = err("Unauthorized", refusal)
                continue
            if bindings:
                b = bindings.get(row.namespace)
                if b is not None:
                    if b.refused is not None:
                        results[i] = err("GenericError", GenericError(ERR_SCHEMA_REFUSED, b.refused))
                        continue
                    data = decoded[i] if decoded is not None else _decode_value(row.data)
                    bad = b.model.validate(data)
                    if bad is not None:
                        results[i] = err("GenericError", GenericError(
                            ERR_SCHEMA_VIOLATION, f"{bad.path}: {bad.reason} (schema {b.schema_id})"
                        ))
                        continue
                    if b.warning is not None and warnings is not None and b.warning not in warnings:
                        warnings.append(b.warning)
            if busy:
                results[i] = err("Busy", "too many events waiting to be stored; retry shortly")
                continue
            # A keyed event's key lives for its publication's window (looked up once per
            # namespace of the request, and only for keyed events).
            if row.key is None:
                expires = 0
            else:
                expires = until.get(row.namespace, 0)
                if not expires:
                    expires = until[row.namespace] = stamp + self._orch.pub_configs[row.namespace].dedup_window_ns
            accepted.append((i, NewEvent(
                namespace=intern(row.namespace), source=caller.name, timestamp=stamp, data=row.data,
                headers=row.headers, key=row.key, fingerprint=row.fingerprint, key_expires=expires,
            )))
        if not accepted:
            return results
        if any(e.key is not None for _, e in accepted):
            return await self._store_keyed(caller, accepted, results, stamp, relay_token, spans)
        return await self._append(caller, accepted, results, relay_token, spans)

    async def _store_keyed(
        self,
        caller: PrincipalRecord,
        accepted: list[tuple[int, NewEvent]],
        results: list[ItemResult | None],
        now: int,
        relay_token: str | None,
        spans: PublishSpans | None,
    ) -> list[ItemResult | None]:
        """Append ``accepted``, some keyed: repeats of live keys are answered, not stored.
        The append is tried first with no lookup (a repeat is rare: only a publisher's
        retry makes one), so a keyed publish costs no more round trips than another; an
        append that meets a live key (``KeyTaken``: a repeat, or a race for the key) fails
        whole and is settled against the keys as they are, then tried again. The first
        append is not settled even against the request itself (a key twice in it fails
        that append too): a request of fresh keys, nearly every one, pays nothing per key
        here. Three failures after it (a key published over and over at once) are ``Busy``."""
        events = dict(accepted)
        todo: list[tuple[int, NewEvent]]
        echoes: list[tuple[int, int]]
        for attempt in range(4):
            if attempt == 0:
                # As they came: a key taken already, or twice in this request, fails the
                # append (KeyTaken), and the next attempt sorts the repeats out.
                todo, echoes = accepted, []
            else:
                wanted = [(e.namespace, e.key) for _, e in accepted if e.key is not None]
                try:
                    held = await self._store.find_keys(wanted, now) if wanted else {}
                except StoreError as x:
                    raise Unavailable(f"the events were not stored, the store is unavailable: {x}") from x
                todo, echoes = _keys.settle(accepted, held, results)
            try:
                if todo:
                    await self._append(caller, todo, results, relay_token, spans)
            except KeyTaken:
                accepted = todo + [(i, events[i]) for i, _ in echoes]
                accepted.sort(key=lambda p: p[0])
                if attempt < 3:
                    continue
                for i, _ in accepted:
                    results[i] = err("Busy", "the idempotency key is being published at this moment; retry shortly")
                return results
            _keys.answer_echoes(echoes, events, results)
            return results
        return results

    async def _append(
        self,
        caller: PrincipalRecord,
        accepted: list[tuple[int, NewEvent]],
        results: list[ItemResult | None],
        relay_token: str | None,
        spans: PublishSpans | None,
    ) -> list[ItemResult | None]:
        per_ns = Counter(ne.namespace for _, ne in accepted)
        stats = [Stat("publication", ns, "icrc72:publication:stats:events", c) for ns, c in per_ns.items()]
        stats.append(Stat("publisher", caller.name, "icrc72:publisher:stats:events", len(accepted)))
        stats.append(Stat("broadcaster", self._id, "icrc72:broadcaster:stats:events", len(accepted)))
        self._pending += len(accepted)
        positions = [i for i, _ in accepted] if spans is not None else ()
        if spans is not None:
            spans.commit(positions)
        try:
            new = [ne for _, ne in accepted]
            if relay_token is not None and self._forwarding is not None:
                storing = self._forwarding.store_relayed(new, stats, relay_token)
            else:
                storing = self._store.append(new, stats)
            stored = await (self._overload.commit(storing) if self._overload is not None else storing)
        except CommitTimeout:
            if spans is not None:
                spans.committed(positions, None, "commit_timeout")
            raise  # 503 with Retry-After: the outcome is unknown, a retry with the same key is safe
        except StoreUnavailable as x:
            if spans is not None:
                spans.committed(positions, None, "store_unavailable")
            # Retryable as a whole: the publisher tries again shortly (503, Retry-After). A
            # connection that broke after the commit was sent leaves the outcome unknown:
            # only a retry with the same idempotency keys is safe.
            raise Unavailable(
                f"the store is unavailable ({x}): the events may have been stored; retry with the same "
                "idempotency keys"
            ) from x
        except KeyTaken:
            if spans is not None:
                spans.committed(positions, None, "key_taken")
            raise
        except KeysFull as x:
            if spans is not None:
                spans.committed(positions, None, "keys_full")
            for i, _ in accepted:
                results[i] = err("Busy", str(x))
            return results
        except StoreError as x:
            if spans is not None:
                spans.committed(positions, None, "store_error")
            for i, _ in accepted:
                results[i] = err("GenericBatchError", f"the events were not stored: {x}")
            return results
        finally:
            self._pending -= len(accepted)
        if spans is not None:
            spans.committed(positions, [e.id for e in stored])
            spans.route(positions)
        self._on_appended(stored)
        for (i, _), s in zip(accepted, stored, strict=True):
            results[i] = ok([s.id])
        return results
