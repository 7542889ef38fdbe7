"""Notifications, dead letters and delivery records in the SQLite store.

The delivery record (``tidings.store._deliveries``) is appended by the statements
below in the same transaction as the change it records."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ..core.record_batch import MAX_ITEMS, RECORD_COLUMNS, expand, pack, unpack
from ._base import DeliveryStore
from ._cluster import Fence
from ._deliveries import DeliveryRecord
from ._records import DeadLetter, PendingNotification, Stat, StoredEvent
from ._sqlite_db import (
    DL_COLS,
    DL_FIELDS,
    SQLiteAccess,
    apply_stats,
    delete_notifications,
    insert_notifications,
    stats_of,
    take_ids,
)
from ._sqlite_writer import Writer, lazy

__all__ = ["BATCH_INDEX", "DELIVERY_INSERT", "SQLiteDeliveryStore", "insert_confirmed"]

DELIVERIES_DDL: Final = """
CREATE TABLE IF NOT EXISTS deliveries (
    serial INTEGER PRIMARY KEY AUTOINCREMENT,
    notification_id INTEGER NOT NULL,
    subscription_id INTEGER NOT NULL,
    subscriber TEXT NOT NULL,
    namespace TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event_id INTEGER NOT NULL,
    source TEXT,
    event_timestamp INTEGER,
    created_at INTEGER,
    settled_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    replay INTEGER NOT NULL DEFAULT 0,
    n INTEGER,
    items BLOB
);
CREATE INDEX IF NOT EXISTS deliveries_settled ON deliveries(settled_at);
CREATE INDEX IF NOT EXISTS deliveries_notification ON deliveries(notification_id);
"""

# A row with ``items`` holds ``n`` records of one confirmed batch (tidings.core.record_batch):
# the partial index finds the row a notification id falls in, and costs one entry per batch.
BATCH_INDEX: Final = (
    "CREATE INDEX IF NOT EXISTS deliveries_batches ON deliveries(notification_id) WHERE items IS NOT NULL"
)
COLUMNS: Final = ", ".join(RECORD_COLUMNS)
_INSERT: Final = f"INSERT INTO deliveries({COLUMNS.removeprefix('serial, ')})"
_INSERT_PACKED: Final = (
    f"INSERT INTO deliveries({COLUMNS}, n, items) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 'confirmed', ?, ?, ?)"
)
DELIVERY_INSERT: Final = _INSERT

# Each statement copies a row that is about to be deleted, so it must run before the
# DELETE of the same transaction; an id that is no longer there selects nothing. A
# replayed notification's event may have left the hot log: its copy in replay_notes
# (tidings.store._sqlite_replays) fills in.
_EVENT: Final = (
    "LEFT JOIN events e ON e.seq = {t}.seq LEFT JOIN replay_notes r ON r.id = {t}.id"
)
_SETTLED: Final = (
    f"{_INSERT} SELECT n.id, n.subscription_id, COALESCE(s.subscriber, ''), n.namespace, n.seq, "
    "COALESCE(e.id, r.event_id, 0), COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), "
    "n.created_at, ?, n.attempts + 1, 'confirmed', r.id IS NOT NULL "
    "FROM notifications n LEFT JOIN subscriptions s ON s.id = n.subscription_id "
    f"{_EVENT.format(t='n')} WHERE n.id IN "
)
_DEAD: Final = (
    f"{_INSERT} SELECT n.id, n.subscription_id, ?, n.namespace, n.seq, ?, COALESCE(e.source, r.source), "
    "COALESCE(e.timestamp, r.timestamp), n.created_at, ?, ?, 'dead', r.id IS NOT NULL "
    f"FROM notifications n {_EVENT.format(t='n')} WHERE n.id = ?"
)
_DROPPED: Final = (
    f"{_INSERT} SELECT d.id, d.subscription_id, d.subscriber, d.namespace, d.seq, d.event_id, "
    "COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), NULL, ?, d.attempts, 'dropped', "
    f"r.id IS NOT NULL FROM dead_letters d {_EVENT.format(t='d')} WHERE d.id = ?"
)


def record_settled(conn: sqlite3.Connection, ids: Iterable[int], now: int) -> None:
    """Record the pending notifications among ``ids`` as confirmed (before deleting them).

    One statement per 500 ids: this is on the hot path of every confirmation, and one
    ``IN`` list costs less than as many executions of a one-row statement.
    """
    todo = list(dict.fromkeys(ids))
    for k in range(0, len(todo), 500):
        chunk = todo[k : k + 500]
        conn.execute(f"{_SETTLED}({','.join('?' * len(chunk))})", (now, *chunk))


def insert_confirmed(
    c: sqlite3.Connection, subscription_id: int, subscriber: str, confirmed: Sequence[tuple[int, StoredEvent]],
    created_at: int, now: int, *, replay: bool,
) -> None:
    """The delivery records of notifications confirmed at their first push and never
    pending (pushed before being recorded): what ``record_settled`` copies from the rows
    is given here.

    Written as one row per run of up to ``MAX_ITEMS`` records of one namespace, which
    takes as many consecutive serials, set aside as notification ids are (``take_ids``;
    ``tidings.core.record_batch``); a run of one is a plain row."""
    pairs, runs = list(confirmed), []
    ns = pairs[0][1].namespace if pairs else ""
    if all(e.namespace == ns for _, e in pairs):  # a replay's batch, a subscription's
        runs = [pairs[k : k + MAX_ITEMS] for k in range(0, len(pairs), MAX_ITEMS)]
    else:
        for pair in pairs:
            last = runs[-1] if runs else None
            if last is not None and len(last) < MAX_ITEMS and last[0][1].namespace == pair[1].namespace:
                last.append(pair)
            else:
                runs.append([pair])
    for run in runs:
        i0, e0 = run[0]
        if len(run) == 1:
            c.execute(f"{_INSERT} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 'confirmed', ?)",
                      (i0, subscription_id, subscriber, e0.namespace, e0.seq, e0.id, e0.source, e0.timestamp,
                       created_at, now, int(replay)))
            continue
        first = take_ids(c, len(run), "deliveries", "serial")
        evs = [e for _, e in run]
        items = pack([i for i, _ in run], [e.seq for e in evs], [e.id for e in evs], [e.source for e in evs],
                     [e.timestamp for e in evs])
        c.execute(_INSERT_PACKED, (first, i0, subscription_id, subscriber, e0.namespace, e0.seq, e0.id, e0.source,
                                   e0.timestamp, created_at, now, int(replay), len(run), items))


def record_dead(conn: sqlite3.Connection, letters: Sequence[Any]) -> None:
    """Record the pending notifications among ``letters`` (``DeadLetter``s) as dead (before moving them)."""
    seen: set[int] = set()
    rows = []
    for d in letters:
        if d.id not in seen:
            seen.add(d.id)
            rows.append((d.subscriber, d.event_id, d.dead_at, d.attempts, d.id))
    conn.executemany(_DEAD, rows)


def record_dropped(conn: sqlite3.Connection, ids: Iterable[int], now: int) -> None:
    """Record the dead letters among ``ids`` as dropped (before deleting them)."""
    conn.executemany(_DROPPED, [(now, i) for i in dict.fromkeys(ids)])


def read_deliveries(conn: sqlite3.Connection, after: int, limit: int | None) -> list[DeliveryRecord]:
    out: list[DeliveryRecord] = []
    # A packed row starting up to MAX_ITEMS serials back may hold the records after ``after``.
    key, page = after - MAX_ITEMS, 1000
    while limit is None or len(out) < limit:
        rows = conn.execute(
            f"SELECT {COLUMNS}, items FROM deliveries WHERE serial > ? ORDER BY serial LIMIT ?", (key, page)
        ).fetchall()
        for row in rows:
            out.extend(
                DeliveryRecord(
                    serial=r[0], notification_id=r[1], subscription_id=r[2], subscriber=r[3], namespace=r[4],
                    seq=r[5], event_id=r[6], source=r[7], event_timestamp=r[8], created_at=r[9], settled_at=r[10],
                    attempts=r[11], outcome=r[12], replay=bool(r[13]),
                )
                for r in expand(row[:-1], row[-1]) if r[0] > after
            )
        if len(rows) < page:
            break
        key = rows[-1][0]
    return out if limit is None else out[:limit]


class SQLiteDeliveryStore(SQLiteAccess, DeliveryStore):
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
        stats = list(stats)
        kept = None if ids is None else list(ids)

        @lazy  # lost to a power failure, the events are read and pushed again (_sqlite_writer)
        def job(c: sqlite3.Connection, w: Writer) -> list[int]:
            cur = c.execute("UPDATE subscriptions SET cursor = ? WHERE id = ?", (cursor, subscription_id))
            if cur.rowcount == 0:
                return []
            w.staged_opened[subscription_id] = cursor
            ids = insert_notifications(c, subscription_id, events, self.clock.now_ns(), kept) if events else []
            apply_stats(c, stats)
            return ids

        return await self._write(job)

    async def take_notification_ids(self, n: int) -> int:
        fut: asyncio.Future[int] = self._write(lambda c, w: take_ids(c, n))
        return await fut

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
        stats = list(stats)

        @lazy  # lost to a power failure, the cursor goes back and the batch is pushed again
        def job(c: sqlite3.Connection, w: Writer) -> None:
            insert_confirmed(c, subscription_id, subscriber, confirmed, created_at, now, replay=False)
            c.execute("UPDATE subscriptions SET cursor = MAX(cursor, ?) WHERE id = ?", (cursor, subscription_id))
            apply_stats(c, stats)

        await self._write(job)

    async def settle_notifications(
        self,
        ids: Sequence[int],
        stats: Mapping[int, Sequence[Stat]] | None = None,
        sent_stats: Mapping[int, Sequence[Stat]] | None = None,
        *,
        fence: Fence | None = None,
    ) -> list[int]:
        per_id, per_sent = stats or {}, sent_stats or {}

        @lazy  # a confirmation lost to a power failure is a repeated push (_sqlite_writer)
        def job(c: sqlite3.Connection, w: Writer) -> list[int]:
            record_settled(c, ids, self.clock.now_ns())
            done, unsent = delete_notifications(c, ids)
            apply_stats(c, stats_of(per_id, done))
            apply_stats(c, stats_of(per_sent, unsent))
            return done

        return await self._write(job)

    async def mark_sent(
        self, ids: Sequence[int], stats: Mapping[int, Sequence[Stat]] | None = None, *, fence: Fence | None = None
    ) -> list[int]:
        per_id = stats or {}

        def job(c: sqlite3.Connection, w: Writer) -> list[int]:
            marked: set[int] = set()
            todo = list(dict.fromkeys(ids))
            for k in range(0, len(todo), 500):
                chunk = todo[k : k + 500]
                marked.update(r[0] for r in c.execute(
                    f"UPDATE notifications SET sent = 1 WHERE sent = 0 AND id IN ({','.join('?' * len(chunk))}) "
                    "RETURNING id",
                    chunk,
                ))
            apply_stats(c, stats_of(per_id, marked))
            return [i for i in todo if i in marked]

        return await self._write(job)

    async def get_notifications(self, ids: Sequence[int]) -> list[PendingNotification]:
        def q(c: sqlite3.Connection) -> list[PendingNotification]:
            out: list[PendingNotification] = []
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                out.extend(
                    PendingNotification(
                        id=r[0], subscription_id=r[1], seq=r[2], namespace=r[3], attempts=r[4], created_at=r[5]
                    )
                    for r in c.execute(
                        "SELECT id, subscription_id, seq, namespace, attempts, created_at FROM notifications "
                        f"WHERE id IN ({marks})",
                        chunk,
                    )
                )
            return out

        return await self._read(q)

    async def former_subscribers(self, ids: Sequence[int]) -> dict[int, str]:
        def q(c: sqlite3.Connection) -> dict[int, str]:
            out: dict[int, str] = {}
            todo = list(dict.fromkeys(ids))
            for i in range(0, len(todo), 500):
                chunk = todo[i : i + 500]
                marks = ",".join("?" * len(chunk))
                out.update(c.execute(
                    f"SELECT notification_id, subscriber FROM deliveries WHERE notification_id IN ({marks})", chunk
                ))
                out.update(c.execute(f"SELECT id, subscriber FROM dead_letters WHERE id IN ({marks})", chunk))
            packed: dict[int, tuple[str, set[int]]] = {}  # each row unpacked once per call
            for i in todo:
                if i in out:
                    continue
                # Batches take disjoint id blocks; two rows back covers one pushed again after a crash.
                for serial, subscriber, items in c.execute(
                    "SELECT serial, subscriber, items FROM deliveries WHERE items IS NOT NULL AND notification_id <= ? "
                    "ORDER BY notification_id DESC LIMIT 2", (i,),
                ):
                    if serial not in packed:
                        packed[serial] = (subscriber, set(unpack(items).ids))
                    if i in packed[serial][1]:
                        out[i] = subscriber
                        break
            return out

        return await self._read(q)

    async def pending(self, subscription_id: int) -> list[PendingNotification]:
        def q(c: sqlite3.Connection) -> list[PendingNotification]:
            return [
                PendingNotification(
                        id=r[0], subscription_id=r[1], seq=r[2], namespace=r[3], attempts=r[4], created_at=r[5]
                    )
                for r in c.execute(
                    "SELECT id, subscription_id, seq, namespace, attempts, created_at FROM notifications "
                    "WHERE subscription_id = ? ORDER BY id",
                    (subscription_id,),
                )
            ]

        return await self._read(q)

    async def pending_counts(self) -> dict[int, int]:
        return await self._read(
            lambda c: dict(c.execute("SELECT subscription_id, COUNT(*) FROM notifications GROUP BY subscription_id"))
        )

    async def last_notification_id(self) -> int:
        def q(c: sqlite3.Connection) -> int:
            row = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'notifications'").fetchone()
            return int(row[0]) if row else 0

        return await self._read(q)

    async def count_attempt(
        self, ids: Sequence[int], stats: Iterable[Stat] = (), *, fence: Fence | None = None
    ) -> None:
        stats = list(stats)

        def job(c: sqlite3.Connection, w: Writer) -> None:
            c.executemany("UPDATE notifications SET attempts = attempts + 1 WHERE id = ?", [(i,) for i in ids])
            apply_stats(c, stats)

        await self._write(job)


    async def dead_letter(
        self, letters: Sequence[DeadLetter], stats: Iterable[Stat] = (), *, fence: Fence | None = None
    ) -> list[int]:
        stats = list(stats)

        def job(c: sqlite3.Connection, w: Writer) -> list[int]:
            record_dead(c, letters)
            moved = []
            for d in letters:
                if c.execute("DELETE FROM notifications WHERE id = ?", (d.id,)).rowcount:
                    c.execute(
                        f"INSERT INTO dead_letters({DL_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (d.id, d.subscription_id, d.subscriber, d.seq, d.namespace, d.event_id, d.attempts,
                         d.reason, d.dead_at),
                    )
                    moved.append(d.id)
            apply_stats(c, stats)
            return moved

        return await self._write(job)

    async def list_dead_letters(
        self,
        subscription_ids: Sequence[int] | None = None,
        after: int | None = None,
        limit: int | None = None,
        *,
        ended_of: str | None = None,
    ) -> list[DeadLetter]:
        def q(c: sqlite3.Connection) -> list[DeadLetter]:
            lim = -1 if limit is None else limit
            if subscription_ids is None:
                rows = c.execute(
                    f"SELECT {DL_COLS} FROM dead_letters WHERE id > ? ORDER BY id LIMIT ?", (after or 0, lim)
                ).fetchall()
            else:
                marks = ",".join("?" * len(subscription_ids))
                ended = (
                    " OR (subscriber = ? AND subscription_id NOT IN (SELECT id FROM subscriptions))"
                    if ended_of is not None else ""
                )
                rows = c.execute(
                    f"SELECT {DL_COLS} FROM dead_letters WHERE (subscription_id IN ({marks}){ended}) AND id > ? "
                    "ORDER BY id LIMIT ?",
                    (*subscription_ids, *([ended_of] if ended_of is not None else []), after or 0, lim),
                ).fetchall()
            return [DeadLetter(**dict(zip(DL_FIELDS, r, strict=True))) for r in rows]

        return await self._read(q)

    async def redrive_dead_letters(self, ids: Sequence[int], now: int) -> list[PendingNotification]:
        def job(c: sqlite3.Connection, w: Writer) -> list[PendingNotification]:
            out = []
            for i in ids:
                row = c.execute(
                    "SELECT subscription_id, seq, namespace FROM dead_letters WHERE id = ?", (i,)
                ).fetchone()
                if row is None:
                    continue
                c.execute("DELETE FROM dead_letters WHERE id = ?", (i,))
                c.execute(
                    "INSERT INTO notifications(id, subscription_id, seq, namespace, attempts, created_at, sent) "
                    "VALUES (?, ?, ?, ?, 0, ?, 0)",
                    (i, row[0], row[1], row[2], now),
                )
                out.append(PendingNotification(
                    id=i, subscription_id=row[0], seq=row[1], namespace=row[2], created_at=now
                ))
            return out

        return await self._write(job)

    async def drop_dead_letters(self, ids: Sequence[int], stats: Iterable[Stat] = ()) -> list[int]:
        stats = list(stats)

        def job(c: sqlite3.Connection, w: Writer) -> list[int]:
            record_dropped(c, ids, self.clock.now_ns())
            done = [i for i in ids if c.execute("DELETE FROM dead_letters WHERE id = ?", (i,)).rowcount]
            apply_stats(c, stats)
            return done

        return await self._write(job)

    async def deliveries(self, after: int = 0, limit: int | None = None) -> list[DeliveryRecord]:
        return await self._read(lambda c: read_deliveries(c, after, limit))
