"""The embedded store: one SQLite database in WAL mode.

Each concern lives in its own module (``_sqlite_principals``, ``_sqlite_registry``,
``_sqlite_events``, ``_sqlite_deliveries``, ``_sqlite_stats``, ``_sqlite_schemas``,
``_sqlite_replays``); this one assembles them and owns the connections.

One writer thread (``_sqlite_writer``) owns the only writing connection and commits
queued jobs in groups, answering callers only once their writes are durable. Reads run
on a small thread pool, each thread with its own read connection; WAL lets them proceed
while the writer commits.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ..core.clock import Clock
from ..errors import StoreError
from ._base import Store
from ._disk import cause
from ._records import AppendRouter
from ._sqlite_db import private_files
from ._sqlite_deliveries import SQLiteDeliveryStore
from ._sqlite_events import SQLiteEventStore
from ._sqlite_migrations import header_version, migrate, refuse_newer
from ._sqlite_principals import SQLitePrincipalStore
from ._sqlite_registry import SQLiteRegistryStore
from ._sqlite_replays import SQLiteReplayStore
from ._sqlite_schemas import SQLiteSchemaStore
from ._sqlite_stats import SQLiteStatisticsStore
from ._sqlite_writer import Writer
from .backup import hold_folder

__all__ = ["SQLiteStore"]

T = TypeVar("T")


class SQLiteStore(
    SQLitePrincipalStore,
    SQLiteRegistryStore,
    SQLiteEventStore,
    SQLiteDeliveryStore,
    SQLiteStatisticsStore,
    SQLiteSchemaStore,
    SQLiteReplayStore,
    Store,
):
    """SQLite in WAL mode under ``path`` (a file; its folder is created)."""

    def __init__(
        self, path: str | Path, *, max_batch: int = 512, readers: int = 2, fsync: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self._clock = clock
        self._path = str(path)
        self._fsync = fsync
        """Whether a publish's commit is fsynced before it is answered (``commit_fsync``)."""
        self._max_batch = max_batch
        self._readers = readers
        self._writer: Writer | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._router: AppendRouter | None = None
        self._folder_lock: int | None = None

    @property
    def path(self) -> str:
        return self._path

    async def open(self) -> None:
        if self._path != ":memory:":
            try:
                private_files(Path(self._path))
                # Shared: other commands may open the store beside a server; a restore may not.
                self._folder_lock = hold_folder(Path(self._path).parent)
            except OSError as e:
                raise StoreError(f"cannot open {self._path}: {cause(self._path, e)}") from None
            on_file = header_version(self._path)
            if on_file is not None:
                try:
                    refuse_newer(on_file, "the store")
                except StoreError as e:
                    self._release_folder()
                    raise StoreError(f"cannot open {self._path}: {e}") from None
        w = Writer(self._path, self._max_batch, self._router, _setup, fsync=self._fsync, now_ns=self.clock.now_ns)
        w.start()
        await asyncio.to_thread(w.ready.wait)
        if w.error is not None:
            self._release_folder()
            raise StoreError(f"cannot open {self._path}: {cause(self._path, w.error)}") from w.error
        self._writer = w
        self._pool = ThreadPoolExecutor(self._readers, thread_name_prefix="tidings-sqlite-reader")

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.jobs.put(None)
            await asyncio.to_thread(self._writer.join)
            self._writer = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._conns_lock:
            for c in self._conns:
                c.close()
            self._conns.clear()
        self._release_folder()

    def _release_folder(self) -> None:
        if self._folder_lock is not None:
            os.close(self._folder_lock)
            self._folder_lock = None

    def _write(self, fn: Callable[[sqlite3.Connection, Any], T]) -> asyncio.Future[T]:
        if self._writer is None:
            raise StoreError("store is not open")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._writer.jobs.put((fn, fut, loop))
        return fut

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA query_only=ON")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._pool is None:
            raise StoreError("store is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(self._reader()))


def _setup(conn: sqlite3.Connection) -> None:
    migrate(conn, "the store")
