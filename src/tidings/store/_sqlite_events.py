"""The event log in the SQLite store: appends go through the writer's group commit."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable, Sequence

from ..errors import StoreError
from ._base import EventStore
from ._records import AppendRouter, KeyRecord, NewEvent, Stat, StoredEvent
from ._sqlite_db import EVENT_COLS, SQLiteAccess, event_row
from ._sqlite_keys import expire
from ._sqlite_writer import Append, Writer, lazy

__all__ = ["SQLiteEventStore"]


class SQLiteEventStore(SQLiteAccess, EventStore):
    """Relies on ``SQLiteStore``'s writer thread (``_writer``) and router."""

    _writer: Writer | None
    _router: AppendRouter | None

    async def append(self, events: Sequence[NewEvent], stats: Iterable[Stat] = ()) -> list[StoredEvent]:
        if self._writer is None:
            raise StoreError("store is not open")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[StoredEvent]] = loop.create_future()
        self._writer.jobs.put((Append(events, list(stats)), fut, loop))
        return await fut

    def route_appends(self, router: AppendRouter | None) -> bool:
        self._router = router
        if self._writer is not None:
            self._writer.router = router  # read by the writer once per transaction
        return True

    async def read_after(
        self, seq: int, namespaces: Sequence[str] | None = None, limit: int = 1000
    ) -> list[StoredEvent]:
        def q(c: sqlite3.Connection) -> list[StoredEvent]:
            if namespaces is None:
                rows = c.execute(
                    f"SELECT {EVENT_COLS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
                ).fetchall()
            else:
                marks = ",".join("?" * len(namespaces))
                rows = c.execute(
                    f"SELECT {EVENT_COLS} FROM events WHERE namespace IN ({marks}) AND seq > ? "
                    "ORDER BY seq LIMIT ?",
                    (*namespaces, seq, limit),
                ).fetchall()
            return [event_row(r) for r in rows]

        return await self._read(q)

    async def read_seqs(self, seqs: Sequence[int]) -> list[StoredEvent]:
        def q(c: sqlite3.Connection) -> list[StoredEvent]:
            out: list[StoredEvent] = []
            for i in range(0, len(seqs), 500):
                chunk = seqs[i : i + 500]
                marks = ",".join("?" * len(chunk))
                out.extend(
                    event_row(r)
                    for r in c.execute(f"SELECT {EVENT_COLS} FROM events WHERE seq IN ({marks})", chunk)
                )
            out.sort(key=lambda e: e.seq)
            return out

        return await self._read(q)

    async def count_events(self, namespace: str, upto: int | None = None) -> int:
        def q(c: sqlite3.Connection) -> int:
            if upto is None:
                return int(c.execute("SELECT COUNT(*) FROM events WHERE namespace = ?", (namespace,)).fetchone()[0])
            return int(
                c.execute(
                    "SELECT COUNT(*) FROM events WHERE namespace = ? AND seq <= ?", (namespace, upto)
                ).fetchone()[0]
            )

        return await self._read(q)

    async def head(self) -> int:
        return await self._read(lambda c: c.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])

    async def find_keys(self, keys: Sequence[tuple[str, str]], now: int) -> dict[tuple[str, str], KeyRecord]:
        if self._writer is None:
            raise StoreError("store is not open")
        index = self._writer.keys
        return await self._read(lambda c: index.find(c, keys, now))

    async def expire_keys(self, now: int, limit: int = 10_000) -> int:
        @lazy  # losing a deletion in a power failure only deletes it again next round
        def job(c: sqlite3.Connection, w: Writer) -> int:
            return expire(c, w.keys, now, limit)

        fut: asyncio.Future[int] = self._write(job)
        return await fut

    async def trim_events(self, namespace: str, before: int) -> int:
        def job(c: sqlite3.Connection, w: Writer) -> int:
            # The log's last event stays whatever its age: the next seq is derived from it.
            cur = c.execute(
                "DELETE FROM events WHERE namespace = ? AND timestamp < ? "
                "AND seq < (SELECT MAX(seq) FROM events) "
                "AND seq NOT IN (SELECT seq FROM notifications WHERE namespace = ?) "
                "AND seq NOT IN (SELECT seq FROM dead_letters WHERE namespace = ?)",
                (namespace, before, namespace, namespace),
            )
            return int(cur.rowcount)

        fut: asyncio.Future[int] = self._write(job)
        return await fut
