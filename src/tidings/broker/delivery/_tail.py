"""The most recent events, in memory, so live delivery does not read the store.

The tail holds every event with ``seq > floor`` (up to ``capacity`` of them). A reader
whose position is below the floor has fallen behind and must read the store instead;
:meth:`Tail.read_after` says so by returning ``None``.

``seq`` is gap-free across the whole log, so the tail can tell when committed events
reach it out of order (two publishes resumed in a different order than they committed)
and holds the later ones back until the gap is filled.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterable, Sequence

from ...store import StoredEvent

__all__ = ["Tail"]


class _Ring:
    """One namespace's events in seq order; old entries are dropped from the front."""

    __slots__ = ("items", "seqs", "start")

    def __init__(self) -> None:
        self.items: list[StoredEvent] = []
        self.seqs: list[int] = []
        self.start = 0

    def append(self, e: StoredEvent) -> None:
        self.items.append(e)
        self.seqs.append(e.seq)

    def drop_first(self) -> None:
        self.start += 1
        # Compact now and then instead of popping from the front of a list each time.
        if self.start > 1024 and self.start * 2 > len(self.items):
            del self.items[: self.start]
            del self.seqs[: self.start]
            self.start = 0

    def after(self, seq: int, limit: int) -> list[StoredEvent]:
        i = bisect.bisect_right(self.seqs, seq, lo=self.start)
        return self.items[i : i + limit]

    def __len__(self) -> int:
        return len(self.items) - self.start


class Tail:
    def __init__(self, floor: int, capacity: int = 100_000) -> None:
        self.floor = floor
        """Every event with a greater seq (up to ``head``) is held here."""
        self.head = floor
        self._capacity = capacity
        self._order: deque[str] = deque()
        self._rings: dict[str, _Ring] = {}
        self._early: dict[int, StoredEvent] = {}

    def extend(self, events: Iterable[StoredEvent]) -> None:
        """Add newly committed events."""
        early = self._early
        for e in events:
            if e.seq == self.head + 1 and not early:
                self._add(e)  # the usual case: in order, nothing held back
            elif e.seq > self.head:
                early[e.seq] = e
        while early and (nxt := early.pop(self.head + 1, None)) is not None:
            self._add(nxt)
        while len(self._order) > self._capacity:
            ns = self._order.popleft()
            ring = self._rings[ns]
            self.floor = ring.items[ring.start].seq
            ring.drop_first()
            if not len(ring):
                del self._rings[ns]

    def _add(self, e: StoredEvent) -> None:
        ring = self._rings.get(e.namespace)
        if ring is None:
            ring = self._rings[e.namespace] = _Ring()
        ring.append(e)
        self._order.append(e.namespace)
        self.head = e.seq

    def read_after(self, seq: int, namespaces: Sequence[str], limit: int) -> list[StoredEvent] | None:
        """Up to ``limit`` events of these namespaces after ``seq``; None if below the floor."""
        if seq < self.floor:
            return None
        rings = [r for ns in namespaces if (r := self._rings.get(ns)) is not None]
        if not rings:
            return []
        if len(rings) == 1:
            return rings[0].after(seq, limit)
        merged = heapq.merge(*(r.after(seq, limit) for r in rings), key=lambda e: e.seq)
        return [e for _, e in zip(range(limit), merged, strict=False)]
