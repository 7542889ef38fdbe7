"""The stateless half of ``icrc72_publish``: checking and stamping each event.

Everything here depends only on the events and the time, never on who publishes or on
the registry, so it runs wherever the request is parsed: in the broker's own process, or
in a front process that hands the broker ready rows (docs/scaling.md). The broker then
does the stateful half (rights, schemas, back-pressure, the durable append).

Each event gets two reserved headers appended after the publisher's own:
``icrc72:broadcaster:received`` (Nat, UTC nanoseconds) and ``icrc72:eventData:hash``
(Blob, SHA-256 of the data's JSON wire bytes as stored). Publishers may not set
``icrc72:broadcaster:*``, ``icrc72:relay:*``, ``icrc72:eventData:*`` or
``icrc77:replay:*`` headers themselves.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Final

import msgspec

from . import ids, tracecontext, values
from .wire import Event, GenericError, ItemResult, err

__all__ = ["ERR_RESERVED_HEADER", "RESERVED_PREFIXES", "Prepared", "PublishBatch", "add_trace_context", "prepare"]

ERR_RESERVED_HEADER: Final = 1
"""``GenericError.error_code``: a publisher tried to set a reserved header."""

RESERVED_PREFIXES: Final = ("icrc72:broadcaster:", "icrc72:relay:", "icrc72:eventData:", "icrc77:replay:")

_encode = msgspec.json.encode


class Prepared(msgspec.Struct, array_like=True, frozen=True):
    """One checked event, ready to store: its position in the request, its namespace,
    the data's JSON bytes and the headers' JSON bytes with the reserved pairs appended."""

    index: int
    namespace: str
    data: bytes
    headers: bytes


class PublishBatch(msgspec.Struct, array_like=True, frozen=True):
    """What a front process hands the broker for one ``icrc72_publish`` request of ``n``
    events: the rows, and the events refused already, as (position, namespace, result)."""

    n: int
    now: int
    rows: list[Prepared]
    refused: list[tuple[int, str, ItemResult]]


def check_values(e: Event, where: str) -> None:
    """Raise ``values.InvalidValue`` if the event's data or a header value is not a
    well-formed ICRC-16 value; ``where`` names the event in the message (``$[3]``)."""
    values.check(e.data, f"{where}.data")
    if e.headers:
        for key, v in e.headers:
            values.check(v, f"{where}.headers.{key}")


def add_trace_context(events: Sequence[Event], traceparent: str | None, tracestate: str | None) -> None:
    """Give each event without a ``traceparent`` header of its own the trace context of
    the request that published it (its W3C ``traceparent``/``tracestate`` HTTP headers),
    as the Text headers ``traceparent`` and ``tracestate``; an invalid one is ignored
    (``core.tracecontext``). CloudEvents pushes carry it on (docs/cloudevents.md)."""
    context = tracecontext.trace_context(traceparent, tracestate)
    if context is None:
        return
    extra: list[tuple[str, object]] = [(tracecontext.TRACEPARENT, {"Text": context.traceparent})]
    if context.tracestate is not None:
        extra.append((tracecontext.TRACESTATE, {"Text": context.tracestate}))
    for e in events:
        if not e.headers:
            e.headers = list(extra)
        elif all(k != tracecontext.TRACEPARENT for k, _ in e.headers):
            e.headers = [*e.headers, *extra]


def prepare(
    events: Sequence[Event], now: int, *, checked: bool = False
) -> tuple[list[Prepared], dict[int, tuple[str, ItemResult]]]:
    """Check and stamp ``events`` received at ``now``: the rows to store, and the refusals
    of single events by position, with their namespace (a malformed id, a reserved header).

    A value that is not well-formed ICRC-16 spoils the whole request: ``values.InvalidValue``
    is raised, naming where (``$[i].data...``), and nothing is stored. ``checked``: the
    caller has run :func:`check_values` on each event already (the stream face does, one
    message at a time)."""
    if not checked:
        for i, e in enumerate(events):
            check_values(e, f"$[{i}]")
    rows: list[Prepared] = []
    refused: dict[int, tuple[str, ItemResult]] = {}
    received = b'["icrc72:broadcaster:received",{"Nat":%d}],["icrc72:eventData:hash",{"Blob":"' % now
    sha256, b64 = hashlib.sha256, base64.b64encode
    for i, e in enumerate(events):
        if e.id is not None:
            try:
                ids.parse_id(e.id)
            except ids.InvalidId as x:
                refused[i] = (e.namespace, err("ImproperId", str(x)))
                continue
        if e.headers:
            reserved = next((k for k, _ in e.headers if k.startswith(RESERVED_PREFIXES)), None)
            if reserved is not None:
                refused[i] = (e.namespace, err("GenericError", GenericError(
                    ERR_RESERVED_HEADER, f"header {reserved!r} is reserved for the broadcaster"
                )))
                continue
        data = _encode(e.data)
        # The reserved pairs are spliced in as bytes: this runs for every event.
        stamp = received + b64(sha256(data).digest()) + b'"}]]'
        headers = b"[" + _encode(e.headers)[1:-1] + b"," + stamp if e.headers else b"[" + stamp
        rows.append(Prepared(i, e.namespace, data, headers))
    return rows, refused
