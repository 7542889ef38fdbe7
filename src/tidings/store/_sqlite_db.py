"""The SQLite store's tables, its migrations, and the helpers its concern modules share."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ._records import Stat, StoredEvent, SubscriptionRecord

__all__ = [
    "DDL", "DL_COLS", "DL_FIELDS", "EVENT_COLS", "SUB_COLS", "SQLiteAccess", "apply_stats", "dec",
    "delete_notifications", "enc", "event_row", "insert_notifications", "insert_rows", "private_files", "sub_row",
    "take_ids",
]

T = TypeVar("T")

DDL = """
CREATE TABLE IF NOT EXISTS principals (
    name TEXT PRIMARY KEY,
    admin INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    hash BLOB PRIMARY KEY,
    principal TEXT NOT NULL REFERENCES principals(name)
);
CREATE TABLE IF NOT EXISTS publications (
    namespace TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    config BLOB NOT NULL,
    last_event_id INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS publishers (
    namespace TEXT NOT NULL,
    principal TEXT NOT NULL,
    PRIMARY KEY (namespace, principal)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS subscriptions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    subscriber TEXT NOT NULL,
    namespace TEXT NOT NULL,
    endpoint TEXT,
    mode TEXT NOT NULL,
    config BLOB NOT NULL,
    cursor INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS subscriptions_ns ON subscriptions(namespace, id);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    id INTEGER NOT NULL,
    prev_id INTEGER,
    timestamp INTEGER NOT NULL,
    source TEXT NOT NULL,
    headers BLOB NOT NULL,
    data BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_ns_id ON events(namespace, id);
CREATE INDEX IF NOT EXISTS events_ns_seq ON events(namespace, seq);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    subscription_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL DEFAULT 0,
    sent INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS notifications_sub ON notifications(subscription_id, id);
CREATE TABLE IF NOT EXISTS dead_letters (
    id INTEGER PRIMARY KEY,
    subscription_id INTEGER NOT NULL,
    subscriber TEXT NOT NULL,
    seq INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    reason TEXT NOT NULL,
    dead_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_sub ON dead_letters(subscription_id, id);
CREATE TABLE IF NOT EXISTS secrets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    subscription_id INTEGER NOT NULL,
    secret TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE INDEX IF NOT EXISTS secrets_sub ON secrets(subscription_id, id);
CREATE TABLE IF NOT EXISTS stats (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (scope, key, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

EVENT_COLS = "seq, namespace, id, prev_id, timestamp, source, data, headers"
enc = msgspec.json.encode
dec = msgspec.json.decode


def event_row(row: tuple[Any, ...]) -> StoredEvent:
    return StoredEvent(
        seq=row[0], namespace=row[1], id=row[2], prev_id=row[3], timestamp=row[4],
        source=row[5], data=row[6], headers=row[7],
    )


def sub_row(row: tuple[Any, ...]) -> SubscriptionRecord:
    return SubscriptionRecord(
        id=row[0], subscriber=row[1], namespace=row[2], endpoint=row[3], mode=row[4],
        config=dec(row[5]), cursor=row[6], created_at=row[7],
    )


DL_FIELDS = ("id", "subscription_id", "subscriber", "seq", "namespace", "event_id", "attempts", "reason", "dead_at")
DL_COLS = ", ".join(DL_FIELDS)
SUB_COLS = "id, subscriber, namespace, endpoint, mode, config, cursor, created_at"


def _aggregate(stats: Iterable[Stat]) -> list[tuple[str, str, str, int]]:
    agg: dict[tuple[str, str, str], int] = {}
    for s in stats:
        k = (s.scope, s.key, s.name)
        agg[k] = agg.get(k, 0) + s.delta
    return [(*k, v) for k, v in agg.items() if v]


def stats_of(per_id: Mapping[int, Sequence[Stat]], ids: Iterable[int]) -> list[Stat]:
    """The increments of these ids. Callers share one list between the notifications of
    a namespace (``per_notification_stats``): each list is scaled by how many ids it
    stands for rather than repeated, since this runs for every confirmed notification."""
    lists: dict[int, list[Any]] = {}
    for i in ids:
        stats = per_id.get(i)
        if stats:
            entry = lists.get(id(stats))
            if entry is None:
                lists[id(stats)] = [stats, 1]
            else:
                entry[1] += 1
    return [Stat(s.scope, s.key, s.name, s.delta * n) for stats, n in lists.values() for s in stats]


def apply_stats(conn: sqlite3.Connection, stats: Iterable[Stat]) -> None:
    rows = _aggregate(stats)
    if rows:
        conn.executemany(
            "INSERT INTO stats(scope, key, name, value) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(scope, key, name) DO UPDATE SET value = value + excluded.value",
            rows,
        )



_MAX_PARAMS = 999
"""SQLite's smallest limit on a statement's parameters (before 3.32)."""
_SIZES = (256, 128, 64, 32, 16, 8, 4, 2, 1)


def insert_rows(c: sqlite3.Connection, head: str, row: str, rows: Sequence[Sequence[Any]]) -> None:
    """``head`` (``INSERT INTO t(cols) VALUES ``) once for many ``rows``, each written as
    ``row`` (``(?, ?, 0)``), in statements of several rows each.

    ``executemany`` binds and steps one row at a time, which costs about twice as much
    per row as a statement with many rows
    (docs/benchmarks/history/2026-11-26-06-slow-day-many-rows-per-statement.md).
    Statements take 256, 128, ... 1 rows, so a connection compiles at most nine of them
    per table whatever the counts, and each stays within SQLite's parameter limit.
    Within one transaction of the single writer the rows still take consecutive ids."""
    if not rows:
        return
    width = row.count("?")
    i, n = 0, len(rows)
    for size in _SIZES:
        if (size > 1 and size * width > _MAX_PARAMS) or n - i < size:  # one row always goes
            continue
        sql = head + ",".join([row] * size)
        while n - i >= size:
            c.execute(sql, list(chain.from_iterable(rows[i : i + size])))
            i += size


def insert_notifications(
    c: sqlite3.Connection, subscription_id: int, events: Sequence[StoredEvent], now: int,
    ids: Sequence[int] | None = None,
) -> list[int]:
    """Insert pending notifications for ``events`` under ``ids``, or new ones increasing in
    event order; their ids."""
    if ids is not None:
        insert_rows(
            c, "INSERT INTO notifications(id, subscription_id, seq, namespace, created_at, sent) VALUES ",
            "(?, ?, ?, ?, ?, 0)",
            [(i, subscription_id, e.seq, e.namespace, now) for i, e in zip(ids, events, strict=True)],
        )
        return list(ids)
    insert_rows(
        c, "INSERT INTO notifications(subscription_id, seq, namespace, created_at, sent) VALUES ", "(?, ?, ?, ?, 0)",
        [(subscription_id, e.seq, e.namespace, now) for e in events],
    )
    # One writer, AUTOINCREMENT: the rows just inserted took consecutive ids.
    last = int(c.execute("SELECT last_insert_rowid()").fetchone()[0])
    return list(range(last - len(events) + 1, last + 1))



def take_ids(c: sqlite3.Connection, n: int, table: str = "notifications", key: str = "id") -> int:
    """Set aside ``n`` consecutive numbers of ``table``'s AUTOINCREMENT ``key`` (notification
    ids by default) for rows written later, or never; the first.

    AUTOINCREMENT numbers after the larger of its counter and the highest key, so the
    numbers taken here are never given to another row; the durable commit keeps it so."""
    last = c.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
    if last is None:
        c.execute("INSERT INTO sqlite_sequence(name, seq) VALUES (?, 0)", (table,))
    top = max(
        int(last[0]) if last is not None else 0,
        int(c.execute(f"SELECT COALESCE(MAX({key}), 0) FROM {table}").fetchone()[0]),
    )
    c.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (top + n, table))
    return top + 1


def delete_notifications(c: sqlite3.Connection, ids: Sequence[int]) -> tuple[list[int], set[int]]:
    """Delete the pending notifications among ``ids``; return those that were pending, in
    the order asked (an id asked twice counts once), and those of them never marked sent."""
    gone: dict[int, int] = {}
    todo = list(dict.fromkeys(ids))
    for k in range(0, len(todo), 500):
        chunk = todo[k : k + 500]
        gone.update(c.execute(
            f"DELETE FROM notifications WHERE id IN ({','.join('?' * len(chunk))}) RETURNING id, sent", chunk
        ))
    return [i for i in todo if i in gone], {i for i, sent in gone.items() if not sent}




def private_files(path: Path) -> None:
    """The database and its WAL and shared-memory files are the owner's alone (0600), in
    a folder created 0700: they hold token hashes and signing secrets (docs/security.md).
    SQLite gives its -wal and -shm files the database file's mode, so creating that first
    with 0600 covers them; modes left looser by an older version are tightened."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    if not path.exists():
        # Only a file nobody has open: closing a descriptor of a database this process
        # holds connections to would drop their POSIX locks (SQLite's documented hazard).
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
    for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if f.exists() and f.stat().st_mode & 0o077:
            os.chmod(f, 0o600)




class SQLiteAccess:
    """How each concern's module reaches the database; ``SQLiteStore`` provides both.

    ``_write`` queues a job ``fn(connection, writer)`` to the single writer thread (it
    runs in its own savepoint of a group-committed transaction); ``_read`` runs ``fn`` on
    a reader thread's connection."""

    def _write(self, fn: Callable[[sqlite3.Connection, Any], T]) -> asyncio.Future[T]:
        raise NotImplementedError

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        raise NotImplementedError
