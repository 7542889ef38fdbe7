"""Publications, publishers, subscriptions and signing secrets in the SQLite store."""

from __future__ import annotations

import sqlite3

from ..errors import LimitReached
from ._base import RegistryStore
from ._cluster import Fence
from ._records import PublicationRecord, SubscriptionRecord, SubscriptionSecret
from ._sqlite_db import SUB_COLS, SQLiteAccess, dec, enc, sub_row
from ._sqlite_writer import Writer

__all__ = ["SQLiteRegistryStore"]


class SQLiteRegistryStore(SQLiteAccess, RegistryStore):
    async def create_publication(
        self, record: PublicationRecord, publisher: str | None = None, *, limit: int | None = None
    ) -> bool:
        # One writer job: the count and the insert run on the single writing connection,
        # with no other write between them.
        def job(c: sqlite3.Connection, w: Writer) -> bool:
            if limit is not None:
                if c.execute("SELECT 1 FROM publications WHERE namespace = ?", (record.namespace,)).fetchone():
                    return False
                held = c.execute("SELECT COUNT(*) FROM publications WHERE owner = ?", (record.owner,)).fetchone()[0]
                if held >= limit:
                    raise LimitReached(f"{record.owner} owns {limit} publications already", limit=limit)
            cur = c.execute(
                "INSERT INTO publications(namespace, owner, config, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(namespace) DO NOTHING",
                (record.namespace, record.owner, enc(record.config), record.created_at),
            )
            made = cur.rowcount == 1
            if made and publisher is not None:
                c.execute(
                    "INSERT INTO publishers(namespace, principal) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (record.namespace, publisher),
                )
            return made

        return await self._write(job)

    async def update_publication(self, record: PublicationRecord, expected: PublicationRecord | None = None) -> bool:
        def job(c: sqlite3.Connection, w: Writer) -> bool:
            if expected is None:
                cur = c.execute(
                    "UPDATE publications SET owner = ?, config = ? WHERE namespace = ?",
                    (record.owner, enc(record.config), record.namespace),
                )
            else:
                cur = c.execute(
                    "UPDATE publications SET owner = ?, config = ? WHERE namespace = ? AND owner = ? AND config = ?",
                    (record.owner, enc(record.config), record.namespace, expected.owner, enc(expected.config)),
                )
            return cur.rowcount == 1

        return await self._write(job)

    async def list_publications(
        self, after: str | None = None, limit: int | None = None
    ) -> list[PublicationRecord]:
        def q(c: sqlite3.Connection) -> list[PublicationRecord]:
            rows = c.execute(
                "SELECT namespace, owner, config, created_at FROM publications "
                "WHERE namespace > ? ORDER BY namespace LIMIT ?",
                (after or "", -1 if limit is None else limit),
            ).fetchall()
            return [
                PublicationRecord(namespace=r[0], owner=r[1], config=dec(r[2]), created_at=r[3])
                for r in rows
            ]

        return await self._read(q)

    async def delete_publication(self, namespace: str) -> list[int]:
        def job(c: sqlite3.Connection, w: Writer) -> list[int]:
            ids = [r[0] for r in c.execute("SELECT id FROM subscriptions WHERE namespace = ?", (namespace,))]
            c.executemany("DELETE FROM notifications WHERE subscription_id = ?", [(i,) for i in ids])
            c.executemany("DELETE FROM dead_letters WHERE subscription_id = ?", [(i,) for i in ids])
            c.executemany("DELETE FROM secrets WHERE subscription_id = ?", [(i,) for i in ids])
            c.execute("DELETE FROM subscriptions WHERE namespace = ?", (namespace,))
            c.execute("DELETE FROM publishers WHERE namespace = ?", (namespace,))
            # Keep the chain's end: the events stay, and so must the id they continue from.
            last = c.execute(
                "SELECT MAX(COALESCE((SELECT MAX(id) FROM events WHERE namespace = ?), 0), "
                "COALESCE((SELECT last_event_id FROM publications WHERE namespace = ?), 0))",
                (namespace, namespace),
            ).fetchone()[0]
            c.execute("DELETE FROM publications WHERE namespace = ?", (namespace,))
            c.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (f"last_event_id:{namespace}", last),
            )
            return ids

        return await self._write(job)

    async def add_publisher(self, namespace: str, principal: str) -> bool:
        def job(c: sqlite3.Connection, w: Writer) -> bool:
            cur = c.execute(
                "INSERT INTO publishers(namespace, principal) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (namespace, principal),
            )
            return cur.rowcount == 1

        return await self._write(job)

    async def list_publishers(self, namespace: str | None = None) -> list[tuple[str, str]]:
        def q(c: sqlite3.Connection) -> list[tuple[str, str]]:
            if namespace is None:
                return c.execute("SELECT namespace, principal FROM publishers ORDER BY 1, 2").fetchall()
            return c.execute(
                "SELECT namespace, principal FROM publishers WHERE namespace = ? ORDER BY 2", (namespace,)
            ).fetchall()

        return await self._read(q)


    async def create_subscription(self, record: SubscriptionRecord, *, limit: int | None = None) -> SubscriptionRecord:
        def job(c: sqlite3.Connection, w: Writer) -> SubscriptionRecord:
            if limit is not None:  # in the same writer job as the insert, as for publications
                held = c.execute(
                    "SELECT COUNT(*) FROM subscriptions WHERE subscriber = ?", (record.subscriber,)
                ).fetchone()[0]
                if held >= limit:
                    raise LimitReached(f"{record.subscriber} holds {limit} subscriptions already", limit=limit)
            head = c.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
            cur = c.execute(
                "INSERT INTO subscriptions(subscriber, namespace, endpoint, mode, config, cursor, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record.subscriber, record.namespace, record.endpoint, record.mode,
                 enc(record.config), head, record.created_at),
            )
            return SubscriptionRecord(
                id=int(cur.lastrowid or 0), subscriber=record.subscriber, namespace=record.namespace,
                endpoint=record.endpoint, mode=record.mode, config=record.config, cursor=head,
                created_at=record.created_at,
            )

        return await self._write(job)

    async def update_subscription(self, record: SubscriptionRecord, expected: SubscriptionRecord | None = None) -> bool:
        def job(c: sqlite3.Connection, w: Writer) -> bool:
            new = (record.endpoint, record.mode, enc(record.config), record.id)
            if expected is None:
                cur = c.execute("UPDATE subscriptions SET endpoint = ?, mode = ?, config = ? WHERE id = ?", new)
            else:
                cur = c.execute(
                    "UPDATE subscriptions SET endpoint = ?, mode = ?, config = ? WHERE id = ? "
                    "AND endpoint IS ? AND mode = ? AND config = ?",
                    (*new, expected.endpoint, expected.mode, enc(expected.config)),
                )
            return cur.rowcount == 1

        return await self._write(job)

    async def move_cursor(self, subscription_id: int, cursor: int, *, fence: Fence | None = None) -> None:
        await self._write(
            lambda c, w: c.execute("UPDATE subscriptions SET cursor = ? WHERE id = ?", (cursor, subscription_id))
        )

    async def delete_subscription(self, subscription_id: int, *, keep_dead_letters: bool = False) -> None:
        def job(c: sqlite3.Connection, w: Writer) -> None:
            c.execute("DELETE FROM notifications WHERE subscription_id = ?", (subscription_id,))
            if not keep_dead_letters:
                c.execute("DELETE FROM dead_letters WHERE subscription_id = ?", (subscription_id,))
            c.execute("DELETE FROM secrets WHERE subscription_id = ?", (subscription_id,))
            c.execute("DELETE FROM subscriptions WHERE id = ?", (subscription_id,))

        await self._write(job)

    async def list_subscriptions(
        self, namespace: str | None = None, after: int | None = None, limit: int | None = None
    ) -> list[SubscriptionRecord]:
        def q(c: sqlite3.Connection) -> list[SubscriptionRecord]:
            lim = -1 if limit is None else limit
            if namespace is None:
                rows = c.execute(
                    f"SELECT {SUB_COLS} FROM subscriptions WHERE id > ? ORDER BY id LIMIT ?",
                    (after or 0, lim),
                ).fetchall()
            else:
                rows = c.execute(
                    f"SELECT {SUB_COLS} FROM subscriptions WHERE namespace = ? AND id > ? "
                    "ORDER BY id LIMIT ?",
                    (namespace, after or 0, lim),
                ).fetchall()
            return [sub_row(r) for r in rows]

        return await self._read(q)


    async def add_secret(
        self, subscription_id: int, secret: str, expires_previous_at: int | None, *, created_at: int
    ) -> bool:
        def job(c: sqlite3.Connection, w: Writer) -> bool:
            if c.execute("SELECT 1 FROM subscriptions WHERE id = ?", (subscription_id,)).fetchone() is None:
                return False
            c.execute(
                "DELETE FROM secrets WHERE subscription_id = ? AND expires_at <= ?", (subscription_id, created_at)
            )
            if expires_previous_at is not None:
                c.execute(
                    "UPDATE secrets SET expires_at = ? WHERE subscription_id = ? "
                    "AND (expires_at IS NULL OR expires_at > ?)",
                    (expires_previous_at, subscription_id, expires_previous_at),
                )
            c.execute(
                "INSERT INTO secrets(subscription_id, secret, created_at) VALUES (?, ?, ?)",
                (subscription_id, secret, created_at),
            )
            return True

        return await self._write(job)

    async def secrets(self, subscription_id: int, now: int) -> list[SubscriptionSecret]:
        def q(c: sqlite3.Connection) -> list[SubscriptionSecret]:
            return [
                SubscriptionSecret(secret=r[0], created_at=r[1], expires_at=r[2])
                for r in c.execute(
                    "SELECT secret, created_at, expires_at FROM secrets WHERE subscription_id = ? "
                    "AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC, id DESC",
                    (subscription_id, now),
                )
            ]

        return await self._read(q)
