"""The hot log in the store's SQLite file (:mod:`tidings.pipeline._hotlog`'s SQLite backend).

The live server keeps the only writing connection of its own process; the pipeline
opens separate connections to the same file, which WAL mode allows: readers never
block the server, and the few writes here (trimming archived rows) wait for the
server's writer with ``busy_timeout`` and commit in small batches so they never hold
the write lock long.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from ._hotlog import TRIM_BATCH, Binds, HotLog, Session, Sizes, arrow_read_schema
from .errors import PipelineError

__all__ = ["SQLiteLog", "SQLiteSession", "db_path"]

BUSY_TIMEOUT_MS: Final = 30_000
VACUUM_PAGES: Final = 4_096
REWRITE_LIVE_MAX: Final = 32 * 2**20
"""Up to this much live data, a mostly free file is rewritten whole (``VACUUM``): the
rewrite holds the write lock for as long as copying the live pages takes (under a second
here), while moving a large free space page by page takes seconds
(docs/benchmarks/history/2026-11-25-pipeline-3-native-encoder.md)."""
_CACHE_KIB: Final = 65_536
"""Free pages returned to the filesystem per write transaction (16 MiB of 4 KiB pages)."""

# prev_id is NULL only on a chain's first event; ADBC infers a column's type from its
# first rows, so NULL travels as -1 (ids are positive) and is restored in Arrow.
_ARROW_SELECT: Final = (
    "SELECT seq, id, IFNULL(prev_id, -1) AS prev_id, timestamp, source, "
    "CAST(headers AS TEXT) AS headers, CAST(data AS TEXT) AS data "
    "FROM events WHERE namespace = ? AND id BETWEEN ? AND ? ORDER BY id"
)


def db_path(location: str | Path) -> Path:
    """The SQLite file of a data dir (``<dir>/tidings.db``), or ``location`` itself if it is a file."""
    p = Path(location)
    return p / "tidings.db" if p.is_dir() else p


class SQLiteLog(HotLog):
    """The hot log of a data dir (or of its ``tidings.db``)."""

    @contextlib.contextmanager
    def connect(self, *, write: bool = False) -> Iterator[SQLiteSession]:
        path = db_path(self.location)
        if not path.exists():
            raise PipelineError(f"no event store at {path}", code="store_not_found")
        conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not write:
                conn.execute("PRAGMA query_only = 1")
            else:
                # Trimming and vacuum steps need no fsync each: a step lost to a power cut is
                # redone by the next run, and WAL keeps the file consistent either way.
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")  # the trim walks three b-trees
            yield SQLiteSession(conn, path)
        finally:
            conn.close()


class SQLiteSession(Session):
    numbered = False

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    def rows(self, sql: str, binds: Binds | None = None) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, binds.values if binds else ()).fetchall()

    def namespaces(self) -> list[str]:
        # One index seek per namespace (skip-scan over the (namespace, id) index).
        out: list[str] = []
        row = self.conn.execute("SELECT MIN(namespace) FROM events").fetchone()
        while row is not None and row[0] is not None:
            out.append(row[0])
            row = self.conn.execute("SELECT MIN(namespace) FROM events WHERE namespace > ?", (row[0],)).fetchone()
        return out

    def read_arrow(self, namespace: str, lo: int, hi: int) -> Any:
        """Through the ADBC SQLite driver when it is installed (the ``spark`` extra brings it);
        else the standard ``sqlite3`` module, a few times slower."""
        import pyarrow as pa
        import pyarrow.compute as pc

        schema = arrow_read_schema()
        table = self._read_adbc(namespace, lo, hi)
        if table is None:
            rows = self.conn.execute(_ARROW_SELECT, (namespace, lo, hi)).fetchall()
            cols = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
            table = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)],
                                         schema=schema)
        elif table.num_rows == 0:
            return schema.empty_table()
        else:
            table = table.cast(schema)
        prev = table.column("prev_id")
        return table.set_column(2, "prev_id", pc.if_else(pc.equal(prev, -1), None, prev))

    def _read_adbc(self, namespace: str, lo: int, hi: int) -> Any:
        """The rows as Arrow through the ADBC driver; None when it is not installed, or
        when it failed: it has no busy timeout, so a file busy for a moment (a writer's
        checkpoint) is read the ``sqlite3`` way, which waits, or fails with an error that
        says why (the driver's own errors do not cross back from an archive worker process)."""
        import pyarrow as pa

        try:
            import adbc_driver_manager
            import adbc_driver_sqlite as adbc
        except ImportError:
            return None
        # The driver's own API rather than its DB-API module, which imports pandas: half a
        # second in each archive worker process, a sixth of a million events' staging.
        params = pa.record_batch([pa.array([namespace]), pa.array([lo], pa.int64()), pa.array([hi], pa.int64())],
                                 names=["namespace", "lo", "hi"])
        # A URI: the path's own ``?``, ``#`` and ``%`` would otherwise be read as its syntax.
        uri = f"file:{quote(str(self.path))}?mode=ro"
        try:
            with adbc.connect(uri) as db, adbc_driver_manager.AdbcConnection(db) as conn, \
                    adbc_driver_manager.AdbcStatement(conn) as stmt:
                stmt.set_sql_query(_ARROW_SELECT)
                schema_capsule, array_capsule = params.__arrow_c_array__()
                stmt.bind(array_capsule, schema_capsule)
                stream, _ = stmt.execute_query()
                return pa.RecordBatchReader._import_from_c(stream.address).read_all()
        except adbc_driver_manager.Error:
            return None

    def has_tables(self, names: Sequence[str]) -> bool:
        found = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return set(names) <= found

    def has_columns(self, table: str, names: Sequence[str]) -> bool:
        return set(names) <= {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}

    def trim_archived(self, namespace: str, upto: int) -> int:
        conn = self.conn
        first = conn.execute("SELECT MIN(id) FROM events WHERE namespace = ?", (namespace,)).fetchone()[0]
        total = 0
        lo = upto + 1 if first is None else int(first)
        while lo <= upto:
            hi = min(upto, lo + TRIM_BATCH - 1)
            conn.execute("BEGIN IMMEDIATE")
            try:
                cur = conn.execute(
                    "DELETE FROM events WHERE namespace = ? AND id BETWEEN ? AND ?"
                    " AND seq < (SELECT MAX(seq) FROM events)"
                    " AND seq NOT IN (SELECT seq FROM notifications WHERE namespace = ?)"
                    " AND seq NOT IN (SELECT seq FROM dead_letters WHERE namespace = ?)",
                    (namespace, lo, hi, namespace, namespace),
                )
                total += int(cur.rowcount)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            lo = hi + 1
        return total

    def trim_deliveries(self, before_ns: int) -> int:
        conn = self.conn
        if not self.has_tables(["deliveries"]):
            return 0  # a store written before delivery records existed
        packed = self.has_columns("deliveries", ["n"])
        total = 0
        while True:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # A packed row (tidings.core.record_batch) is n records.
                gone = conn.execute(
                    f"DELETE FROM deliveries WHERE serial IN "
                    "(SELECT serial FROM deliveries WHERE settled_at < ? ORDER BY settled_at LIMIT ?) "
                    f"RETURNING {'COALESCE(n, 1)' if packed else '1'}",
                    (before_ns, TRIM_BATCH),
                ).fetchall()
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            total += sum(k for (k,) in gone)
            if len(gone) < TRIM_BATCH:
                return total

    def store_bytes(self) -> int:
        """The store's file and its WAL."""
        return sum(p.stat().st_size for p in (self.path, self.path.with_name(self.path.name + "-wal"))
                   if p.exists())

    def reclaim(self) -> tuple[int, int] | None:
        """Give the free pages of the store's file back to the filesystem.

        Needs the file's incremental auto-vacuum (stores created by this version have
        it; :meth:`vacuum` converts an older one): None without it. Runs
        ``incremental_vacuum`` :data:`VACUUM_PAGES` pages at a time, each its own short
        write transaction, then checkpoints the WAL so the main file is truncated; a
        checkpoint blocked by a reader leaves the truncation to the server's next checkpoint.
        """
        conn = self.conn
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            return None
        before = self.store_bytes()
        pages, free, size = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                             for p in ("page_count", "freelist_count", "page_size"))
        live = (pages - free) * size
        if free > pages - free and live <= REWRITE_LIVE_MAX:
            try:
                conn.execute("VACUUM")
            except sqlite3.OperationalError:
                pass  # busy past the timeout: free the pages step by step instead
        while conn.execute("PRAGMA freelist_count").fetchone()[0] > 0:
            # executescript steps the pragma to its end: through execute(), which steps a
            # statement once when it returns no rows, each call frees a single page.
            conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES});")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return before, self.store_bytes()

    def vacuum(self) -> Sizes:
        """Switch an older store to incremental auto-vacuum and give its free pages back:
        rewrites the whole file (``VACUUM``), holding the write lock meanwhile, so run it
        while the server is stopped or quiet."""
        before = self.store_bytes()
        self.conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        self.conn.execute("VACUUM")
        self.reclaim()
        return Sizes(before, self.store_bytes())
