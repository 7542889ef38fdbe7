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

An event may carry an idempotency key (``Event.idempotencyKey``): its row then carries
the key and a fingerprint of what the publisher sent (the data and the publisher's own
headers, the trace context aside: a retry may run under another trace), so that the
broker can tell a repeat of the event from another event reusing its key.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Final

import msgspec

from . import ids, tracecontext, values
from .wire import Event, GenericError, ItemResult, err

__all__ = [
    "ERR_BAD_KEY", "ERR_KEY_REUSED", "ERR_MAYBE_STORED", "ERR_RESERVED_HEADER", "MAX_KEY_CHARS",
    "RESERVED_PREFIXES", "Prepared", "PublishBatch",
    "add_trace_context", "check_key", "key_from_header", "prepare",
]

ERR_RESERVED_HEADER: Final = 1
"""``GenericError.error_code``: a publisher tried to set a reserved header."""
ERR_BAD_KEY: Final = 4
"""``GenericError.error_code``: an idempotency key that is empty, too long or has control characters."""
ERR_KEY_REUSED: Final = 5
"""``GenericError.error_code``: the idempotency key names another event within the publication's window."""
ERR_MAYBE_STORED: Final = 6
"""``GenericError.error_code``: the outcome is unknown (the event may have been stored): retry
with the same idempotency key, which is safe."""
MAX_KEY_CHARS: Final = 255
"""The longest idempotency key: a UUID is 36, a CloudEvents key (``core.cloudevents``) 46."""

RESERVED_PREFIXES: Final = ("icrc72:broadcaster:", "icrc72:relay:", "icrc72:eventData:", "icrc77:replay:")

_encode = msgspec.json.encode


class Prepared(msgspec.Struct, array_like=True, frozen=True):
    """One checked event, ready to store: its position in the request, its namespace,
    the data's JSON bytes and the headers' JSON bytes with the reserved pairs appended."""

    index: int
    namespace: str
    data: bytes
    headers: bytes
    key: str | None = None
    """The publisher's idempotency key, if it gave one."""
    fingerprint: bytes = b""
    """With a key: SHA-256 of the data and the publisher's headers (trace context aside)."""


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


def check_key(key: str) -> str | None:
    """Why ``key`` is not a valid idempotency key, or None."""
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        return f"an idempotency key has 1 to {MAX_KEY_CHARS} characters"
    if not key.isprintable():
        return "an idempotency key has no control characters"
    return None


_TRACE_HEADERS: Final = (tracecontext.TRACEPARENT, tracecontext.TRACESTATE)
_NO_HEADERS: Final = b"[]"
"""The encoded empty list: fingerprints already stored were made with it."""


def _fingerprint(digest: bytes, headers: list[tuple[str, object]] | None) -> bytes:
    # Headers are a map (ICRC-16): a retry that sends them in another order (a CloudEvent
    # sent again in the other HTTP mode, say) is the same event, so they are fingerprinted
    # in name order; the trace context is the try's, not the event's.
    if not headers:  # most keyed events: the general form's bytes, without building them
        return hashlib.sha256(digest + _NO_HEADERS).digest()
    own = sorted(((h[0], _encode(h[1])) for h in headers if h[0] not in _TRACE_HEADERS), key=lambda p: p[0])
    return hashlib.sha256(digest + _encode(own)).digest()


def key_from_header(events: Sequence[Event], header: str) -> str | None:
    """Give the one event of a request its ``Idempotency-Key`` HTTP header as its key
    (IETF draft "The Idempotency-Key HTTP Header Field"); why not, or None. A request of
    several events keys each in its body: one header cannot name several events."""
    if len(events) != 1:
        return "the Idempotency-Key header keys a request of one event: give each event its idempotencyKey"
    e = events[0]
    if e.idempotencyKey is not None and e.idempotencyKey != header:
        return "the Idempotency-Key header and the event's idempotencyKey differ"
    e.idempotencyKey = header
    return None


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
        key = e.idempotencyKey
        if key is not None:
            bad = check_key(key)
            if bad is not None:
                refused[i] = (e.namespace, err("GenericError", GenericError(ERR_BAD_KEY, bad)))
                continue
        data = _encode(e.data)
        digest = sha256(data).digest()
        # The reserved pairs are spliced in as bytes: this runs for every event.
        stamp = received + b64(digest) + b'"}]]'
        headers = b"[" + _encode(e.headers)[1:-1] + b"," + stamp if e.headers else b"[" + stamp
        if key is None:
            rows.append(Prepared(i, e.namespace, data, headers))
        else:
            rows.append(Prepared(i, e.namespace, data, headers, key, _fingerprint(digest, e.headers)))
    return rows, refused
