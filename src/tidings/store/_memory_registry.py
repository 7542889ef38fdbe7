"""Publications, publishers, subscriptions and signing secrets in the in-memory store."""

from __future__ import annotations

import copy
import dataclasses

from ..errors import LimitReached
from ._base import RegistryStore
from ._cluster import Fence
from ._memory_state import MemoryState, Sub, dec, enc, limited
from ._records import PublicationRecord, SubscriptionRecord, SubscriptionSecret

__all__ = ["MemoryRegistryStore"]


class MemoryRegistryStore(MemoryState, RegistryStore):
    async def create_publication(
        self, record: PublicationRecord, publisher: str | None = None, *, limit: int | None = None
    ) -> bool:
        self._check()
        if record.namespace in self._publications:
            return False
        # No await between the count and the insert: atomic within the event loop.
        if limit is not None and sum(1 for p in self._publications.values() if p[0] == record.owner) >= limit:
            raise LimitReached(f"{record.owner} owns {limit} publications already", limit=limit)
        self._publications[record.namespace] = (record.owner, enc(record.config), record.created_at)
        if publisher is not None:
            self._publishers.add((record.namespace, publisher))
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

    async def update_publication(self, record: PublicationRecord, expected: PublicationRecord | None = None) -> bool:
        self._check()
        old = self._publications.get(record.namespace)
        if old is None or (expected is not None and old[:2] != (expected.owner, enc(expected.config))):
            return False
        self._publications[record.namespace] = (record.owner, enc(record.config), old[2])
        return True

    async def list_publications(
        self, after: str | None = None, limit: int | None = None
    ) -> list[PublicationRecord]:
        self._check()
        names = sorted(n for n in self._publications if n > (after or ""))
        out = []
        for n in limited(names, limit):
            owner, config, created = self._publications[n]
            out.append(PublicationRecord(namespace=n, owner=owner, config=dec(config), created_at=created))
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


    async def create_subscription(self, record: SubscriptionRecord, *, limit: int | None = None) -> SubscriptionRecord:
        self._check()
        if limit is not None and sum(1 for s in self._subs.values() if s.subscriber == record.subscriber) >= limit:
            raise LimitReached(f"{record.subscriber} holds {limit} subscriptions already", limit=limit)
        sub = Sub(record, self._last_sub_id + 1, len(self._events))
        self._last_sub_id = sub.id
        self._subs[sub.id] = sub
        # SQLite hands back the caller's config as given, not its JSON round trip.
        return dataclasses.replace(record, id=sub.id, cursor=sub.cursor, config=copy.deepcopy(record.config))

    async def update_subscription(self, record: SubscriptionRecord, expected: SubscriptionRecord | None = None) -> bool:
        self._check()
        sub = self._subs.get(record.id)
        if sub is None or (
            expected is not None
            and (sub.endpoint, sub.mode, sub.config) != (expected.endpoint, expected.mode, enc(expected.config))
        ):
            return False
        sub.endpoint, sub.mode, sub.config = record.endpoint, record.mode, enc(record.config)
        return True

    async def move_cursor(self, subscription_id: int, cursor: int, *, fence: Fence | None = None) -> None:
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
        return [s.record() for s in limited(subs, limit)]


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
