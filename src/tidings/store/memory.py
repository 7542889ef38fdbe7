"""The in-memory store: plain dicts and lists, for tests and throwaway brokers.

It behaves like ``SQLiteStore`` in everything a caller can observe (ordering, ids,
return values, what a failed call leaves) except durability. No method awaits, so on
one event loop every call is atomic without locks; each write first computes all it
will change and only then mutates, so a call that raises leaves nothing behind.

Records handed out are fresh objects and configs are kept JSON-encoded, as in SQLite,
so callers can neither alter the store's state nor see values the SQLite store would
not return (a tuple comes back as a list).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from ..errors import StoreError
from ._base import (
    DeadLetter,
    NewEvent,
    PendingNotification,
    PrincipalRecord,
    PublicationRecord,
    Stat,
    Store,
    StoredEvent,
    SubscriptionRecord,
    SubscriptionSecret,
)
from ._deliveries import DeliveryRecord, Outcome
from ._memory_replays import MemoryReplayStore
from ._memory_schemas import MemorySchemaStore

__all__ = ["MemoryStore"]

_enc = msgspec.json.encode
_dec = msgspec.json.decode


def _aggregate(stats: Iterable[Stat]) -> dict[tuple[str, str, str], int]:
    """Sum the deltas per counter, dropping those that cancel out (as SQLite does)."""
    agg: dict[tuple[str, str, str], int] = {}
    for s in stats:
        k = (s.scope, s.key, s.name)
        agg[k] = agg.get(k, 0) + s.delta
    return {k: v for k, v in agg.items() if v}


def _limited(rows: list[Any], limit: int | None) -> list[Any]:
    # SQLite reads a negative LIMIT as "no limit".
    return rows if limit is None or limit < 0 else rows[:limit]


class _Sub:
    """A subscription as stored: config JSON-encoded, everything else plain."""

    __slots__ = ("config", "created_at", "cursor", "endpoint", "id", "mode", "namespace", "subscriber")

    def __init__(self, r: SubscriptionRecord, sub_id: int, cursor: int) -> None:
        self.id = sub_id
        self.subscriber = r.subscriber
        self.namespace = r.namespace
        self.endpoint = r.endpoint
        self.mode = r.mode
        self.config = _enc(r.config)
        self.cursor = cursor
        self.created_at = r.created_at

    def record(self) -> SubscriptionRecord:
        return SubscriptionRecord(
            id=self.id, subscriber=self.subscriber, namespace=self.namespace, endpoint=self.endpoint,
            mode=self.mode, config=_dec(self.config), cursor=self.cursor, created_at=self.created_at,
        )


class MemoryStore(MemorySchemaStore, MemoryReplayStore, Store):
    """Everything in this process's memory; lost when the object is. Survives close/open."""

    def __init__(self) -> None:
        self._open = False
        self._principals: dict[str, PrincipalRecord] = {}
        self._tokens: dict[bytes, str] = {}
        # namespace -> (owner, JSON config, created_at)
        self._publications: dict[str, tuple[str, bytes, int]] = {}
        self._publishers: set[tuple[str, str]] = set()
        self._subs: dict[int, _Sub] = {}
        self._last_sub_id = 0
        self._events: list[StoredEvent] = []  # seq n is at index n - 1
        self._trimmed: set[int] = set()  # seqs retention has deleted
        self._last_ids: dict[str, int] = {}
        self._notes: dict[int, PendingNotification] = {}  # insertion order is id order
        self._sent: set[int] = set()  # pending notifications the endpoint took (mark_sent)
        self._last_note_id = 0
        self._stats: dict[tuple[str, str, str], int] = {}
        self._dead: dict[int, DeadLetter] = {}
        self._secrets: dict[int, list[SubscriptionSecret]] = {}  # in the order added
        self._deliveries: list[DeliveryRecord] = []  # serial n is at index n - 1

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    def _check(self) -> None:
        if not self._open:
            raise StoreError("store is not open")

    def _apply_stats(self, agg: dict[tuple[str, str, str], int]) -> None:
        for k, v in agg.items():
            self._stats[k] = self._stats.get(k, 0) + v

    # -- principals -------------------------------------------------------------------

    async def create_principal(self, record: PrincipalRecord, token_hash: bytes) -> bool:
        self._check()
        if record.name in self._principals:
            return False
        if token_hash in self._tokens:
            raise StoreError("token hash already in use")
        self._principals[record.name] = PrincipalRecord(
            name=record.name, admin=bool(record.admin), created_at=record.created_at
        )
        self._tokens[token_hash] = record.name
        return True

    async def add_token(self, name: str, token_hash: bytes) -> bool:
        self._check()
        if name not in self._principals:
            return False
        if token_hash in self._tokens:
            raise StoreError("token hash already in use")
        self._tokens[token_hash] = name
        return True

    async def principal_by_token(self, token_hash: bytes) -> PrincipalRecord | None:
        self._check()
        name = self._tokens.get(token_hash)
        return None if name is None else self._principals[name]

    async def revoke_tokens(self, name: str, token_hash: bytes | None = None) -> int:
        self._check()
        gone = [h for h, n in self._tokens.items() if n == name and (token_hash is None or h == token_hash)]
        for h in gone:
            del self._tokens[h]
        return len(gone)

    async def list_principals(self) -> list[PrincipalRecord]:
        self._check()
        return [self._principals[n] for n in sorted(self._principals)]

    # -- publications -----------------------------------------------------------------

    async def create_publication(self, record: PublicationRecord) -> bool:
        self._check()
        if record.namespace in self._publications:
            return False
        self._publications[record.namespace] = (record.owner, _enc(record.config), record.created_at)
        return True

    async def delete_publication(self, namespace: str) -> list[int]:
        self._check()
        ids = sorted(i for i, s in self._subs.items() if s.namespace == namespace)
        for i in ids:
            del self._subs[i]
        self._notes = {i: n for i, n in self._notes.items() if n.subscription_id not in ids}
        self._sent &= self._notes.keys()
        self._dead = {i: d for i, d in self._dead.items() if d.subscription_id not in ids}
        for i in ids:
            self._secrets.pop(i, None)
        self._publishers = {p for p in self._publishers if p[0] != namespace}
        self._publications.pop(namespace, None)
        return ids

    async def update_publication(self, record: PublicationRecord) -> None:
        self._check()
        old = self._publications.get(record.namespace)
        if old is not None:
            self._publications[record.namespace] = (record.owner, _enc(record.config), old[2])

    async def list_publications(
        self, after: str | None = None, limit: int | None = None
    ) -> list[PublicationRecord]:
        self._check()
        names = sorted(n for n in self._publications if n > (after or ""))
        out = []
        for n in _limited(names, limit):
            owner, config, created = self._publications[n]
            out.append(PublicationRecord(namespace=n, owner=owner, config=_dec(config), created_at=created))
        return out

    async def add_publisher(self, namespace: str, principal: str) -> bool:
        self._check()
        if (namespace, principal) in self._publishers:
            return False
        self._publishers.add((namespace, principal))
        return True

    async def list_publishers(self, namespace: str | None = None) -> list[tuple[str, str]]:
        self._check()
        return sorted(p for p in self._publishers if namespace is None or p[0] == namespace)

    # -- subscriptions ----------------------------------------------------------------

    async def create_subscription(self, record: SubscriptionRecord) -> SubscriptionRecord:
        self._check()
        sub = _Sub(record, self._last_sub_id + 1, len(self._events))
        self._last_sub_id = sub.id
        self._subs[sub.id] = sub
        # SQLite hands back the caller's config as given, not its JSON round trip.
        return dataclasses.replace(record, id=sub.id, cursor=sub.cursor, config=copy.deepcopy(record.config))

    async def update_subscription(self, record: SubscriptionRecord) -> None:
        self._check()
        sub = self._subs.get(record.id)
        if sub is not None:
            config = _enc(record.config)
            sub.endpoint, sub.mode, sub.config = record.endpoint, record.mode, config

    async def move_cursor(self, subscription_id: int, cursor: int) -> None:
        self._check()
        sub = self._subs.get(subscription_id)
        if sub is not None:
            sub.cursor = cursor

    async def delete_subscription(self, subscription_id: int, *, keep_dead_letters: bool = False) -> None:
        self._check()
        self._subs.pop(subscription_id, None)
        self._notes = {i: n for i, n in self._notes.items() if n.subscription_id != subscription_id}
        self._sent &= self._notes.keys()
        if not keep_dead_letters:
            self._dead = {i: d for i, d in self._dead.items() if d.subscription_id != subscription_id}
        self._secrets.pop(subscription_id, None)

    async def list_subscriptions(
        self, namespace: str | None = None, after: int | None = None, limit: int | None = None
    ) -> list[SubscriptionRecord]:
        self._check()
        subs = [
            s for i, s in sorted(self._subs.items())
            if i > (after or 0) and (namespace is None or s.namespace == namespace)
        ]
        return [s.record() for s in _limited(subs, limit)]

    # -- signing secrets --------------------------------------------------------------

    async def add_secret(
        self, subscription_id: int, secret: str, expires_previous_at: int | None, *, created_at: int
    ) -> bool:
        self._check()
        if subscription_id not in self._subs:
            return False
        kept = [
            s for s in self._secrets.get(subscription_id, ())
            if s.expires_at is None or s.expires_at > created_at
        ]
        if expires_previous_at is not None:
            kept = [
                s if s.expires_at is not None and s.expires_at <= expires_previous_at
                else dataclasses.replace(s, expires_at=expires_previous_at)
                for s in kept
            ]
        kept.append(SubscriptionSecret(secret=secret, created_at=created_at))
        self._secrets[subscription_id] = kept
        return True

    async def secrets(self, subscription_id: int, now: int) -> list[SubscriptionSecret]:
        self._check()
        # Newest first; of two added at the same instant, the later one.
        found = reversed(self._secrets.get(subscription_id, ()))
        return sorted(
            (s for s in found if s.expires_at is None or s.expires_at > now), key=lambda s: -s.created_at
        )

    # -- the event log ----------------------------------------------------------------

    async def append(self, events: Sequence[NewEvent], stats: Iterable[Stat] = ()) -> list[StoredEvent]:
        self._check()
        agg = _aggregate(stats)
        seq = len(self._events)
        last = dict(self._last_ids)
        out: list[StoredEvent] = []
        for e in events:
            prev = last.get(e.namespace, 0)
            seq += 1
            last[e.namespace] = prev + 1
            out.append(StoredEvent(
                seq=seq, namespace=e.namespace, id=prev + 1, prev_id=prev or None, timestamp=e.timestamp,
                source=e.source, data=e.data, headers=e.headers,
            ))
        self._events.extend(out)
        self._last_ids = last
        self._apply_stats(agg)
        return out

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
        return _limited(tail, limit)

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

    # -- notifications ----------------------------------------------------------------

    async def open_notifications(
        self,
        subscription_id: int,
        events: Sequence[StoredEvent],
        cursor: int,
        stats: Iterable[Stat] = (),
    ) -> list[int]:
        self._check()
        stats = list(stats)  # taken before the existence check, as SQLite does
        sub = self._subs.get(subscription_id)
        if sub is None:
            return []
        agg = _aggregate(stats)
        now = time.time_ns()
        notes = [
            PendingNotification(id=self._last_note_id + i, subscription_id=subscription_id,
                                seq=e.seq, namespace=e.namespace, created_at=now)
            for i, e in enumerate(events, 1)
        ]
        for n in notes:
            self._notes[n.id] = n
        self._last_note_id += len(notes)
        sub.cursor = cursor
        self._apply_stats(agg)
        return [n.id for n in notes]

    async def mark_sent(self, ids: Sequence[int], stats: Mapping[int, Sequence[Stat]] | None = None) -> list[int]:
        self._check()
        per_id = stats or {}
        marked = [i for i in dict.fromkeys(ids) if i in self._notes and i not in self._sent]
        self._sent.update(marked)
        self._apply_stats(_aggregate(s for i in marked for s in per_id.get(i, ())))
        return marked

    async def settle_notifications(
        self,
        ids: Sequence[int],
        stats: Mapping[int, Sequence[Stat]] | None = None,
        sent_stats: Mapping[int, Sequence[Stat]] | None = None,
    ) -> list[int]:
        self._check()
        per_id = stats or {}
        per_sent = sent_stats or {}
        unsent = [i for i in dict.fromkeys(ids) if i in self._notes and i not in self._sent]
        now = time.time_ns()
        records = [
            self._delivery(n, "confirmed", now, n.attempts + 1)
            for i in dict.fromkeys(ids) if (n := self._notes.get(i)) is not None
        ]
        done = []
        for i in ids:
            if self._notes.pop(i, None) is not None:
                done.append(i)
        self._apply_stats(_aggregate(s for i in done for s in per_id.get(i, ())))
        self._apply_stats(_aggregate(s for i in unsent for s in per_sent.get(i, ())))
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

    async def count_attempt(self, ids: Sequence[int], stats: Iterable[Stat] = ()) -> None:
        self._check()
        self._apply_stats(_aggregate(stats))
        for i in ids:
            n = self._notes.get(i)
            if n is not None:
                self._notes[i] = dataclasses.replace(n, attempts=n.attempts + 1)

    # -- dead letters -----------------------------------------------------------------

    async def dead_letter(self, letters: Sequence[DeadLetter], stats: Iterable[Stat] = ()) -> list[int]:
        self._check()
        agg = _aggregate(stats)
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
        agg = _aggregate(stats)
        now = time.time_ns()
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

    # -- delivery records -------------------------------------------------------------

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
        return _limited(self._deliveries[max(after, 0):], limit)

    # -- statistics -------------------------------------------------------------------

    async def add_stats(self, stats: Iterable[Stat]) -> None:
        self._check()
        self._apply_stats(_aggregate(stats))

    async def stat_keys(self, scope: str) -> list[str]:
        self._check()
        return sorted({k for (s, k, _n) in self._stats if s == scope})

    async def stats(self, scope: str, key: str) -> dict[str, int]:
        self._check()
        return {n: v for (s, k, n), v in self._stats.items() if s == scope and k == key}
