"""The event log in the in-memory store."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..core.clock import later
from ..errors import KeyTaken
from ._base import EventStore
from ._memory_state import MemoryState, aggregate, limited
from ._records import KeyRecord, NewEvent, Stat, StoredEvent

__all__ = ["MemoryEventStore"]


class MemoryEventStore(MemoryState, EventStore):
    async def append(self, events: Sequence[NewEvent], stats: Iterable[Stat] = ()) -> list[StoredEvent]:
        self._check()
        agg = aggregate(stats)
        seq = len(self._events)
        last = dict(self._last_ids)
        out: list[StoredEvent] = []
        keys: dict[tuple[str, str], KeyRecord] = {}
        for e in events:
            if e.key is not None:
                k = (e.namespace, e.key)
                held = self._keys.get(k)
                if k in keys or (held is not None and held.expires_at > e.timestamp):
                    raise KeyTaken(f"the idempotency key {e.key!r} of {e.namespace!r} is taken")
                keys[k] = KeyRecord(e.namespace, e.key, e.fingerprint, e.source, last.get(e.namespace, 0) + 1,
                                    e.key_expires)
            prev = last.get(e.namespace, 0)
            seq += 1
            last[e.namespace] = prev + 1
            ts = self._last_ts[e.namespace] = later(e.timestamp, self._last_ts.get(e.namespace))
            out.append(StoredEvent(
                seq=seq, namespace=e.namespace, id=prev + 1, prev_id=prev or None, timestamp=ts,
                source=e.source, data=e.data, headers=e.headers,
            ))
        self._events.extend(out)
        self._last_ids = last
        self._keys.update(keys)
        self._apply_stats(agg)
        return out

    async def find_keys(self, keys: Sequence[tuple[str, str]], now: int) -> dict[tuple[str, str], KeyRecord]:
        self._check()
        found = {k: self._keys.get(k) for k in keys}
        return {k: r for k, r in found.items() if r is not None and r.expires_at > now}

    async def expire_keys(self, now: int, limit: int = 10_000) -> int:
        self._check()
        gone = [k for k, r in self._keys.items() if r.expires_at <= now][:limit]
        for k in gone:
            del self._keys[k]
        return len(gone)

    async def read_after(
        self, seq: int, namespaces: Sequence[str] | None = None, limit: int = 1000
    ) -> list[StoredEvent]:
        self._check()
        tail = self._events[max(seq, 0):]
        if self._trimmed:
            tail = [e for e in tail if e.seq not in self._trimmed]
        if namespaces is not None:
            wanted = set(namespaces)
            tail = [e for e in tail if e.namespace in wanted]
        return limited(tail, limit)

    async def read_seqs(self, seqs: Sequence[int]) -> list[StoredEvent]:
        self._check()
        n = len(self._events)
        return [self._events[s - 1] for s in sorted(set(seqs)) if 1 <= s <= n and s not in self._trimmed]

    async def count_events(self, namespace: str, upto: int | None = None) -> int:
        self._check()
        return sum(
            1 for e in self._events
            if e.namespace == namespace and (upto is None or e.seq <= upto) and e.seq not in self._trimmed
        )

    async def trim_events(self, namespace: str, before: int) -> int:
        self._check()
        kept = {n.seq for n in self._notes.values()} | {d.seq for d in self._dead.values()}
        last = len(self._events)
        gone = {
            e.seq for e in self._events
            if e.namespace == namespace and e.timestamp < before and e.seq != last
            and e.seq not in kept and e.seq not in self._trimmed
        }
        self._trimmed |= gone
        return len(gone)

    async def head(self) -> int:
        self._check()
        return len(self._events)
