"""Direct access to the hot log (the store's SQLite file) for the pipeline.

The live server keeps the only writing connection of its own process; the pipeline
opens separate connections to the same file, which WAL mode allows: readers never
block the server, and the few writes here (trimming archived rows) wait for the
server's writer with ``busy_timeout`` and commit in small batches so they never hold
the write lock long.

Every function opens and closes its own connection, so none of them keeps state that
would have to be pickled to a Spark executor.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from .errors import PipelineError

__all__ = [
    "EVENT_COLUMNS",
    "IdRange",
    "archivable_upto",
    "connect",
    "db_path",
    "enable_vacuum",
    "id_bounds",
    "namespaces",
    "read_range",
    "reclaim",
    "retention_of",
    "store_bytes",
    "trim_archived",
    "trim_deliveries",
]

EVENT_COLUMNS: Final = "seq, namespace, id, prev_id, timestamp, source, headers, data"
BUSY_TIMEOUT_MS: Final = 30_000
TRIM_BATCH: Final = 5_000
"""Ids deleted per write transaction when trimming: short enough that the server's
writer, which waits on the same lock, is never held up for long."""

SCHEMA_KEY: Final = "tidings:publication:schema"


def db_path(location: str | Path) -> Path:
    """The SQLite file of a data dir (``<dir>/tidings.db``), or ``location`` itself if it is a file."""
    p = Path(location)
    return p / "tidings.db" if p.is_dir() else p


@contextlib.contextmanager
def connect(location: str | Path, *, write: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection to the hot log, read-only unless ``write``; closed on exit."""
    path = db_path(location)
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
        yield conn
    finally:
        conn.close()


class IdRange(msgspec.Struct, frozen=True, array_like=True):
    """Ids ``lo..hi`` (both inclusive) of one namespace."""

    namespace: str
    lo: int
    hi: int


def namespaces(conn: sqlite3.Connection) -> list[str]:
    """Every namespace that has events in the hot log, sorted."""
    # One index seek per namespace (skip-scan over the (namespace, id) index).
    out: list[str] = []
    row = conn.execute("SELECT MIN(namespace) FROM events").fetchone()
    while row is not None and row[0] is not None:
        out.append(row[0])
        row = conn.execute("SELECT MIN(namespace) FROM events WHERE namespace > ?", (row[0],)).fetchone()
    return out


def id_bounds(conn: sqlite3.Connection, namespace: str) -> tuple[int, int] | None:
    """The lowest and highest id of ``namespace`` in the hot log, or None if it has none."""
    lo, hi = conn.execute("SELECT MIN(id), MAX(id) FROM events WHERE namespace = ?", (namespace,)).fetchone()
    return None if lo is None else (int(lo), int(hi))


def read_range(
    conn: sqlite3.Connection, r: IdRange, where: str = "", params: Sequence[Any] = (), batch: int = 10_000
) -> Iterator[list[tuple[Any, ...]]]:
    """Rows (:data:`EVENT_COLUMNS`) of ``r`` in id order, ``batch`` at a time.

    ``where`` is an extra SQL condition (``AND ...``) with its ``params``. Keyset
    paging keeps each query short, so no read transaction pins the WAL for long.
    """
    after = r.lo - 1
    while after < r.hi:
        rows = conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE namespace = ? AND id > ? AND id <= ? {where} "
            "ORDER BY id LIMIT ?",
            (r.namespace, after, r.hi, *params, batch),
        ).fetchall()
        if not rows:
            return
        yield rows
        after = rows[-1][2]


def archivable_upto(conn: sqlite3.Connection, namespace: str, after: int, before_ns: int) -> int:
    """The highest id ``X`` such that every event of ``namespace`` in ``(after, X]`` is older than ``before_ns``.

    Archiving moves a prefix of the chain, so a late timestamp never lets an earlier
    event slip through: the first young event stops the prefix. Returns ``after`` when
    there is nothing to move.
    """
    young = conn.execute(
        "SELECT MIN(id) FROM events WHERE namespace = ? AND id > ? AND timestamp >= ?",
        (namespace, after, before_ns),
    ).fetchone()[0]
    if young is not None:
        return max(after, int(young) - 1)
    top = conn.execute("SELECT MAX(id) FROM events WHERE namespace = ?", (namespace,)).fetchone()[0]
    return after if top is None else max(after, int(top))


def trim_archived(conn: sqlite3.Connection, namespace: str, upto: int) -> int:
    """Delete the archived events ``id <= upto`` of ``namespace``; the number deleted.

    The store's trimming rules apply (``Store.trim_events``): rows still referenced by a
    notification or a dead letter stay, and so does the log's last row (the next seq is
    derived from it). Deletes windows of :data:`TRIM_BATCH` ids, each its own
    transaction; stopping half way is harmless, the next run finishes the job.
    """
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


VACUUM_PAGES: Final = 4_096
"""Free pages returned to the filesystem per write transaction (16 MiB of 4 KiB pages)."""


def reclaim(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """Give the free pages of the store's file back to the filesystem; ``(bytes before, after)``.

    Needs the file's incremental auto-vacuum (stores created by this version have it;
    :func:`enable_vacuum` converts an older one): None without it. Runs
    ``incremental_vacuum`` :data:`VACUUM_PAGES` pages at a time, each its own short write
    transaction, then checkpoints the WAL so the main file is truncated; a checkpoint
    blocked by a reader leaves the truncation to the server's next checkpoint.
    """
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
        return None
    path = Path(conn.execute("PRAGMA database_list").fetchone()[2])
    before = _file_bytes(path)
    while conn.execute("PRAGMA freelist_count").fetchone()[0] > 0:
        conn.execute(f"PRAGMA incremental_vacuum({VACUUM_PAGES})").fetchall()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return before, _file_bytes(path)


def enable_vacuum(conn: sqlite3.Connection) -> None:
    """Switch an older store to incremental auto-vacuum: rewrites the whole file (``VACUUM``),
    holding the write lock meanwhile, so run it while the server is stopped or quiet."""
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("VACUUM")


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def store_bytes(location: str | Path) -> int:
    """The store's file and its WAL, in bytes."""
    return _file_bytes(db_path(location))


def trim_deliveries(conn: sqlite3.Connection, before_ns: int) -> int:
    """Delete the delivery records settled before ``before_ns``; the number deleted.

    In transactions of :data:`TRIM_BATCH` rows, oldest first, so the server's writer
    (which appends records as it settles notifications) never waits long.
    """
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deliveries'").fetchone() is None:
        return 0  # a store written before delivery records existed
    total = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(
                "DELETE FROM deliveries WHERE serial IN "
                "(SELECT serial FROM deliveries WHERE settled_at < ? ORDER BY settled_at LIMIT ?)",
                (before_ns, TRIM_BATCH),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        total += int(cur.rowcount)
        if cur.rowcount < TRIM_BATCH:
            return total


def retention_of(conn: sqlite3.Connection, namespace: str) -> int | None:
    """Seconds the events of ``namespace`` are kept, from its publication's schema; None: for ever.

    The publication config's ``tidings:publication:schema`` is a schema id (Nat) or a
    name (Text, meaning its latest Active version), as ``tidings.schemas.binding``
    resolves it; deleted schemas and versions do not count.
    """
    row = conn.execute("SELECT config FROM publications WHERE namespace = ?", (namespace,)).fetchone()
    if row is None:
        return None
    ref = None
    for pair in msgspec.json.decode(row[0]):
        if isinstance(pair, list) and len(pair) == 2 and pair[0] == SCHEMA_KEY and isinstance(pair[1], dict):
            ref = pair[1].get("Nat", pair[1].get("Text"))
    if isinstance(ref, int):
        found = conn.execute(
            "SELECT retention_s FROM schemas WHERE id = ? AND deleted_at IS NULL", (ref,)
        ).fetchone()
    elif isinstance(ref, str):
        found = conn.execute(
            "SELECT s.retention_s FROM schema_versions v JOIN schemas s ON s.id = v.schema_id "
            "WHERE v.name = ? AND v.deleted_at IS NULL AND s.deleted_at IS NULL AND s.state = 'Active' "
            "ORDER BY v.version DESC LIMIT 1",
            (ref,),
        ).fetchone()
    else:
        return None
    return int(found[0]) if found is not None and found[0] else None
