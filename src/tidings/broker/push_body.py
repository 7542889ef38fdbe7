"""The body of a push: the JSON array of EventNotifications, as bytes.

A notification is its event's fields, which every subscription's push of that event
shares, plus its own id, its subscription's filter and the ``sent`` header of the push.
The shared part is encoded once per event and kept for a while (fan-out pushes one event
to many subscriptions within moments); the rest is spliced in around it. Only live
events are kept: those of the broadcaster's tail (``keep_above``). An older one is
replayed or read by a worker far behind, most likely pushed once, and keeping it would
push out the parts of the live events every subscription is about to send. Per
notification this is about half the time of encoding a struct for each
(BENCHMARKS.md, "Fan-out: the push body").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from ..store import StoredEvent

__all__ = ["PushBodies"]

_encode = msgspec.json.Encoder().encode
_SENT_KEY = b'["icrc72:broadcaster:sent",{"Nat":'
_CACHED_BYTES = 8 << 20
"""Bytes of shared parts kept; all are dropped when one more would pass this (cheaper
than an LRU, and the events of one fan-out are pushed close together)."""
_PART_MAX = 16 << 10
"""A larger part is not kept: encoding it is cheap beside its size, and a few large
events would otherwise push out many small ones."""


class _Noted(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def event(self) -> StoredEvent: ...


class _Shared(msgspec.Struct):
    eventId: int
    prev_id: int | None
    timestamp: int
    namespace: str
    data: msgspec.Raw
    source: str


class PushBodies:
    def __init__(self) -> None:
        self._shared: dict[int, bytes] = {}
        self._bytes = 0

    def _of(self, e: StoredEvent, keep_above: int) -> bytes:
        # Keyed by seq: a replayed copy of an event differs only in its headers, which are
        # not in this part.
        part = self._shared.get(e.seq)
        if part is None:
            encoded = _encode(_Shared(e.id, e.prev_id, e.timestamp, e.namespace, msgspec.Raw(e.data), e.source))
            part = encoded[1:-1]  # the fields without their braces
            if e.seq > keep_above and len(part) <= _PART_MAX:
                if self._bytes + len(part) > _CACHED_BYTES:
                    self._shared.clear()
                    self._bytes = 0
                self._shared[e.seq] = part
                self._bytes += len(part)
        return part

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def encode(self, batch: Sequence[_Noted], filter: str | None, sent_ns: int, keep_above: int = 0) -> bytes:
        """``batch`` as EventNotifications for a subscription with ``filter``, each with its
        event's headers and the ``icrc72:broadcaster:sent`` pair (``sent_ns``) appended.
        The shared parts of events with a seq above ``keep_above`` are kept."""
        sent = b"%b%d}]]}" % (_SENT_KEY, sent_ns)
        middle = b',"filter":' + _encode(filter) + b',"headers":'
        shared = self._of
        out = []
        for n in batch:
            e = n.event
            headers = e.headers
            if headers == b"[]":
                out.append(b'{"id":%d,%b%b[%b' % (n.id, shared(e, keep_above), middle, sent))
            else:
                out.append(b'{"id":%d,%b%b%b,%b' % (n.id, shared(e, keep_above), middle, headers[:-1], sent))
        return b"[" + b",".join(out) + b"]"
