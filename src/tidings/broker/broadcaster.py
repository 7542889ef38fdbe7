"""The broadcaster's publish path: check, stamp, append durably, hand to delivery.

Each event gets the broadcaster's timestamp and two reserved headers appended after the
publisher's own: ``icrc72:broadcaster:received`` (Nat, UTC nanoseconds) and
``icrc72:eventData:hash`` (Blob, SHA-256 of the data's JSON wire bytes as stored).
Publishers may not set ``icrc72:broadcaster:*``, ``icrc72:relay:*`` or
``icrc72:eventData:*`` headers themselves.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from sys import intern
from typing import Any, Protocol

import msgspec

from ..core import ids, values
from ..core.wire import Event, GenericError, ItemResult, err, ok
from ..errors import BadRequest, StoreError
from ..store import NewEvent, PrincipalRecord, Stat, Store, StoredEvent
from .orchestrator import Orchestrator

__all__ = [
    "ERR_RESERVED_HEADER", "ERR_SCHEMA_REFUSED", "ERR_SCHEMA_VIOLATION", "Broadcaster", "SchemaCheck", "check_event",
]

ERR_RESERVED_HEADER = 1
"""``GenericError.error_code``: a publisher tried to set a reserved header."""
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
    check = values.check
    try:
        check(e.data, f"{where}.data")
        if e.headers:
            for key, v in e.headers:
                check(v, f"{where}.headers.{key}")
    except values.InvalidValue as x:
        raise BadRequest(str(x), code="invalid_value") from None


_RESERVED_PREFIXES = ("icrc72:broadcaster:", "icrc72:relay:", "icrc72:eventData:", "icrc77:replay:")
_encode = msgspec.json.encode


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
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._store = store
        self._orch = orchestrator
        self._id = broadcaster_id
        self._max_items = max_batch_items
        self._max_pending = max_pending_events
        self._on_appended = on_appended
        self._clock = clock
        self._pending = 0
        self.schemas: SchemaCheck | None = None

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
        namespaces = {e.namespace for e in events}
        self._orch.require_namespaces(namespaces)
        if not checked:
            for i, e in enumerate(events):
                check_event(e, f"$[{i}]")

        results: list[ItemResult | None] = [None] * n
        accepted: list[tuple[int, NewEvent]] = []
        busy = self._pending + n > self._max_pending
        now = self._clock()
        bindings = self._bindings(namespaces, now)
        received = b'["icrc72:broadcaster:received",{"Nat":%d}],["icrc72:eventData:hash",{"Blob":"' % now
        # Asked once per namespace of the batch, not once per event.
        refusals = {ns: self._orch.publish_refusal(caller.name, ns) for ns in namespaces}
        sha256, b64 = hashlib.sha256, base64.b64encode
        for i, e in enumerate(events):
            refusal = refusals[e.namespace]
            if refusal is not None:
                results[i] = err("Unauthorized", refusal)
                continue
            if e.id is not None:
                try:
                    ids.parse_id(e.id)
                except ids.InvalidId as x:
                    results[i] = err("ImproperId", str(x))
                    continue
            if e.headers:
                reserved = next((k for k, _ in e.headers if k.startswith(_RESERVED_PREFIXES)), None)
                if reserved is not None:
                    results[i] = err("GenericError", GenericError(
                        ERR_RESERVED_HEADER, f"header {reserved!r} is reserved for the broadcaster"
                    ))
                    continue
            if bindings:
                b = bindings.get(e.namespace)
                if b is not None:
                    if b.refused is not None:
                        results[i] = err("GenericError", GenericError(ERR_SCHEMA_REFUSED, b.refused))
                        continue
                    bad = b.model.validate(e.data)
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
            data = _encode(e.data)
            # The reserved pairs are spliced in as bytes: this runs for every event.
            stamp = received + b64(sha256(data).digest()) + b'"}]]'
            accepted.append((i, NewEvent(
                namespace=intern(e.namespace), source=caller.name, timestamp=now, data=data,
                headers=b"[" + _encode(e.headers)[1:-1] + b"," + stamp if e.headers else b"[" + stamp,
            )))
        if not accepted:
            return results

        per_ns = Counter(ne.namespace for _, ne in accepted)
        stats = [Stat("publication", ns, "icrc72:publication:stats:events", c) for ns, c in per_ns.items()]
        stats.append(Stat("publisher", caller.name, "icrc72:publisher:stats:events", len(accepted)))
        stats.append(Stat("broadcaster", self._id, "icrc72:broadcaster:stats:events", len(accepted)))
        self._pending += len(accepted)
        try:
            stored = await self._store.append([ne for _, ne in accepted], stats)
        except StoreError as x:
            for i, _ in accepted:
                results[i] = err("GenericBatchError", f"the events were not stored: {x}")
            return results
        finally:
            self._pending -= len(accepted)
        self._on_appended(stored)
        for (i, _), s in zip(accepted, stored, strict=True):
            results[i] = ok([s.id])
        return results
