"""The distributor's state in one SQLite file: the embedded default, without Redis."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ._base import Mark, State

__all__ = ["SQLiteState"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS marks (set_name TEXT NOT NULL, gid TEXT NOT NULL, PRIMARY KEY (set_name, gid))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, target TEXT NOT NULL, payload BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS outbox_target ON outbox (target, seq);
CREATE TABLE IF NOT EXISTS subscriptions (id TEXT PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS cursors (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class SQLiteState(State):
    """All four kinds of state in ``path`` (WAL). One connection, used by one worker
    thread at a time: a mark is one transaction, INSERT OR IGNORE's changed-row count
    deciding whether the outbox row is written."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        self._conn = conn

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        if conn is None:
            raise RuntimeError("SQLiteState used before open()")
        async with self._lock:
            return await asyncio.to_thread(fn, conn)

    async def mark(self, marks: Sequence[Mark]) -> list[bool]:
        def work(c: sqlite3.Connection) -> list[bool]:
            out: list[bool] = []
            c.execute("BEGIN IMMEDIATE")
            try:
                for m in marks:
                    added = c.execute("INSERT OR IGNORE INTO marks VALUES (?, ?)", (m.set_name, m.gid)).rowcount == 1
                    if added and m.outbox is not None:
                        c.execute("INSERT INTO outbox (target, payload) VALUES (?, ?)", (m.outbox, m.payload))
                    out.append(added)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return out

        return await self._run(work)

    async def members(self, set_name: str) -> set[str]:
        return await self._run(lambda c: {r[0] for r in c.execute(
            "SELECT gid FROM marks WHERE set_name = ?", (set_name,))})

    async def peek(self, outbox: str, n: int) -> list[bytes]:
        return await self._run(lambda c: [bytes(r[0]) for r in c.execute(
            "SELECT payload FROM outbox WHERE target = ? ORDER BY seq LIMIT ?", (outbox, n))])

    async def pop(self, outbox: str, sent: Sequence[bytes], *, record: str | None = None,
                  gids: Sequence[str] = ()) -> int:
        def work(c: sqlite3.Connection) -> int:
            c.execute("BEGIN IMMEDIATE")
            try:
                head = c.execute("SELECT seq, payload FROM outbox WHERE target = ? ORDER BY seq LIMIT ?",
                                 (outbox, len(sent))).fetchall()
                n = 0
                for (seq, payload), want in zip(head, sent, strict=False):
                    if bytes(payload) != want:
                        break
                    c.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
                    if record is not None and n < len(gids):
                        c.execute("INSERT OR IGNORE INTO marks VALUES (?, ?)", (record, gids[n]))
                    n += 1
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return n

        return await self._run(work)

    async def outbox_size(self, outbox: str) -> int:
        return await self._run(lambda c: int(c.execute(
            "SELECT COUNT(*) FROM outbox WHERE target = ?", (outbox,)).fetchone()[0]))

    async def save_subscription(self, sub_id: str, body: bytes) -> bool:
        return await self._run(lambda c: c.execute(
            "INSERT OR IGNORE INTO subscriptions VALUES (?, ?)", (sub_id, body)).rowcount == 1)

    async def subscriptions(self) -> list[tuple[str, bytes]]:
        return await self._run(lambda c: [(r[0], bytes(r[1])) for r in c.execute(
            "SELECT id, body FROM subscriptions ORDER BY id")])

    async def get_cursor(self, name: str) -> str | None:
        def work(c: sqlite3.Connection) -> str | None:
            row = c.execute("SELECT value FROM cursors WHERE name = ?", (name,)).fetchone()
            return None if row is None else str(row[0])

        return await self._run(work)

    async def set_cursor(self, name: str, value: str) -> None:
        await self._run(lambda c: c.execute(
            "INSERT INTO cursors VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value)))
