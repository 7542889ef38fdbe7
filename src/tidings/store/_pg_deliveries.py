"""Notifications, dead letters and delivery records in the PostgreSQL store.

The delivery record (``tidings.store._deliveries``) is appended in the same statement as
the change it records, before the row it copies is deleted. The writes a subscription's
worker makes are calls of the functions in ``_pg_functions``, each taking the worker's
lease (``Fence``) so that a broadcaster that lost the lease writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import asyncpg

from ._base import DeliveryStore
from ._cluster import Fence
from ._deliveries import DeliveryRecord
from ._pg_db import DL_COLS, DL_FIELDS, PgAccess, apply_stats, fence_args, stat_arrays, stat_rows
from ._records import DeadLetter, PendingNotification, Stat, StoredEvent

__all__ = ["PgDeliveryStore", "confirmed_arrays"]

_COLUMNS: Final = (
    "serial, notification_id, subscription_id, subscriber, namespace, seq, event_id, source, event_timestamp, "
    "created_at, settled_at, attempts, outcome, replay"
)
_INSERT: Final = f"INSERT INTO deliveries({_COLUMNS.removeprefix('serial, ')})"
_DROPPED: Final = (
    f"{_INSERT} SELECT d.id, d.subscription_id, d.subscriber, d.namespace, d.seq, d.event_id, "
    "COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), NULL, $2, d.attempts, 'dropped', "
    "r.id IS NOT NULL FROM dead_letters d LEFT JOIN events e ON e.seq = d.seq LEFT JOIN replay_notes r ON r.id = d.id "
    "WHERE d.id = ANY($1::bigint[]) ORDER BY array_position($1::bigint[], d.id)"
)
_PENDING: Final = "SELECT id, subscription_id, seq, namespace, attempts, created_at FROM notifications"


def _pending(r: asyncpg.Record) -> PendingNotification:
    return PendingNotification(
        id=r[0], subscription_id=r[1], seq=r[2], namespace=r[3], attempts=r[4], created_at=r[5]
    )


def _per_id(
    ids: Sequence[int], *parts: tuple[Mapping[int, Sequence[Stat]], bool]
) -> tuple[list[int], list[bool], list[str], list[str], list[str], list[int]]:
    """Per-notification counter increments, each part ``(stats by id, only if never
    sent)``, as the arrays ``tidings_add_stats_of`` takes."""
    out: tuple[list[int], list[bool], list[str], list[str], list[str], list[int]] = ([], [], [], [], [], [])
    for stats, unsent in parts:
        for i in ids:
            for st in stats.get(i, ()):
                if not isinstance(st.delta, int):
                    raise TypeError(f"a counter's delta must be an integer, not {st.delta!r}")
                out[0].append(i)
                out[1].append(unsent)
                out[2].append(st.scope)
                out[3].append(st.key)
                out[4].append(st.name)
                out[5].append(st.delta)
    return out


def confirmed_arrays(
    confirmed: Sequence[tuple[int, StoredEvent]],
) -> tuple[list[int], list[str], list[int], list[int], list[str], list[int]]:
    """Notifications confirmed at their first push as the arrays the functions take: ids,
    namespaces, seqs, event ids, sources, event timestamps."""
    return (
        [i for i, _ in confirmed], [e.namespace for _, e in confirmed], [e.seq for _, e in confirmed],
        [e.id for _, e in confirmed], [e.source for _, e in confirmed], [e.timestamp for _, e in confirmed],
    )


class PgDeliveryStore(PgAccess, DeliveryStore):
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
        rows = stat_rows(stats)
        opened = await self._call(
            "fetchval",
            "SELECT tidings_open_notifications($1, $2, $3, $4, $5, $6::bigint[], $7::bigint[], $8::text[], $9, "
            "$10::text[], $11::text[], $12::text[], $13::bigint[])",
            *fence_args(fence), subscription_id, cursor, None if ids is None else list(ids),
            [e.seq for e in events], [e.namespace for e in events], self.clock.now_ns(), *stat_arrays(rows),
        )
        return [] if opened is None else list(opened)

    async def take_notification_ids(self, n: int) -> int:
        return int(await self._call("fetchval", "SELECT tidings_take_ids($1)", n))

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
        rows = stat_rows(stats)
        await self._call(
            "execute",
            "SELECT tidings_record_confirmed($1, $2, $3, $4, $5, $6::bigint[], $7::text[], $8::bigint[], "
            "$9::bigint[], $10::text[], $11::bigint[], $12, $13, $14, $15::text[], $16::text[], $17::text[], "
            "$18::bigint[])",
            *fence_args(fence), subscription_id, subscriber, *confirmed_arrays(confirmed), created_at, now, cursor,
            *stat_arrays(rows),
        )

    async def settle_notifications(
        self,
        ids: Sequence[int],
        stats: Mapping[int, Sequence[Stat]] | None = None,
        sent_stats: Mapping[int, Sequence[Stat]] | None = None,
        *,
        fence: Fence | None = None,
    ) -> list[int]:
        todo = list(dict.fromkeys(ids))
        done = await self._call(
            "fetchval",
            "SELECT tidings_settle($1, $2, $3, $4::bigint[], $5, $6::bigint[], $7::boolean[], $8::text[], "
            "$9::text[], $10::text[], $11::bigint[])",
            *fence_args(fence), todo, self.clock.now_ns(),
            *_per_id(todo, (stats or {}, False), (sent_stats or {}, True)),
        )
        gone = set(done or ())
        return [i for i in todo if i in gone]

    async def mark_sent(
        self, ids: Sequence[int], stats: Mapping[int, Sequence[Stat]] | None = None, *, fence: Fence | None = None
    ) -> list[int]:
        todo = list(dict.fromkeys(ids))
        per = _per_id(todo, (stats or {}, False))
        marked = await self._call(
            "fetchval",
            "SELECT tidings_mark_sent($1, $2, $3, $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[], "
            "$9::bigint[])",
            *fence_args(fence), todo, per[0], *per[2:],
        )
        got = set(marked or ())
        return [i for i in todo if i in got]

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

    async def count_attempt(
        self, ids: Sequence[int], stats: Iterable[Stat] = (), *, fence: Fence | None = None
    ) -> None:
        rows = stat_rows(stats)
        counts: dict[int, int] = {}
        for i in ids:
            counts[i] = counts.get(i, 0) + 1
        await self._call(
            "execute",
            "SELECT tidings_count_attempt($1, $2, $3, $4::bigint[], $5::integer[], $6::text[], $7::text[], "
            "$8::text[], $9::bigint[])",
            *fence_args(fence), list(counts), list(counts.values()), *stat_arrays(rows),
        )

    async def dead_letter(
        self, letters: Sequence[DeadLetter], stats: Iterable[Stat] = (), *, fence: Fence | None = None
    ) -> list[int]:
        rows = stat_rows(stats)
        first: dict[int, DeadLetter] = {}
        for d in letters:
            first.setdefault(d.id, d)
        todo = list(first.values())
        moved = await self._call(
            "fetchval",
            "SELECT tidings_dead_letter($1, $2, $3, $4::bigint[], $5::bigint[], $6::text[], $7::bigint[], "
            "$8::text[], $9::bigint[], $10::integer[], $11::text[], $12::bigint[], $13::text[], $14::text[], "
            "$15::text[], $16::bigint[])",
            *fence_args(fence), [d.id for d in todo], [d.subscription_id for d in todo],
            [d.subscriber for d in todo], [d.seq for d in todo], [d.namespace for d in todo],
            [d.event_id for d in todo], [d.attempts for d in todo], [d.reason for d in todo],
            [d.dead_at for d in todo], *stat_arrays(rows),
        )
        gone = set(moved or ())
        return [d.id for d in todo if d.id in gone]

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
            await c.execute(_DROPPED, todo, self.clock.now_ns())
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
