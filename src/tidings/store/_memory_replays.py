"""The replays and the credit ledger in the in-memory store (mixed into ``MemoryStore``)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import msgspec

from ..core.replay import ACTIVE
from ..errors import LimitReached
from ._cluster import Fence
from ._memory_state import MemoryState
from ._records import PendingNotification, Stat, StoredEvent
from ._replays import InsufficientCredit, ReplayCounts, ReplayRecord, ReplayStore, with_pairs

__all__ = ["MemoryReplayStore"]


class MemoryReplayStore(MemoryState, ReplayStore):
    """Copies in and out, so callers never share the store's objects (as with SQLite)."""

    @staticmethod
    def _copy(r: ReplayRecord) -> ReplayRecord:
        out = copy.copy(r)
        out.config = msgspec.json.decode(msgspec.json.encode(r.config))
        return out

    async def create_replay(
        self, record: ReplayRecord, *, limit: int | None = None, total: int | None = None
    ) -> ReplayRecord:
        self._check()
        st = self._replay_state()
        if total is not None and sum(1 for r in st["replays"].values() if r.state in ACTIVE) >= total:
            raise LimitReached(f"{total} replays are active already", limit=total, everyone=True)
        if limit is not None and sum(
            1 for r in st["replays"].values() if r.requester == record.requester and r.state in ACTIVE
        ) >= limit:
            raise LimitReached(f"{record.requester} has {limit} replays active already", limit=limit)
        st["last_id"] += 1
        record.id = st["last_id"]
        st["replays"][record.id] = self._copy(record)
        return record

    async def list_replays(
        self,
        after: int | None = None,
        limit: int | None = None,
        *,
        namespace: str | None = None,
        states: Sequence[str] | None = None,
        requester: str | None = None,
    ) -> list[ReplayRecord]:
        self._check()
        rows = [
            self._copy(r) for i, r in sorted(self._replay_state()["replays"].items())
            if i > (after or 0)
            and (namespace is None or r.namespace == namespace)
            and (states is None or r.state in states)
            and (requester is None or r.requester == requester)
        ]
        return rows if limit is None or limit < 0 else rows[:limit]

    async def get_replays(self, ids: Sequence[int]) -> list[ReplayRecord]:
        self._check()
        replays = self._replay_state()["replays"]
        return [self._copy(replays[i]) for i in sorted(set(ids)) if i in replays]

    async def move_replay(
        self, replay_id: int, state: str, *, detail: str = "", from_states: Iterable[str], now: int
    ) -> ReplayRecord | None:
        self._check()
        r = self._replay_state()["replays"].get(replay_id)
        if r is None or r.state not in set(from_states):
            return None
        r.state, r.detail, r.updated_at = state, detail, now
        return self._copy(r)

    async def record_replay_batch(
        self,
        replay_id: int,
        subscription_id: int,
        events: Sequence[StoredEvent],
        position: int,
        stats: Iterable[Stat] = (),
        *,
        now: int,
        ids: Sequence[int] | None = None,
        fence: Fence | None = None,
    ) -> list[int] | None:
        self._check()
        stats = list(stats)
        st = self._replay_state()
        r = self._debit(replay_id, subscription_id, len(events))
        if r is None:
            return None
        if ids is None:
            first = self._last_note_id + 1
            self._last_note_id += len(events)
            ids = range(first, first + len(events))
        for nid, e in zip(ids, events, strict=True):
            self._notes[nid] = PendingNotification(
                id=nid, subscription_id=subscription_id, seq=e.seq, namespace=e.namespace, created_at=now
            )
            st["notes"][nid] = (replay_id, e)
        r.position, r.sent, r.updated_at = position, r.sent + len(events), now
        self._count(stats)
        return list(ids)

    def _debit(self, replay_id: int, subscription_id: int, n: int, *, done: bool = False) -> ReplayRecord | None:
        """As ``_sqlite_replays._debit``: pushes already ``done`` only need the replay."""
        st = self._replay_state()
        r = st["replays"].get(replay_id)
        if r is None or (not done and (r.state != "running" or subscription_id not in self._subs)):
            return None
        debit = r.price * n
        if debit and st["credits"].get(r.requester, 0) < debit:
            raise InsufficientCredit(f"{r.requester}'s credit does not cover {debit}")
        if debit:
            st["credits"][r.requester] -= debit
            r.charged += debit
        return r

    def _count(self, stats: Iterable[Stat]) -> None:
        for s in stats:
            k = (s.scope, s.key, s.name)
            self._stats[k] = self._stats.get(k, 0) + s.delta
            if self._stats[k] == 0:
                del self._stats[k]

    async def replay_id_base(self, replay_id: int, n: int) -> int:
        self._check()
        bases = self._replay_state().setdefault("bases", {})
        if replay_id not in bases:
            bases[replay_id] = self._last_note_id + 1
            self._last_note_id += n
        return int(bases[replay_id])

    async def record_replay_confirmed(
        self,
        replay_id: int,
        subscription_id: int,
        confirmed: Sequence[tuple[int, StoredEvent]],
        position: int,
        stats: Iterable[Stat] = (),
        *,
        created_at: int,
        now: int,
        fence: Fence | None = None,
    ) -> bool:
        self._check()
        stats = list(stats)
        r = self._debit(replay_id, subscription_id, len(confirmed), done=True)
        if r is None:
            return False
        sub = self._subs.get(subscription_id)
        subscriber = "" if sub is None else sub.subscriber
        self._confirmed_records(subscription_id, subscriber, confirmed, created_at, now, replay=True)
        r.position, r.sent, r.updated_at = position, r.sent + len(confirmed), now
        self._count(stats)
        return True

    async def replay_events(self, notification_ids: Sequence[int]) -> dict[int, StoredEvent]:
        self._check()
        notes = self._replay_state()["notes"]
        return {i: notes[i][1] for i in notification_ids if i in notes}

    async def replay_counts(self, replay_ids: Sequence[int]) -> dict[int, ReplayCounts]:
        self._check()
        notes = self._replay_state()["notes"]
        out = {}
        for rid in replay_ids:
            mine = [i for i, (r, _) in notes.items() if r == rid]
            out[rid] = ReplayCounts(sum(i in self._notes for i in mine), sum(i in self._dead for i in mine))
        return out

    async def sweep_replay_notes(self, limit: int | None = None) -> int:
        self._check()
        notes = self._replay_state()["notes"]
        gone = [i for i in notes if i not in self._notes and i not in self._dead]
        gone = gone if limit is None or limit < 0 else gone[:limit]
        for i in gone:
            del notes[i]
        return len(gone)

    async def read_range(
        self, namespace: str, after_id: int, before_id: int, limit: int, *, pairs: bytes | None = None
    ) -> list[StoredEvent]:
        self._check()
        out = [
            e for e in self._events
            if e.namespace == namespace and after_id < e.id < before_id and e.seq not in self._trimmed
        ]
        return with_pairs(out[: max(limit, 0)], pairs)

    async def last_event_id(self, namespace: str) -> int:
        self._check()
        return self._last_ids.get(namespace, 0)

    async def fund_credit(self, principal: str, amount: int) -> int:
        self._check()
        credits = self._replay_state()["credits"]
        balance = credits.get(principal, 0) + amount
        if balance < 0:
            raise InsufficientCredit(f"{principal}'s credit is {balance - amount}; cannot take {-amount}")
        credits[principal] = balance
        return int(balance)

    async def credit_balance(self, principal: str) -> int:
        self._check()
        return int(self._replay_state()["credits"].get(principal, 0))
