"""The embedded store: one SQLite database in WAL mode.

One writer thread owns the only writing connection. Every write is a closure queued to
it; the thread takes all queued closures at once, runs each inside its own SAVEPOINT of
one transaction, commits with ``synchronous=FULL`` and only then resolves the callers'
futures. Concurrent publishes therefore share one fsync (group commit) and are answered
only when durable; a closure that fails rolls back to its savepoint and fails alone.

Reads run on a small thread pool, each thread with its own read connection; WAL lets
them proceed while the writer commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ..errors import StoreError
from . import _deliveries
from ._base import (
    AppendRouter,
    DeadLetter,
    NewEvent,
    PendingNotification,
    PrincipalRecord,
    PublicationRecord,
    Route,
    Stat,
    Store,
    StoredEvent,
    SubscriptionRecord,
    SubscriptionSecret,
)
from ._deliveries import DELIVERIES_DDL, DeliveryRecord
from ._sqlite_replays import REPLAY_DDL, SQLiteReplayStore
from ._sqlite_schemas import SCHEMA_DDL, SQLiteSchemaStore, migrate_schemas

__all__ = ["SQLiteStore"]

log = logging.getLogger("tidings.store")

T = TypeVar("T")

_SCHEMA = """
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

_EVENT_COLS = "seq, namespace, id, prev_id, timestamp, source, data, headers"
_enc = msgspec.json.encode
_dec = msgspec.json.decode


def _event(row: tuple[Any, ...]) -> StoredEvent:
    return StoredEvent(
        seq=row[0], namespace=row[1], id=row[2], prev_id=row[3], timestamp=row[4],
        source=row[5], data=row[6], headers=row[7],
    )


def _sub(row: tuple[Any, ...]) -> SubscriptionRecord:
    return SubscriptionRecord(
        id=row[0], subscriber=row[1], namespace=row[2], endpoint=row[3], mode=row[4],
        config=_dec(row[5]), cursor=row[6], created_at=row[7],
    )


_DL_FIELDS = ("id", "subscription_id", "subscriber", "seq", "namespace", "event_id", "attempts", "reason", "dead_at")
_DL_COLS = ", ".join(_DL_FIELDS)
_SUB_COLS = "id, subscriber, namespace, endpoint, mode, config, cursor, created_at"


def _aggregate(stats: Iterable[Stat]) -> list[tuple[str, str, str, int]]:
    agg: dict[tuple[str, str, str], int] = {}
    for s in stats:
        k = (s.scope, s.key, s.name)
        agg[k] = agg.get(k, 0) + s.delta
    return [(*k, v) for k, v in agg.items() if v]


def _apply_stats(conn: sqlite3.Connection, stats: Iterable[Stat]) -> None:
    rows = _aggregate(stats)
    if rows:
        conn.executemany(
            "INSERT INTO stats(scope, key, name, value) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(scope, key, name) DO UPDATE SET value = value + excluded.value",
            rows,
        )


class _Writer(threading.Thread):
    """The single writing connection and its group-commit loop."""

    def __init__(self, path: str, max_batch: int, router: AppendRouter | None) -> None:
        super().__init__(name="tidings-sqlite-writer", daemon=True)
        self._path = path
        self._max_batch = max_batch
        self.router = router
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        # Per-namespace last event id, owned by this thread and filled on a namespace's
        # first append from the events table (indexed). ``staged`` holds the values
        # of the transaction in progress and is merged only after COMMIT succeeds, so a
        # failed transaction can never leave a gap in a chain.
        self.last_ids: dict[str, int] = {}
        self.staged: dict[str, int] = {}
        # The log's highest seq, likewise: ``seq`` as committed (None: read it from the
        # table on next use), ``staged_seq`` within the transaction in progress.
        self.seq: int | None = None
        self.staged_seq = 0

    def run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=True)
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.executescript(_SCHEMA + SCHEMA_DDL + DELIVERIES_DDL + REPLAY_DDL)
            _migrate(conn)
        except BaseException as e:  # reported to open()
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        while True:
            first = self.jobs.get()
            if first is None:
                break
            batch = [first]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                batch.append(job)
            self._commit(conn, batch)
            if stop:
                break
        conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[Any]) -> None:
        results: list[tuple[bool, Any]] = []
        self.staged = {}
        self.staged_seq = self.seq or 0
        try:
            conn.execute("BEGIN IMMEDIATE")
            i = 0
            while i < len(batch):
                job = batch[i][0]
                if isinstance(job, _Append):
                    # Consecutive appends run as one statement: this is where group commit
                    # pays, and a failure falls back to running them one by one.
                    j = i
                    while j < len(batch) and isinstance(batch[j][0], _Append):
                        j += 1
                    group = [b[0] for b in batch[i:j]]
                    ok, res = self._run(conn, functools.partial(_append_group, group=group))
                    if ok:
                        results.extend((True, r) for r in res)
                    else:
                        results.extend(self._run(conn, functools.partial(_append_one, one=a)) for a in group)
                    i = j
                else:
                    results.append(self._run(conn, job))
                    i += 1
            router = self.router
            appended = [
                e for (job, _, _), (good, value) in zip(batch, results, strict=True)
                if good and isinstance(job, _Append) for e in value
            ] if router is not None else []
            routes = _route(conn, router, appended) if router is not None and appended else []
            conn.execute("COMMIT")
        except Exception as e:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            failure = StoreError(f"commit failed: {e}")
            results = [(False, failure)] * len(batch)
            self.seq = None  # read it again from the table
        else:
            self.last_ids.update(self.staged)
            if self.seq is not None:
                self.seq = self.staged_seq
            if router is not None and appended:
                # Before any caller hears of its events: the router hands them on first.
                try:
                    router.committed(appended, routes)
                except Exception:  # never the writer's end; the events are stored either way
                    log.exception("the router failed after a commit")
        for (_job, fut, loop), (good, value) in zip(batch, results, strict=True):
            loop.call_soon_threadsafe(_settle, fut, good, value)

    def _run(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection, _Writer], Any]) -> tuple[bool, Any]:
        """Run one job inside its own savepoint; a failure undoes only that job."""
        conn.execute("SAVEPOINT job")
        staged_before, seq_before = dict(self.staged), self.staged_seq
        try:
            res = fn(conn, self)
        except Exception as e:
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            self.staged, self.staged_seq = staged_before, seq_before
            return False, e
        conn.execute("RELEASE job")
        return True, res


def _route(conn: sqlite3.Connection, router: AppendRouter, events: list[StoredEvent]) -> list[Route]:
    """Open the notifications ``router`` plans for ``events``, in their transaction.

    A failure here must not fail the publish: the routes are undone and the
    subscriptions' workers open those notifications themselves, as without a router."""
    conn.execute("SAVEPOINT route")
    try:
        routes = router.plan(events)
        now = time.time_ns()
        for r in routes:
            if not r.events:
                continue
            moved = conn.execute("UPDATE subscriptions SET cursor = ? WHERE id = ?", (r.cursor, r.subscription_id))
            if moved.rowcount == 0:  # deleted meanwhile
                r.events = []
                continue
            r.ids = _insert_notifications(conn, r.subscription_id, r.events, now)
            _apply_stats(conn, r.stats)
    except Exception:
        log.exception("routing %d event(s) at append failed; their workers open them instead", len(events))
        conn.execute("ROLLBACK TO route")
        conn.execute("RELEASE route")
        return []
    conn.execute("RELEASE route")
    return routes


def _insert_notifications(
    c: sqlite3.Connection, subscription_id: int, events: Sequence[StoredEvent], now: int
) -> list[int]:
    c.executemany(
        "INSERT INTO notifications(subscription_id, seq, namespace, created_at, sent) VALUES (?, ?, ?, ?, 0)",
        [(subscription_id, e.seq, e.namespace, now) for e in events],
    )
    # One writer, AUTOINCREMENT: the rows just inserted took consecutive ids.
    last = int(c.execute("SELECT last_insert_rowid()").fetchone()[0])
    return list(range(last - len(events) + 1, last + 1))


class _Append:
    __slots__ = ("events", "stats")

    def __init__(self, events: Sequence[NewEvent], stats: list[Stat]) -> None:
        self.events = events
        self.stats = stats


def _append_group(c: sqlite3.Connection, w: _Writer, *, group: list[_Append]) -> list[list[StoredEvent]]:
    return _append_many(c, w, group)


def _append_one(c: sqlite3.Connection, w: _Writer, *, one: _Append) -> list[StoredEvent]:
    return _append_many(c, w, [one])[0]


def _append_many(c: sqlite3.Connection, w: _Writer, group: list[_Append]) -> list[list[StoredEvent]]:
    if w.seq is None:
        w.seq = w.staged_seq = c.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
    seq = w.staged_seq
    last = w.staged
    touched: dict[str, int] = {}
    outs: list[list[StoredEvent]] = []
    rows = []
    for a in group:
        out = []
        for e in a.events:
            ns = e.namespace
            prev = last.get(ns)
            if prev is None:
                prev = w.last_ids.get(ns)
            if prev is None:
                # The highest id in the log, or the one recorded on the publication (or
                # kept when it was deleted) if retention has trimmed the log: a chain never
                # restarts.
                prev = c.execute(
                    "SELECT MAX(COALESCE((SELECT MAX(id) FROM events WHERE namespace = ?), 0), "
                    "COALESCE((SELECT last_event_id FROM publications WHERE namespace = ?), 0), "
                    "COALESCE((SELECT value FROM meta WHERE key = 'last_event_id:' || ?), 0))",
                    (ns, ns, ns),
                ).fetchone()[0]
            seq += 1
            eid = prev + 1
            last[ns] = touched[ns] = eid
            s = StoredEvent(
                seq=seq, namespace=ns, id=eid, prev_id=prev or None, timestamp=e.timestamp,
                source=e.source, data=e.data, headers=e.headers,
            )
            out.append(s)
            rows.append((seq, ns, eid, s.prev_id, e.timestamp, e.source, e.data, e.headers))
        outs.append(out)
    c.executemany(f"INSERT INTO events({_EVENT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    c.executemany(
        "UPDATE publications SET last_event_id = ? WHERE namespace = ?", [(v, ns) for ns, v in touched.items()]
    )
    _apply_stats(c, (s for a in group for s in a.stats))
    w.staged_seq = seq
    return outs


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a store made by an earlier version up to this schema."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(notifications)")}
    if "sent" not in columns:
        # Earlier versions counted a notification as sent when it was recorded: the rows
        # pending now were counted already.
        conn.execute("ALTER TABLE notifications ADD COLUMN sent INTEGER NOT NULL DEFAULT 1")
    migrate_schemas(conn)


def _delete_notifications(c: sqlite3.Connection, ids: Sequence[int]) -> tuple[list[int], set[int]]:
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


def _private_files(path: Path) -> None:
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


def _settle(fut: asyncio.Future[Any], good: bool, value: Any) -> None:
    if fut.done():
        return
    if good:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class SQLiteStore(SQLiteSchemaStore, SQLiteReplayStore, Store):
    """SQLite in WAL mode under ``path`` (a file; its folder is created)."""

    def __init__(self, path: str | Path, *, max_batch: int = 512, readers: int = 2) -> None:
        self._path = str(path)
        self._max_batch = max_batch
        self._readers = readers
        self._writer: _Writer | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._router: AppendRouter | None = None

    @property
    def path(self) -> str:
        return self._path

    async def open(self) -> None:
        if self._path != ":memory:":
            _private_files(Path(self._path))
        w = _Writer(self._path, self._max_batch, self._router)
        w.start()
        await asyncio.to_thread(w.ready.wait)
        if w.error is not None:
            raise StoreError(f"cannot open {self._path}: {w.error}") from w.error
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

    # -- plumbing ---------------------------------------------------------------------

    def _write(self, fn: Callable[[sqlite3.Connection, _Writer], T]) -> asyncio.Future[T]:
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

    # -- principals -------------------------------------------------------------------

    async def create_principal(self, record: PrincipalRecord, token_hash: bytes) -> bool:
        def job(c: sqlite3.Connection, w: _Writer) -> bool:
            if c.execute("SELECT 1 FROM principals WHERE name = ?", (record.name,)).fetchone():
                return False
            c.execute(
                "INSERT INTO principals(name, admin, created_at) VALUES (?, ?, ?)",
                (record.name, int(record.admin), record.created_at),
            )
            c.execute("INSERT INTO tokens(hash, principal) VALUES (?, ?)", (token_hash, record.name))
            return True

        return await self._write(job)

    async def add_token(self, name: str, token_hash: bytes) -> bool:
        def job(c: sqlite3.Connection, w: _Writer) -> bool:
            if not c.execute("SELECT 1 FROM principals WHERE name = ?", (name,)).fetchone():
                return False
            c.execute("INSERT INTO tokens(hash, principal) VALUES (?, ?)", (token_hash, name))
            return True

        return await self._write(job)

    async def principal_by_token(self, token_hash: bytes) -> PrincipalRecord | None:
        def q(c: sqlite3.Connection) -> PrincipalRecord | None:
            row = c.execute(
                "SELECT p.name, p.admin, p.created_at FROM tokens t JOIN principals p "
                "ON p.name = t.principal WHERE t.hash = ?",
                (token_hash,),
            ).fetchone()
            return None if row is None else PrincipalRecord(name=row[0], admin=bool(row[1]), created_at=row[2])

        return await self._read(q)

    async def revoke_tokens(self, name: str, token_hash: bytes | None = None) -> int:
        def job(c: sqlite3.Connection, w: _Writer) -> int:
            if token_hash is None:
                return c.execute("DELETE FROM tokens WHERE principal = ?", (name,)).rowcount
            return c.execute("DELETE FROM tokens WHERE principal = ? AND hash = ?", (name, token_hash)).rowcount

        return await self._write(job)

    async def list_principals(self) -> list[PrincipalRecord]:
        def q(c: sqlite3.Connection) -> list[PrincipalRecord]:
            rows = c.execute("SELECT name, admin, created_at FROM principals ORDER BY name").fetchall()
            return [PrincipalRecord(name=r[0], admin=bool(r[1]), created_at=r[2]) for r in rows]

        return await self._read(q)

    # -- publications -----------------------------------------------------------------

    async def create_publication(self, record: PublicationRecord) -> bool:
        def job(c: sqlite3.Connection, w: _Writer) -> bool:
            cur = c.execute(
                "INSERT INTO publications(namespace, owner, config, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(namespace) DO NOTHING",
                (record.namespace, record.owner, _enc(record.config), record.created_at),
            )
            return cur.rowcount == 1

        return await self._write(job)

    async def update_publication(self, record: PublicationRecord) -> None:
        def job(c: sqlite3.Connection, w: _Writer) -> None:
            c.execute(
                "UPDATE publications SET owner = ?, config = ? WHERE namespace = ?",
                (record.owner, _enc(record.config), record.namespace),
            )

        await self._write(job)

    async def list_publications(
        self, after: str | None = None, limit: int | None = None
    ) -> list[PublicationRecord]:
        def q(c: sqlite3.Connection) -> list[PublicationRecord]:
            rows = c.execute(
                "SELECT namespace, owner, config, created_at FROM publications "
                "WHERE namespace > ? ORDER BY namespace LIMIT ?",
                (after or "", -1 if limit is None else limit),
            ).fetchall()
            return [
                PublicationRecord(namespace=r[0], owner=r[1], config=_dec(r[2]), created_at=r[3])
                for r in rows
            ]

        return await self._read(q)

    async def delete_publication(self, namespace: str) -> list[int]:
        def job(c: sqlite3.Connection, w: _Writer) -> list[int]:
            ids = [r[0] for r in c.execute("SELECT id FROM subscriptions WHERE namespace = ?", (namespace,))]
            c.executemany("DELETE FROM notifications WHERE subscription_id = ?", [(i,) for i in ids])
            c.executemany("DELETE FROM dead_letters WHERE subscription_id = ?", [(i,) for i in ids])
            c.executemany("DELETE FROM secrets WHERE subscription_id = ?", [(i,) for i in ids])
            c.execute("DELETE FROM subscriptions WHERE namespace = ?", (namespace,))
            c.execute("DELETE FROM publishers WHERE namespace = ?", (namespace,))
            # Keep the chain's end: the events stay, and so must the id they continue from.
            last = c.execute(
                "SELECT MAX(COALESCE((SELECT MAX(id) FROM events WHERE namespace = ?), 0), "
                "COALESCE((SELECT last_event_id FROM publications WHERE namespace = ?), 0))",
                (namespace, namespace),
            ).fetchone()[0]
            c.execute("DELETE FROM publications WHERE namespace = ?", (namespace,))
            c.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (f"last_event_id:{namespace}", last),
            )
            return ids

        return await self._write(job)

    async def add_publisher(self, namespace: str, principal: str) -> bool:
        def job(c: sqlite3.Connection, w: _Writer) -> bool:
            cur = c.execute(
                "INSERT INTO publishers(namespace, principal) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (namespace, principal),
            )
            return cur.rowcount == 1

        return await self._write(job)

    async def list_publishers(self, namespace: str | None = None) -> list[tuple[str, str]]:
        def q(c: sqlite3.Connection) -> list[tuple[str, str]]:
            if namespace is None:
                return c.execute("SELECT namespace, principal FROM publishers ORDER BY 1, 2").fetchall()
            return c.execute(
                "SELECT namespace, principal FROM publishers WHERE namespace = ? ORDER BY 2", (namespace,)
            ).fetchall()

        return await self._read(q)

    # -- subscriptions ----------------------------------------------------------------

    async def create_subscription(self, record: SubscriptionRecord) -> SubscriptionRecord:
        def job(c: sqlite3.Connection, w: _Writer) -> SubscriptionRecord:
            head = c.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
            cur = c.execute(
                "INSERT INTO subscriptions(subscriber, namespace, endpoint, mode, config, cursor, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record.subscriber, record.namespace, record.endpoint, record.mode,
                 _enc(record.config), head, record.created_at),
            )
            return SubscriptionRecord(
                id=int(cur.lastrowid or 0), subscriber=record.subscriber, namespace=record.namespace,
                endpoint=record.endpoint, mode=record.mode, config=record.config, cursor=head,
                created_at=record.created_at,
            )

        return await self._write(job)

    async def update_subscription(self, record: SubscriptionRecord) -> None:
        def job(c: sqlite3.Connection, w: _Writer) -> None:
            c.execute(
                "UPDATE subscriptions SET endpoint = ?, mode = ?, config = ? WHERE id = ?",
                (record.endpoint, record.mode, _enc(record.config), record.id),
            )

        await self._write(job)

    async def move_cursor(self, subscription_id: int, cursor: int) -> None:
        await self._write(
            lambda c, w: c.execute("UPDATE subscriptions SET cursor = ? WHERE id = ?", (cursor, subscription_id))
        )

    async def delete_subscription(self, subscription_id: int, *, keep_dead_letters: bool = False) -> None:
        def job(c: sqlite3.Connection, w: _Writer) -> None:
            c.execute("DELETE FROM notifications WHERE subscription_id = ?", (subscription_id,))
            if not keep_dead_letters:
                c.execute("DELETE FROM dead_letters WHERE subscription_id = ?", (subscription_id,))
            c.execute("DELETE FROM secrets WHERE subscription_id = ?", (subscription_id,))
            c.execute("DELETE FROM subscriptions WHERE id = ?", (subscription_id,))

        await self._write(job)

    async def list_subscriptions(
        self, namespace: str | None = None, after: int | None = None, limit: int | None = None
    ) -> list[SubscriptionRecord]:
        def q(c: sqlite3.Connection) -> list[SubscriptionRecord]:
            lim = -1 if limit is None else limit
            if namespace is None:
                rows = c.execute(
                    f"SELECT {_SUB_COLS} FROM subscriptions WHERE id > ? ORDER BY id LIMIT ?",
                    (after or 0, lim),
                ).fetchall()
            else:
                rows = c.execute(
                    f"SELECT {_SUB_COLS} FROM subscriptions WHERE namespace = ? AND id > ? "
                    "ORDER BY id LIMIT ?",
                    (namespace, after or 0, lim),
                ).fetchall()
            return [_sub(r) for r in rows]

        return await self._read(q)

    # -- signing secrets --------------------------------------------------------------

    async def add_secret(
        self, subscription_id: int, secret: str, expires_previous_at: int | None, *, created_at: int
    ) -> bool:
        def job(c: sqlite3.Connection, w: _Writer) -> bool:
            if c.execute("SELECT 1 FROM subscriptions WHERE id = ?", (subscription_id,)).fetchone() is None:
                return False
            c.execute(
                "DELETE FROM secrets WHERE subscription_id = ? AND expires_at <= ?", (subscription_id, created_at)
            )
            if expires_previous_at is not None:
                c.execute(
                    "UPDATE secrets SET expires_at = ? WHERE subscription_id = ? "
                    "AND (expires_at IS NULL OR expires_at > ?)",
                    (expires_previous_at, subscription_id, expires_previous_at),
                )
            c.execute(
                "INSERT INTO secrets(subscription_id, secret, created_at) VALUES (?, ?, ?)",
                (subscription_id, secret, created_at),
            )
            return True

        return await self._write(job)

    async def secrets(self, subscription_id: int, now: int) -> list[SubscriptionSecret]:
        def q(c: sqlite3.Connection) -> list[SubscriptionSecret]:
            return [
                SubscriptionSecret(secret=r[0], created_at=r[1], expires_at=r[2])
                for r in c.execute(
                    "SELECT secret, created_at, expires_at FROM secrets WHERE subscription_id = ? "
                    "AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC, id DESC",
                    (subscription_id, now),
                )
            ]

        return await self._read(q)

    # -- the event log ----------------------------------------------------------------

    async def append(self, events: Sequence[NewEvent], stats: Iterable[Stat] = ()) -> list[StoredEvent]:
        if self._writer is None:
            raise StoreError("store is not open")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[StoredEvent]] = loop.create_future()
        self._writer.jobs.put((_Append(events, list(stats)), fut, loop))
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
                    f"SELECT {_EVENT_COLS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
                ).fetchall()
            else:
                marks = ",".join("?" * len(namespaces))
                rows = c.execute(
                    f"SELECT {_EVENT_COLS} FROM events WHERE namespace IN ({marks}) AND seq > ? "
                    "ORDER BY seq LIMIT ?",
                    (*namespaces, seq, limit),
                ).fetchall()
            return [_event(r) for r in rows]

        return await self._read(q)

    async def read_seqs(self, seqs: Sequence[int]) -> list[StoredEvent]:
        def q(c: sqlite3.Connection) -> list[StoredEvent]:
            out: list[StoredEvent] = []
            for i in range(0, len(seqs), 500):
                chunk = seqs[i : i + 500]
                marks = ",".join("?" * len(chunk))
                out.extend(
                    _event(r)
                    for r in c.execute(f"SELECT {_EVENT_COLS} FROM events WHERE seq IN ({marks})", chunk)
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

    # -- notifications ----------------------------------------------------------------

    async def open_notifications(
        self,
        subscription_id: int,
        events: Sequence[StoredEvent],
        cursor: int,
        stats: Iterable[Stat] = (),
    ) -> list[int]:
        stats = list(stats)

        def job(c: sqlite3.Connection, w: _Writer) -> list[int]:
            cur = c.execute("UPDATE subscriptions SET cursor = ? WHERE id = ?", (cursor, subscription_id))
            if cur.rowcount == 0:
                return []
            ids = _insert_notifications(c, subscription_id, events, time.time_ns()) if events else []
            _apply_stats(c, stats)
            return ids

        return await self._write(job)

    async def settle_notifications(
        self,
        ids: Sequence[int],
        stats: Mapping[int, Sequence[Stat]] | None = None,
        sent_stats: Mapping[int, Sequence[Stat]] | None = None,
    ) -> list[int]:
        per_id, per_sent = stats or {}, sent_stats or {}

        def job(c: sqlite3.Connection, w: _Writer) -> list[int]:
            _deliveries.record_settled(c, ids, time.time_ns())
            done, unsent = _delete_notifications(c, ids)
            _apply_stats(c, (s for i in done for s in per_id.get(i, ())))
            _apply_stats(c, (s for i in unsent for s in per_sent.get(i, ())))
            return done

        return await self._write(job)

    async def mark_sent(self, ids: Sequence[int], stats: Mapping[int, Sequence[Stat]] | None = None) -> list[int]:
        per_id = stats or {}

        def job(c: sqlite3.Connection, w: _Writer) -> list[int]:
            marked: set[int] = set()
            todo = list(dict.fromkeys(ids))
            for k in range(0, len(todo), 500):
                chunk = todo[k : k + 500]
                marked.update(r[0] for r in c.execute(
                    f"UPDATE notifications SET sent = 1 WHERE sent = 0 AND id IN ({','.join('?' * len(chunk))}) "
                    "RETURNING id",
                    chunk,
                ))
            _apply_stats(c, (s for i in marked for s in per_id.get(i, ())))
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

    async def count_attempt(self, ids: Sequence[int], stats: Iterable[Stat] = ()) -> None:
        stats = list(stats)

        def job(c: sqlite3.Connection, w: _Writer) -> None:
            c.executemany("UPDATE notifications SET attempts = attempts + 1 WHERE id = ?", [(i,) for i in ids])
            _apply_stats(c, stats)

        await self._write(job)

    # -- dead letters -----------------------------------------------------------------

    async def dead_letter(self, letters: Sequence[DeadLetter], stats: Iterable[Stat] = ()) -> list[int]:
        stats = list(stats)

        def job(c: sqlite3.Connection, w: _Writer) -> list[int]:
            _deliveries.record_dead(c, letters)
            moved = []
            for d in letters:
                if c.execute("DELETE FROM notifications WHERE id = ?", (d.id,)).rowcount:
                    c.execute(
                        f"INSERT INTO dead_letters({_DL_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (d.id, d.subscription_id, d.subscriber, d.seq, d.namespace, d.event_id, d.attempts,
                         d.reason, d.dead_at),
                    )
                    moved.append(d.id)
            _apply_stats(c, stats)
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
                    f"SELECT {_DL_COLS} FROM dead_letters WHERE id > ? ORDER BY id LIMIT ?", (after or 0, lim)
                ).fetchall()
            else:
                marks = ",".join("?" * len(subscription_ids))
                ended = (
                    " OR (subscriber = ? AND subscription_id NOT IN (SELECT id FROM subscriptions))"
                    if ended_of is not None else ""
                )
                rows = c.execute(
                    f"SELECT {_DL_COLS} FROM dead_letters WHERE (subscription_id IN ({marks}){ended}) AND id > ? "
                    "ORDER BY id LIMIT ?",
                    (*subscription_ids, *([ended_of] if ended_of is not None else []), after or 0, lim),
                ).fetchall()
            return [DeadLetter(**dict(zip(_DL_FIELDS, r, strict=True))) for r in rows]

        return await self._read(q)

    async def redrive_dead_letters(self, ids: Sequence[int], now: int) -> list[PendingNotification]:
        def job(c: sqlite3.Connection, w: _Writer) -> list[PendingNotification]:
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

        def job(c: sqlite3.Connection, w: _Writer) -> list[int]:
            _deliveries.record_dropped(c, ids, time.time_ns())
            done = [i for i in ids if c.execute("DELETE FROM dead_letters WHERE id = ?", (i,)).rowcount]
            _apply_stats(c, stats)
            return done

        return await self._write(job)

    async def deliveries(self, after: int = 0, limit: int | None = None) -> list[DeliveryRecord]:
        return await self._read(lambda c: _deliveries.read_deliveries(c, after, limit))

    # -- statistics -------------------------------------------------------------------

    async def add_stats(self, stats: Iterable[Stat]) -> None:
        stats = list(stats)
        await self._write(lambda c, w: _apply_stats(c, stats))

    async def stat_keys(self, scope: str) -> list[str]:
        return await self._read(
            lambda c: [r[0] for r in c.execute("SELECT DISTINCT key FROM stats WHERE scope = ? ORDER BY key", (scope,))]
        )

    async def stats(self, scope: str, key: str) -> dict[str, int]:
        def q(c: sqlite3.Connection) -> dict[str, int]:
            return dict(c.execute("SELECT name, value FROM stats WHERE scope = ? AND key = ?", (scope, key)))

        return await self._read(q)

