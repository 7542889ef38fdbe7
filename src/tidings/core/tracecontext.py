"""W3C Trace Context (Level 1): which ``traceparent`` and ``tracestate`` values are kept.

An event keeps the trace context its publisher gave (the event headers ``traceparent``
and ``tracestate``, Text) and CloudEvents pushes carry it on (docs/cloudevents.md). The
rules live here alone, so that a later OpenTelemetry layer reads them from the same place.

A receiver ignores a ``traceparent`` it cannot parse, and the ``tracestate`` with it
(Trace Context §3.2.2.1, §3.3.1.1); it never refuses the request because of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

import msgspec

__all__ = [
    "TRACEPARENT", "TRACESTATE", "TraceContext", "first_of", "of_headers", "trace_context", "valid_traceparent",
    "valid_tracestate",
]

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"

_PARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.ASCII | re.DOTALL)
_TRACESTATE_MAX: Final = 512
"""What is kept of a ``tracestate``: the spec asks to propagate at least 512 characters;
a longer one is dropped whole rather than cut mid-member."""
_MEMBERS_MAX: Final = 32
_KEY: Final = re.compile(
    r"([a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})", re.ASCII
)
_VALUE: Final = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]", re.ASCII)


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a ``traceparent`` a receiver may use: lowercase hex, version
    not ``ff``, trace and parent ids not all zero; version 00 is exactly 55 characters, a
    later version may append ``-``-separated fields (§3.2.4)."""
    m = _PARENT.fullmatch(value)
    if m is None:
        return False
    version, trace_id, parent_id, _, rest = m.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return False
    if version == "00":
        return rest is None
    return rest is None or all(0x20 < ord(c) < 0x7F for c in rest)


def valid_tracestate(value: str) -> bool:
    """Whether ``value`` is a ``tracestate`` worth carrying: at most 32 ``key=value``
    members (empty members between commas are allowed), keys unique, within 512 chars."""
    if len(value) > _TRACESTATE_MAX:
        return False
    members = [m.strip(" \t") for m in value.split(",")]
    members = [m for m in members if m]
    if len(members) > _MEMBERS_MAX:
        return False
    keys = set()
    for m in members:
        key, eq, val = m.partition("=")
        if not eq or _KEY.fullmatch(key) is None or _VALUE.fullmatch(val) is None or key in keys:
            return False
        keys.add(key)
    return True


class TraceContext:
    """A ``traceparent`` known to be valid, and the ``tracestate`` that goes with it (or None)."""

    __slots__ = ("traceparent", "tracestate")

    def __init__(self, traceparent: str, tracestate: str | None) -> None:
        self.traceparent = traceparent
        self.tracestate = tracestate

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TraceContext) and (self.traceparent, self.tracestate) == (
            other.traceparent, other.tracestate
        )

    def __repr__(self) -> str:
        return f"TraceContext({self.traceparent!r}, {self.tracestate!r})"

    def pairs(self) -> dict[str, str]:
        """``traceparent`` (and ``tracestate``, when there is one) by name: as HTTP
        headers, stream message fields, XMPP header elements or attributes."""
        if self.tracestate is None:
            return {TRACEPARENT: self.traceparent}
        return {TRACEPARENT: self.traceparent, TRACESTATE: self.tracestate}


def trace_context(traceparent: str | None, tracestate: str | None) -> TraceContext | None:
    """The trace context to keep from the two values as received: None when the
    ``traceparent`` is missing or invalid (the ``tracestate`` is then dropped too); an
    invalid ``tracestate`` alone is dropped and the ``traceparent`` kept."""
    if traceparent is None or not valid_traceparent(traceparent):
        return None
    if tracestate is not None and not valid_tracestate(tracestate):
        tracestate = None
    return TraceContext(traceparent, tracestate)


_decode_pairs = msgspec.json.Decoder(list[Any]).decode
_MARK: Final = b'"traceparent"'


def of_headers(headers: bytes) -> TraceContext | None:
    """The trace context kept in an event's stored headers (the JSON wire form of its Map
    pairs): the first ``traceparent`` and ``tracestate`` pairs whose values are Text, as
    :func:`trace_context` keeps them. Headers a publisher set were never checked, so a
    malformed one gives None here rather than travelling on.

    Most events have none: a byte search answers for them without decoding anything."""
    if _MARK not in headers:
        return None
    try:
        pairs = _decode_pairs(headers)
    except (msgspec.DecodeError, RecursionError):
        return None
    found: dict[str, str] = {}
    for pair in pairs:
        if isinstance(pair, list) and len(pair) == 2 and pair[0] in (TRACEPARENT, TRACESTATE) and pair[0] not in found:
            value = pair[1]
            if isinstance(value, dict) and isinstance(value.get("Text"), str) and len(value) == 1:
                found[pair[0]] = value["Text"]
    return trace_context(found.get(TRACEPARENT), found.get(TRACESTATE))


def first_of(headers: Iterable[bytes]) -> TraceContext | None:
    """The trace context of the first event, of several pushed together, that has one
    (``headers``: their stored headers in push order): what a push's own HTTP headers
    carry, while each notification's headers keep its event's."""
    for h in headers:
        if _MARK in h:
            context = of_headers(h)
            if context is not None:
                return context
    return None
