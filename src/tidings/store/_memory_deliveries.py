"""Notifications, dead letters and delivery records in the in-memory store."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from ._base import DeliveryStore
from ._cluster import Fence
from ._deliveries import DeliveryRecord, Outcome
from ._memory_state import MemoryState, aggregate, limited
from ._records import DeadLetter, PendingNotification, Stat, StoredEvent

__all__ = ["MemoryDeliveryStore"]


class MemoryDeliveryStore(MemoryState, DeliveryStore):
    async def open_notifications(
        self,
        subscription_id: int,
        events: Sequence[StoredEvent],
        cursor: int,
        stats: Iterable[Stat] = (),
        ids: Sequence[int] | None = None,
        *,
        fence: Fence | None = None,
    ) -> list[int]:
        self._check()
        stats = list(stats)  # taken before the existence check, as SQLite does
        sub = self._subs.get(subscription_id)
        if sub is None:
            return []
        agg = aggregate(stats)
        now = self.clock.now_ns()
        if ids is None:
            ids = range(self._last_note_id + 1, self._last_note_id + 1 + len(events))
            self._last_note_id += len(events)
        notes = [
            PendingNotification(id=i, subscription_id=subscription_id, seq=e.seq, namespace=e.namespace, created_at=now)
            for i, e in zip(ids, events, strict=True)
        ]
        for n in notes:
            self._notes[n.id] = n
        sub.cursor = cursor
        self._apply_stats(agg)
        return [n.id for n in notes]

    async def take_notification_ids(self, n: int) -> int:
        self._check()
        self._last_note_id += n
        return self._last_note_id - n + 1

    async def record_confirmed(
        self,
        subscription_id: int,
        subscriber: str,
        confirmed: Sequence[tuple[int, StoredEvent]],
        cursor: int,
        stats: Iterable[Stat] = (),
        *,
        created_at: int,
        now: int,
        fence: Fence | None = None,
    ) -> None:
        self._check()
        agg = aggregate(stats)
        self._confirmed_records(subscription_id, subscriber, confirmed, created_at, now, replay=False)
        sub = self._subs.get(subscription_id)
        if sub is not None:
            sub.cursor = max(sub.cursor, cursor)
        self._apply_stats(agg)

    async def mark_sent(
        self, ids: Sequence[int], stats: Mapping[int, Sequence[Stat]] | None = None, *, fence: Fence | None = None
    ) -> list[int]:
        self._check()
        per_id = stats or {}
        marked = [i for i in dict.fromkeys(ids) if i in self._notes and i not in self._sent]
        self._sent.update(marked)
        self._apply_stats(aggregate(s for i in marked for s in per_id.get(i, ())))
        return marked

    async def settle_notifications(
        self,
        ids: Sequence[int],
        stats: Mapping[int, Sequence[Stat]] | None = None,
        sent_stats: Mapping[int, Sequence[Stat]] | None = None,
        *,
        fence: Fence | None = None,
    ) -> list[int]:
        self._check()
        per_id = stats or {}
        per_sent = sent_stats or {}
        unsent = [i for i in dict.fromkeys(ids) if i in self._notes and i not in self._sent]
        now = self.clock.now_ns()
        records = [
            self._delivery(n, "confirmed", now, n.attempts + 1)
            for i in dict.fromkeys(ids) if (n := self._notes.get(i)) is not None
        ]
        done = []
        for i in ids:
            if self._notes.pop(i, None) is not None:
                done.append(i)
        self._apply_stats(aggregate(s for i in done for s in per_id.get(i, ())))
        self._apply_stats(aggregate(s for i in unsent for s in per_sent.get(i, ())))
        self._sent.difference_update(done)
        self._keep(records)
        return done

    async def get_notifications(self, ids: Sequence[int]) -> list[PendingNotification]:
        self._check()
        return [self._notes[i] for i in sorted(set(ids)) if i in self._notes]

    async def former_subscribers(self, ids: Sequence[int]) -> dict[int, str]:
        wanted = set(ids)
        out = {r.notification_id: r.subscriber for r in self._deliveries if r.notification_id in wanted}
        out.update((i, self._dead[i].subscriber) for i in wanted if i in self._dead)
        return out

    async def pending(self, subscription_id: int) -> list[PendingNotification]:
        self._check()
        return sorted((n for n in self._notes.values() if n.subscription_id == subscription_id), key=lambda n: n.id)

    async def pending_counts(self) -> dict[int, int]:
        self._check()
        counts: dict[int, int] = {}
        for n in self._notes.values():
            counts[n.subscription_id] = counts.get(n.subscription_id, 0) + 1
        return counts

    async def last_notification_id(self) -> int:
        self._check()
        return self._last_note_id

    async def count_attempt(
        self, ids: Sequence[int], stats: Iterable[Stat] = (), *, fence: Fence | None = None
    ) -> None:
        self._check()
        self._apply_stats(aggregate(stats))
        for i in ids:
            n = self._notes.get(i)
            if n is not None:
                self._notes[i] = dataclasses.replace(n, attempts=n.attempts + 1)


    async def dead_letter(
        self, letters: Sequence[DeadLetter], stats: Iterable[Stat] = (), *, fence: Fence | None = None
    ) -> list[int]:
        self._check()
        agg = aggregate(stats)
        records = {
            d.id: self._delivery(n, "dead", d.dead_at, d.attempts, subscriber=d.subscriber)
            for d in letters if (n := self._notes.get(d.id)) is not None
        }
        moved = []
        for d in letters:
            self._sent.discard(d.id)
            if self._notes.pop(d.id, None) is not None:
                self._dead[d.id] = d
                moved.append(d.id)
        self._apply_stats(agg)
        self._keep(records.values())
        return moved

    async def list_dead_letters(
        self,
        subscription_ids: Sequence[int] | None = None,
        after: int | None = None,
        limit: int | None = None,
        *,
        ended_of: str | None = None,
    ) -> list[DeadLetter]:
        self._check()
        found = [
            d for i, d in sorted(self._dead.items())
            if i > (after or 0) and (
                subscription_ids is None or d.subscription_id in subscription_ids
                or (ended_of is not None and d.subscriber == ended_of and d.subscription_id not in self._subs)
            )
        ]
        return found if limit is None or limit < 0 else found[:limit]

    async def redrive_dead_letters(self, ids: Sequence[int], now: int) -> list[PendingNotification]:
        self._check()
        out = []
        for i in ids:
            d = self._dead.pop(i, None)
            if d is not None:
                n = PendingNotification(
                    id=i, subscription_id=d.subscription_id, seq=d.seq, namespace=d.namespace, created_at=now
                )
                self._notes[i] = n
                out.append(n)
        return out

    async def drop_dead_letters(self, ids: Sequence[int], stats: Iterable[Stat] = ()) -> list[int]:
        self._check()
        agg = aggregate(stats)
        now = self.clock.now_ns()
        records = [
            self._delivery(
                PendingNotification(id=d.id, subscription_id=d.subscription_id, seq=d.seq, namespace=d.namespace),
                "dropped", now, d.attempts, subscriber=d.subscriber, created_at=None,
            )
            for i in dict.fromkeys(ids) if (d := self._dead.get(i)) is not None
        ]
        done = [i for i in ids if self._dead.pop(i, None) is not None]
        self._apply_stats(agg)
        self._keep(records)
        return done


    def _delivery(
        self, n: PendingNotification, outcome: Outcome, settled_at: int, attempts: int, *,
        subscriber: str | None = None, created_at: int | Literal["pending"] | None = "pending",
    ) -> DeliveryRecord:
        """The record of ``n``'s outcome, numbered by :meth:`_keep`."""
        # A replayed notification's event may have left the log: the replay keeps a copy.
        replayed = self._replay_state()["notes"].get(n.id)
        e = self._events[n.seq - 1] if 1 <= n.seq <= len(self._events) and n.seq not in self._trimmed else None
        if e is None and replayed is not None:
            e = replayed[1]
        if subscriber is None:
            sub = self._subs.get(n.subscription_id)
            subscriber = "" if sub is None else sub.subscriber
        return DeliveryRecord(
            serial=0, notification_id=n.id,
            subscription_id=n.subscription_id, subscriber=subscriber, namespace=n.namespace, seq=n.seq,
            event_id=0 if e is None else e.id, source=None if e is None else e.source,
            event_timestamp=None if e is None else e.timestamp,
            created_at=n.created_at if created_at == "pending" else created_at,
            settled_at=settled_at, attempts=attempts, outcome=outcome, replay=replayed is not None,
        )

    def _keep(self, records: Iterable[DeliveryRecord]) -> None:
        for r in records:
            self._deliveries.append(dataclasses.replace(r, serial=len(self._deliveries) + 1))

    async def deliveries(self, after: int = 0, limit: int | None = None) -> list[DeliveryRecord]:
        self._check()
        return limited(self._deliveries[max(after, 0):], limit)
