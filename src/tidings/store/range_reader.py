"""Reading a namespace's events by id range from another process than the broker's: the
replay pusher's reads (``broker.replay._pusher``), with the same statements as the
store's own ``read_range``, on a connection that can only read.

``reader_address`` says where a store can be read from outside (None for a store that
lives in the broker's memory); ``open_range_reader`` opens a reader there.
"""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from ..core.addresses import redact_address
from ..errors import StoreError
from ._records import StoredEvent
from ._replays import with_pairs
from ._sqlite_replays import range_rows
from .sqlite import SQLiteStore

__all__ = ["RangeReader", "open_range_reader", "reader_address"]

_SQLITE = "sqlite://"


class RangeReader(Protocol):
    async def read_range(
        self, namespace: str, after_id: int, before_id: int, limit: int, *, pairs: bytes | None = None
    ) -> list[StoredEvent]: ...

    async def close(self) -> None: ...


def reader_address(store: object) -> str | None:
    """Where another process can read ``store``'s events: ``sqlite://<path>``, the
    PostgreSQL address, or None (the memory store, an in-memory SQLite database)."""
    if isinstance(store, SQLiteStore):
        return None if store.path == ":memory:" else _SQLITE + store.path
    dsn = getattr(store, "dsn", None) if type(store).__name__ == "PostgresStore" else None
    return dsn if isinstance(dsn, str) else None


async def open_range_reader(address: str, *, timeout_s: float = 10.0) -> RangeReader:
    """A reader of the store at ``address`` (``reader_address``). Raises ``StoreError``."""
    if address.startswith(_SQLITE):
        return _SQLiteReader(address[len(_SQLITE):])
    reader = _PgReader(address, timeout_s)
    await reader.open()
    return reader


class _SQLiteReader:
    """One query-only connection on a thread of its own: the file is WAL, so it reads
    committed transactions beside the broker's writer without blocking it."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tidings-range-reader")
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # mode=ro: a reader never creates the file nor writes a byte of it.
            conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA query_only=ON")
            self._conn = conn
        return self._conn

    async def read_range(
        self, namespace: str, after_id: int, before_id: int, limit: int, *, pairs: bytes | None = None
    ) -> list[StoredEvent]:
        def q() -> list[StoredEvent]:
            try:
                return range_rows(self._connection(), namespace, after_id, before_id, limit, pairs)
            except sqlite3.Error as e:
                raise StoreError(f"cannot read {self._path}: {e}") from None

        return await asyncio.get_running_loop().run_in_executor(self._pool, q)

    async def close(self) -> None:
        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._pool, shut)
        self._pool.shutdown(wait=True)


class _PgReader:
    """One session, opened again after it breaks (a database restart, a failover)."""

    def __init__(self, dsn: str, timeout_s: float) -> None:
        self._dsn = dsn
        self._timeout_s = timeout_s
        self._conn: Any = None

    async def open(self) -> None:
        import asyncpg

        from ._pg_db import CAUGHT
        from .postgresql import session_bounds

        try:
            self._conn = await asyncpg.connect(
                self._dsn, timeout=self._timeout_s, command_timeout=self._timeout_s,
                server_settings={**session_bounds(self._timeout_s), "application_name": "tidings-replay"},
            )
        except CAUGHT as e:
            where = redact_address(self._dsn)
            raise StoreError(f"cannot open {where} to read a replay: {type(e).__name__}: {e}") from None

    async def read_range(
        self, namespace: str, after_id: int, before_id: int, limit: int, *, pairs: bytes | None = None
    ) -> list[StoredEvent]:
        from ._pg_db import CAUGHT, event_row
        from ._pg_replays import RANGE_SQL

        if self._conn is None or self._conn.is_closed():
            await self.open()
        try:
            rows = await self._conn.fetch(RANGE_SQL, namespace, after_id, before_id, limit)
        except CAUGHT as e:
            await self.close()
            raise StoreError(f"reading a replay's range failed: {type(e).__name__}") from None
        return with_pairs([event_row(r) for r in rows], pairs)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()
