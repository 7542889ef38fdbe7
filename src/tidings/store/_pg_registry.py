"""Publications, publishers, subscriptions and signing secrets in the PostgreSQL store."""

from __future__ import annotations

import asyncpg

from ..errors import LimitReached
from ._base import RegistryStore
from ._cluster import CHANGE_REGISTRY, Fence
from ._pg_db import SUB_COLS, PgAccess, dec, enc, fence_args, lock_quota, sub_row
from ._records import PublicationRecord, SubscriptionRecord, SubscriptionSecret

__all__ = ["PgRegistryStore"]

_NO_LIMIT = 2**62


class PgRegistryStore(PgAccess, RegistryStore):
    async def create_publication(
        self, record: PublicationRecord, publisher: str | None = None, *, limit: int | None = None
    ) -> bool:
        async def job(c: asyncpg.Connection) -> bool:
            if limit is not None:
                await lock_quota(c, "publications", record.owner)
                if await c.fetchval("SELECT 1 FROM publications WHERE namespace = $1", record.namespace):
                    return False
                held = await c.fetchval("SELECT count(*) FROM publications WHERE owner = $1", record.owner)
                if held >= limit:
                    raise LimitReached(f"{record.owner} owns {limit} publications already", limit=limit)
            made = await c.fetchval(
                "INSERT INTO publications(namespace, owner, config, created_at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (namespace) DO NOTHING RETURNING true",
                record.namespace, record.owner, enc(record.config), record.created_at,
            )
            if made and publisher is not None:
                await c.execute(
                    "INSERT INTO publishers(namespace, principal) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    record.namespace, publisher,
                )
            await self._signal(c, CHANGE_REGISTRY, f"pub:{record.namespace}")
            return bool(made)

        return await self._tx(job)

    async def update_publication(self, record: PublicationRecord, expected: PublicationRecord | None = None) -> bool:
        async def job(c: asyncpg.Connection) -> bool:
            if expected is None:
                done = await c.execute(
                    "UPDATE publications SET owner = $1, config = $2 WHERE namespace = $3",
                    record.owner, enc(record.config), record.namespace,
                )
            else:
                done = await c.execute(
                    "UPDATE publications SET owner = $1, config = $2 WHERE namespace = $3 "
                    "AND owner = $4 AND config = $5",
                    record.owner, enc(record.config), record.namespace, expected.owner, enc(expected.config),
                )
            if done != "UPDATE 1":
                return False
            await self._signal(c, CHANGE_REGISTRY, f"pub:{record.namespace}")
            return True

        return await self._tx(job)

    async def list_publications(self, after: str | None = None, limit: int | None = None) -> list[PublicationRecord]:
        rows = await self._fetch(
            "SELECT namespace, owner, config, created_at FROM publications WHERE namespace > $1 "
            "ORDER BY namespace LIMIT $2",
            after or "", _limit(limit),
        )
        return [PublicationRecord(namespace=r[0], owner=r[1], config=dec(r[2]), created_at=r[3]) for r in rows]

    async def delete_publication(self, namespace: str) -> list[int]:
        async def job(c: asyncpg.Connection) -> list[int]:
            ids = [r[0] for r in await c.fetch(
                "DELETE FROM subscriptions WHERE namespace = $1 RETURNING id", namespace
            )]
            ids.sort()
            if ids:
                await c.execute("DELETE FROM notifications WHERE subscription_id = ANY($1)", ids)
                await c.execute("DELETE FROM dead_letters WHERE subscription_id = ANY($1)", ids)
                await c.execute("DELETE FROM secrets WHERE subscription_id = ANY($1)", ids)
            await c.execute("DELETE FROM publishers WHERE namespace = $1", namespace)
            # The chain's end is kept in namespace_heads, which outlives the publication.
            await c.execute("DELETE FROM publications WHERE namespace = $1", namespace)
            await self._signal(c, CHANGE_REGISTRY, f"pub:{namespace}")
            return ids

        return await self._tx(job)

    async def add_publisher(self, namespace: str, principal: str) -> bool:
        async def job(c: asyncpg.Connection) -> bool:
            made = await c.fetchval(
                "INSERT INTO publishers(namespace, principal) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true",
                namespace, principal,
            )
            if made:
                await self._signal(c, CHANGE_REGISTRY, f"pub:{namespace}")
            return bool(made)

        return await self._tx(job)

    async def list_publishers(self, namespace: str | None = None) -> list[tuple[str, str]]:
        if namespace is None:
            rows = await self._fetch("SELECT namespace, principal FROM publishers ORDER BY 1, 2")
        else:
            rows = await self._fetch(
                "SELECT namespace, principal FROM publishers WHERE namespace = $1 ORDER BY 2", namespace
            )
        return [(r[0], r[1]) for r in rows]

    async def create_subscription(self, record: SubscriptionRecord, *, limit: int | None = None) -> SubscriptionRecord:
        async def job(c: asyncpg.Connection) -> SubscriptionRecord:
            if limit is not None:
                await lock_quota(c, "subscriptions", record.subscriber)
                held = await c.fetchval("SELECT count(*) FROM subscriptions WHERE subscriber = $1", record.subscriber)
                if held >= limit:
                    raise LimitReached(f"{record.subscriber} holds {limit} subscriptions already", limit=limit)
            row = await c.fetchrow(
                "INSERT INTO subscriptions(subscriber, namespace, endpoint, mode, config, cursor, created_at) "
                "SELECT $1, $2, $3, $4, $5, seq, $6 FROM log_head RETURNING id, cursor",
                record.subscriber, record.namespace, record.endpoint, record.mode, enc(record.config),
                record.created_at,
            )
            await self._signal(c, CHANGE_REGISTRY, f"sub:{row[0]}")
            return SubscriptionRecord(
                id=row[0], subscriber=record.subscriber, namespace=record.namespace, endpoint=record.endpoint,
                mode=record.mode, config=record.config, cursor=row[1], created_at=record.created_at,
            )

        return await self._tx(job)

    async def update_subscription(self, record: SubscriptionRecord, expected: SubscriptionRecord | None = None) -> bool:
        async def job(c: asyncpg.Connection) -> bool:
            new = (record.endpoint, record.mode, enc(record.config), record.id)
            if expected is None:
                done = await c.execute(
                    "UPDATE subscriptions SET endpoint = $1, mode = $2, config = $3 WHERE id = $4", *new
                )
            else:
                done = await c.execute(
                    "UPDATE subscriptions SET endpoint = $1, mode = $2, config = $3 WHERE id = $4 "
                    "AND endpoint IS NOT DISTINCT FROM $5 AND mode = $6 AND config = $7",
                    *new, expected.endpoint, expected.mode, enc(expected.config),
                )
            if done != "UPDATE 1":
                return False
            await self._signal(c, CHANGE_REGISTRY, f"sub:{record.id}")
            return True

        return await self._tx(job)

    async def move_cursor(self, subscription_id: int, cursor: int, *, fence: Fence | None = None) -> None:
        await self._call(
            "execute", "SELECT tidings_move_cursor($1, $2, $3, $4, $5)", *fence_args(fence), subscription_id, cursor
        )

    async def delete_subscription(self, subscription_id: int, *, keep_dead_letters: bool = False) -> None:
        async def job(c: asyncpg.Connection) -> None:
            await c.execute("DELETE FROM notifications WHERE subscription_id = $1", subscription_id)
            if not keep_dead_letters:
                await c.execute("DELETE FROM dead_letters WHERE subscription_id = $1", subscription_id)
            await c.execute("DELETE FROM secrets WHERE subscription_id = $1", subscription_id)
            await c.execute("DELETE FROM subscriptions WHERE id = $1", subscription_id)
            await self._signal(c, CHANGE_REGISTRY, f"sub:{subscription_id}")

        await self._tx(job)

    async def list_subscriptions(
        self, namespace: str | None = None, after: int | None = None, limit: int | None = None
    ) -> list[SubscriptionRecord]:
        if namespace is None:
            rows = await self._fetch(
                f"SELECT {SUB_COLS} FROM subscriptions WHERE id > $1 ORDER BY id LIMIT $2", after or 0, _limit(limit)
            )
        else:
            rows = await self._fetch(
                f"SELECT {SUB_COLS} FROM subscriptions WHERE namespace = $1 AND id > $2 ORDER BY id LIMIT $3",
                namespace, after or 0, _limit(limit),
            )
        return [sub_row(r) for r in rows]

    async def add_secret(
        self, subscription_id: int, secret: str, expires_previous_at: int | None, *, created_at: int
    ) -> bool:
        async def job(c: asyncpg.Connection) -> bool:
            if await c.fetchval("SELECT 1 FROM subscriptions WHERE id = $1 FOR UPDATE", subscription_id) is None:
                return False
            await c.execute(
                "DELETE FROM secrets WHERE subscription_id = $1 AND expires_at <= $2", subscription_id, created_at
            )
            if expires_previous_at is not None:
                await c.execute(
                    "UPDATE secrets SET expires_at = $1 WHERE subscription_id = $2 "
                    "AND (expires_at IS NULL OR expires_at > $1)",
                    expires_previous_at, subscription_id,
                )
            await c.execute(
                "INSERT INTO secrets(subscription_id, secret, created_at) VALUES ($1, $2, $3)",
                subscription_id, secret, created_at,
            )
            await self._signal(c, CHANGE_REGISTRY, f"secret:{subscription_id}")
            return True

        return await self._tx(job)

    async def secrets(self, subscription_id: int, now: int) -> list[SubscriptionSecret]:
        rows = await self._fetch(
            "SELECT secret, created_at, expires_at FROM secrets WHERE subscription_id = $1 "
            "AND (expires_at IS NULL OR expires_at > $2) ORDER BY created_at DESC, id DESC",
            subscription_id, now,
        )
        return [SubscriptionSecret(secret=r[0], created_at=r[1], expires_at=r[2]) for r in rows]


def _limit(limit: int | None) -> int:
    """SQLite reads a negative LIMIT as no limit; so does this store."""
    return _NO_LIMIT if limit is None or limit < 0 else limit
