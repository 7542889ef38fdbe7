"""Notifications, dead letters and delivery records in the PostgreSQL store.

The delivery record (``tidings.store._deliveries``) is appended by the statements below
in the same transaction as the change it records, before the row it copies is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import asyncpg

from ._base import DeliveryStore
from ._deliveries import DeliveryRecord
from ._pg_db import DL_COLS, DL_FIELDS, PgAccess, apply_stats, stat_rows
from ._records import DeadLetter, PendingNotification, Stat, StoredEvent

__all__ = ["DELIVERY_INSERT", "PgDeliveryStore", "insert_confirmed", "insert_notifications", "take_ids"]

_COLUMNS: Final = (
    "serial, notification_id, subscription_id, subscriber, namespace, seq, event_id, source, event_timestamp, "
    "created_at, settled_at, attempts, outcome, replay"
)
_INSERT: Final = f"INSERT INTO deliveries({_COLUMNS.removeprefix('serial, ')})"
DELIVERY_INSERT: Final = _INSERT
_EVENT: Final = "LEFT JOIN events e ON e.seq = {t}.seq LEFT JOIN replay_notes r ON r.id = {t}.id"
_SETTLED: Final = (
    f"{_INSERT} SELECT n.id, n.subscription_id, COALESCE(s.subscriber, ''), n.namespace, n.seq, "
    "COALESCE(e.id, r.event_id, 0), COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), "
    "n.created_at, $2, n.attempts + 1, 'confirmed', r.id IS NOT NULL "
    "FROM notifications n LEFT JOIN subscriptions s ON s.id = n.subscription_id "
    f"{_EVENT.format(t='n')} WHERE n.id = ANY($1::bigint[]) ORDER BY array_position($1::bigint[], n.id)"
)
_DEAD: Final = (
    f"{_INSERT} SELECT n.id, n.subscription_id, x.subscriber, n.namespace, n.seq, x.event_id, "
    "COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), n.created_at, x.dead_at, x.attempts, "
    "'dead', r.id IS NOT NULL "
    "FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::integer[]) WITH ORDINALITY "
    "AS x(id, subscriber, event_id, dead_at, attempts, ord) "
    f"JOIN notifications n ON n.id = x.id {_EVENT.format(t='n')} ORDER BY x.ord"
)
_DROPPED: Final = (
    f"{_INSERT} SELECT d.id, d.subscription_id, d.subscriber, d.namespace, d.seq, d.event_id, "
    "COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), NULL, $2, d.attempts, 'dropped', "
    f"r.id IS NOT NULL FROM dead_letters d {_EVENT.format(t='d')} WHERE d.id = ANY($1::bigint[]) "
    "ORDER BY array_position($1::bigint[], d.id)"
)
_PENDING: Final = "SELECT id, subscription_id, seq, namespace, attempts, created_at FROM notifications"


def _pending(r: asyncpg.Record) -> PendingNotification:
    return PendingNotification(
        id=r[0], subscription_id=r[1], seq=r[2], namespace=r[3], attempts=r[4], created_at=r[5]
    )


async def insert_notifications(
    c: asyncpg.Connection, subscription_id: int, events: Sequence[StoredEvent], now: int,
    ids: Sequence[int] | None = None,
) -> list[int]:
    """Insert pending notifications for ``events`` under ``ids``, or new ones increasing in
    event order; their ids."""
    if ids is None:
        ids = sorted(r[0] for r in await c.fetch(
            "SELECT nextval('notifications_id_seq') FROM generate_series(1, $1)", len(events)
        ))
    else:
        ids = list(ids)
    await c.execute(
        "INSERT INTO notifications(id, subscription_id, seq, namespace, created_at, sent) "
        "SELECT i, $2, s, ns, $5, false FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS x(i, s, ns)",
        ids, subscription_id, [e.seq for e in events], [e.namespace for e in events], now,
    )
    return ids


async def take_ids(c: asyncpg.Connection, n: int) -> int:
    """Set aside ``n`` notification ids (in the caller's transaction); the first.

    ALTER SEQUENCE holds a lock that makes every other ``nextval`` wait for this commit,
    so no number of the block is handed out meanwhile."""
    await c.execute("ALTER SEQUENCE notifications_id_seq INCREMENT BY 1")
    base = int(await c.fetchval("SELECT nextval('notifications_id_seq')"))
    if n > 1:
        await c.execute("SELECT setval('notifications_id_seq', $1)", base + n - 1)
    return base


async def insert_confirmed(
    c: asyncpg.Connection, subscription_id: int, subscriber: str, confirmed: Sequence[tuple[int, StoredEvent]],
    created_at: int, now: int, *, replay: bool,
) -> None:
    """The delivery records of notifications confirmed at their first push and never pending."""
    await c.execute(
        f"{_INSERT} SELECT i, $2, $3, ns, s, eid, src, ts, $8, $9, 1, 'confirmed', $11 "
        "FROM unnest($1::bigint[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], $10::bigint[]) "
        "AS x(i, ns, s, eid, src, ts)",
        [i for i, _ in confirmed], subscription_id, subscriber, [e.namespace for _, e in confirmed],
        [e.seq for _, e in confirmed], [e.id for _, e in confirmed], [e.source for _, e in confirmed],
        created_at, now, [e.timestamp for _, e in confirmed], replay,
    )


class PgDeliveryStore(PgAccess, DeliveryStore):
    async def open_notifications(
        self,
        subscription_id: int,
        events: Sequence[StoredEvent],
        cursor: int,
        stats: Iterable[Stat] = (),
        ids: Sequence[int] | None = None,
    ) -> list[int]:
        rows = stat_rows(stats)

        async def job(c: asyncpg.Connection) -> list[int]:
            moved = await c.fetchval(
                "UPDATE subscriptions SET cursor = $1 WHERE id = $2 RETURNING true", cursor, subscription_id
            )
            if not moved:
                return []
            opened = await insert_notifications(c, subscription_id, events, time.time_ns(), ids) if events else []
            await apply_stats(c, rows)
            return opened

        return await self._tx(job)

    async def take_notification_ids(self, n: int) -> int:
        return await self._tx(lambda c: take_ids(c, n))

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
    ) -> None:
        rows = stat_rows(stats)

        async def job(c: asyncpg.Connection) -> None:
            await insert_confirmed(c, subscription_id, subscriber, confirmed, created_at, now, replay=False)
            await c.execute(
                "UPDATE subscriptions SET cursor = GREATEST(cursor, $1) WHERE id = $2", cursor, subscription_id
            )
            await apply_stats(c, rows)

        await self._tx(job)

    async def settle_notifications(
        self,
        ids: Sequence[int],
        stats: Mapping[int, Sequence[Stat]] | None = None,
        sent_stats: Mapping[int, Sequence[Stat]] | None = None,
    ) -> list[int]:
        per_id, per_sent = stats or {}, sent_stats or {}
        todo = list(dict.fromkeys(ids))

        async def job(c: asyncpg.Connection) -> list[int]:
            await c.execute(_SETTLED, todo, time.time_ns())
            gone = {r[0]: r[1] for r in await c.fetch(
                "DELETE FROM notifications WHERE id = ANY($1::bigint[]) RETURNING id, sent", todo
            )}
            done = [i for i in todo if i in gone]
            rows = stat_rows([
                *(s for i in done for s in per_id.get(i, ())),
                *(s for i in done if not gone[i] for s in per_sent.get(i, ())),
            ])
            await apply_stats(c, rows)
            return done

        return await self._tx(job)

    async def mark_sent(self, ids: Sequence[int], stats: Mapping[int, Sequence[Stat]] | None = None) -> list[int]:
        per_id = stats or {}
        todo = list(dict.fromkeys(ids))

        async def job(c: asyncpg.Connection) -> list[int]:
            marked = {r[0] for r in await c.fetch(
                "UPDATE notifications SET sent = true WHERE sent = false AND id = ANY($1::bigint[]) RETURNING id",
                todo,
            )}
            await apply_stats(c, stat_rows(s for i in marked for s in per_id.get(i, ())))
            return [i for i in todo if i in marked]

        return await self._tx(job)

    async def get_notifications(self, ids: Sequence[int]) -> list[PendingNotification]:
        rows = await self._fetch(f"{_PENDING} WHERE id = ANY($1::bigint[]) ORDER BY id", list(set(ids)))
        return [_pending(r) for r in rows]

    async def former_subscribers(self, ids: Sequence[int]) -> dict[int, str]:
        todo = list(set(ids))

        async def q(c: asyncpg.Connection) -> dict[int, str]:
            out: dict[int, str] = {}
            for r in await c.fetch(
                "SELECT notification_id, subscriber FROM deliveries WHERE notification_id = ANY($1::bigint[]) "
                "ORDER BY serial", todo
            ):
                out[r[0]] = r[1]
            for r in await c.fetch("SELECT id, subscriber FROM dead_letters WHERE id = ANY($1::bigint[])", todo):
                out[r[0]] = r[1]
            return out

        return await self._read(q)

    async def pending(self, subscription_id: int) -> list[PendingNotification]:
        rows = await self._fetch(f"{_PENDING} WHERE subscription_id = $1 ORDER BY id", subscription_id)
        return [_pending(r) for r in rows]

    async def pending_counts(self) -> dict[int, int]:
        rows = await self._fetch("SELECT subscription_id, COUNT(*) FROM notifications GROUP BY subscription_id")
        return {r[0]: r[1] for r in rows}

    async def last_notification_id(self) -> int:
        return int(await self._fetchval(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM notifications_id_seq"
        ))

    async def count_attempt(self, ids: Sequence[int], stats: Iterable[Stat] = ()) -> None:
        rows = stat_rows(stats)
        counts: dict[int, int] = {}
        for i in ids:
            counts[i] = counts.get(i, 0) + 1

        async def job(c: asyncpg.Connection) -> None:
            if counts:
                await c.execute(
                    "UPDATE notifications n SET attempts = n.attempts + x.k "
                    "FROM unnest($1::bigint[], $2::integer[]) AS x(id, k) WHERE n.id = x.id",
                    list(counts), list(counts.values()),
                )
            await apply_stats(c, rows)

        await self._tx(job)

    async def dead_letter(self, letters: Sequence[DeadLetter], stats: Iterable[Stat] = ()) -> list[int]:
        rows = stat_rows(stats)
        first: dict[int, DeadLetter] = {}
        for d in letters:
            first.setdefault(d.id, d)
        todo = list(first.values())

        async def job(c: asyncpg.Connection) -> list[int]:
            await c.execute(
                _DEAD, [d.id for d in todo], [d.subscriber for d in todo], [d.event_id for d in todo],
                [d.dead_at for d in todo], [d.attempts for d in todo],
            )
            gone = {r[0] for r in await c.fetch(
                "DELETE FROM notifications WHERE id = ANY($1::bigint[]) RETURNING id", [d.id for d in todo]
            )}
            moved = [d for d in todo if d.id in gone]
            if moved:
                await c.executemany(
                    f"INSERT INTO dead_letters({DL_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    [(d.id, d.subscription_id, d.subscriber, d.seq, d.namespace, d.event_id, d.attempts, d.reason,
                      d.dead_at) for d in moved],
                )
            await apply_stats(c, rows)
            return [d.id for d in moved]

        return await self._tx(job)

    async def list_dead_letters(
        self,
        subscription_ids: Sequence[int] | None = None,
        after: int | None = None,
        limit: int | None = None,
        *,
        ended_of: str | None = None,
    ) -> list[DeadLetter]:
        lim = 2**62 if limit is None or limit < 0 else limit
        if subscription_ids is None:
            rows = await self._fetch(
                f"SELECT {DL_COLS} FROM dead_letters WHERE id > $1 ORDER BY id LIMIT $2", after or 0, lim
            )
        else:
            ended = (
                " OR (subscriber = $4 AND NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = subscription_id))"
                if ended_of is not None else ""
            )
            rows = await self._fetch(
                f"SELECT {DL_COLS} FROM dead_letters WHERE (subscription_id = ANY($1::bigint[]){ended}) "
                "AND id > $2 ORDER BY id LIMIT $3",
                list(subscription_ids), after or 0, lim, *([ended_of] if ended_of is not None else []),
            )
        return [DeadLetter(**dict(zip(DL_FIELDS, r, strict=True))) for r in rows]

    async def redrive_dead_letters(self, ids: Sequence[int], now: int) -> list[PendingNotification]:
        todo = list(dict.fromkeys(ids))

        async def job(c: asyncpg.Connection) -> list[PendingNotification]:
            gone = {r[0]: r for r in await c.fetch(
                "DELETE FROM dead_letters WHERE id = ANY($1::bigint[]) RETURNING id, subscription_id, seq, namespace",
                todo,
            )}
            out = [
                PendingNotification(id=i, subscription_id=gone[i][1], seq=gone[i][2], namespace=gone[i][3],
                                    created_at=now)
                for i in todo if i in gone
            ]
            if out:
                await c.executemany(
                    "INSERT INTO notifications(id, subscription_id, seq, namespace, attempts, created_at, sent) "
                    "VALUES ($1, $2, $3, $4, 0, $5, false)",
                    [(n.id, n.subscription_id, n.seq, n.namespace, now) for n in out],
                )
            return out

        return await self._tx(job)

    async def drop_dead_letters(self, ids: Sequence[int], stats: Iterable[Stat] = ()) -> list[int]:
        rows = stat_rows(stats)
        todo = list(dict.fromkeys(ids))

        async def job(c: asyncpg.Connection) -> list[int]:
            await c.execute(_DROPPED, todo, time.time_ns())
            gone = {r[0] for r in await c.fetch(
                "DELETE FROM dead_letters WHERE id = ANY($1::bigint[]) RETURNING id", todo
            )}
            await apply_stats(c, rows)
            return [i for i in todo if i in gone]

        return await self._tx(job)

    async def deliveries(self, after: int = 0, limit: int | None = None) -> list[DeliveryRecord]:
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM deliveries WHERE serial > $1 ORDER BY serial LIMIT $2",
            after, 2**62 if limit is None or limit < 0 else limit,
        )
        return [
            DeliveryRecord(
                serial=r[0], notification_id=r[1], subscription_id=r[2], subscriber=r[3], namespace=r[4], seq=r[5],
                event_id=r[6], source=r[7], event_timestamp=r[8], created_at=r[9], settled_at=r[10],
                attempts=r[11], outcome=r[12], replay=r[13],
            )
            for r in rows
        ]
