"""The body of a push: the JSON array of EventNotifications, as bytes.

A notification is its event's fields, which every subscription's push of that event
shares, plus its own id, its subscription's filter and the ``sent`` header of the push.
The shared part is encoded once per event and kept for a while (fan-out pushes one event
to many subscriptions within moments); the rest is spliced in around it. Only live
events are kept: those of the broadcaster's tail (``keep_above``). An older one is
replayed or read by a worker far behind, most likely pushed once, and keeping it would
push out the parts of the live events every subscription is about to send. Per
notification this is about half the time of encoding a struct for each
(docs/benchmarks/history/2026-11-26-fanout-push-body-and-histogram.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

import msgspec

from ...core import cloudevents_push as ce
from ...store import StoredEvent

__all__ = ["PushBodies", "cloudevents_push", "joined"]

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


_PART: Final = b'"eventId":%d,"prev_id":%b,"timestamp":%d,"namespace":%b,"data":%b,"source":%b'
_WHOLE: Final = b'{"id":%d,' + _PART + b"%b%b"
_NAMES_MAX = 4096
"""Namespaces and sources kept JSON-encoded; all are dropped past this many."""


class PushBodies:
    def __init__(self) -> None:
        self._shared: dict[int, bytes] = {}
        self._bytes = 0
        self._names: dict[str, bytes] = {}

    def _name(self, s: str) -> bytes:
        # A JSON string: the few namespaces and publishers of a push are encoded once.
        got = self._names.get(s)
        if got is None:
            if len(self._names) >= _NAMES_MAX:
                self._names.clear()
            got = self._names[s] = _encode(s)
        return got

    def _of(self, e: StoredEvent, keep_above: int) -> bytes:
        # Keyed by seq: a replayed copy of an event differs only in its headers, which are
        # not in this part.
        part = self._shared.get(e.seq)
        if part is None:
            # Formatted rather than encoded from a struct: half the time, and ``data`` is
            # the stored JSON already.
            prev = b"null" if e.prev_id is None else b"%d" % e.prev_id
            part = _PART % (
                e.id, prev, e.timestamp, self._name(e.namespace), e.data, self._name(e.source)
            )
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
        return joined(self.parts(batch, filter, keep_above), sent_ns)

    def parts(self, batch: Sequence[_Noted], filter: str | None, keep_above: int = 0) -> list[bytes]:
        """Each notification of ``batch`` but its ``sent`` pair (:func:`joined` adds it):
        all of a body's per-event work, which can be done before the time it is sent is
        known (a replay's next batch, while the current one is pushed)."""
        middle = b',"filter":' + _encode(filter) + b',"headers":'
        kept, name = self._shared, self._name
        out = []
        for n in batch:
            e = n.event
            headers = e.headers
            opened = b"[" if headers == b"[]" else headers[:-1] + b","
            part = kept.get(e.seq)
            if part is None and e.seq <= keep_above:
                # Not kept (a replayed or old event): one format for the whole notification.
                prev = b"null" if e.prev_id is None else b"%d" % e.prev_id
                out.append(_WHOLE % (n.id, e.id, prev, e.timestamp, name(e.namespace), e.data, name(e.source), middle,
                                     opened))
                continue
            if part is None:
                part = self._of(e, keep_above)
            out.append(b'{"id":%d,%b%b%b' % (n.id, part, middle, opened))
        return out


def joined(parts: Sequence[bytes], sent_ns: int) -> bytes:
    """The body of :meth:`PushBodies.parts`, each closed by the ``sent`` pair of ``sent_ns``."""
    sent = b"%b%d}]]}" % (_SENT_KEY, sent_ns)
    if not parts:
        return b"[]"
    return b"".join((b"[", (sent + b",").join(parts), sent, b"]"))  # one copy of the whole


def cloudevents_push(batch: Sequence[_Noted], mode: str) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a push of ``batch`` as CloudEvents, for a subscription
    that asked for them in ``mode`` (``core.cloudevents_push``; docs/cloudevents.md)."""
    return ce.push(
        [ce.Note(n.id, n.event.id, n.event.namespace, n.event.timestamp, n.event.data, n.event.headers)
         for n in batch],
        mode,
    )
