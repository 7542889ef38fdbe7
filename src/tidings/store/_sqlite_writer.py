"""The SQLite store's single writing connection and its group-commit loop.

One writer thread owns the only writing connection. Every write is a closure queued to
it; the thread takes all queued closures at once, runs each inside its own SAVEPOINT of
one transaction, commits with ``synchronous=FULL`` and only then resolves the callers'
futures. Concurrent publishes therefore share one fsync (group commit) and are answered
only when durable; a closure that fails rolls back to its savepoint and fails alone.

A batch made only of jobs marked :func:`lazy` (a worker opening notifications for events
it read from the log, settling notifications) commits with ``synchronous=NORMAL``: its
WAL frames reach the file, so a process crash keeps them, but they are fsynced only by
the next durable commit. What a power loss can take from such a batch is bookkeeping,
and those events are then pushed again, as at-least-once delivery allows. An event
pushed to a trusted subscriber so costs one fsync, not two or three
(docs/benchmarks/history/2026-11-25-04-live-latency-worker-caught-up.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from ..core.clock import later
from ..errors import KeysFull, KeyTaken, StoreError
from ._disk import cause
from ._records import AppendRouter, NewEvent, Route, Stat, StoredEvent
from ._sqlite_db import EVENT_COLS, apply_stats, insert_notifications, insert_rows
from ._sqlite_keys import KEY_COLS, KeyIndex, record_span

__all__ = ["Append", "Writer", "lazy"]

log = logging.getLogger("tidings.store")
_OPENED_MAX = 4096


def lazy(job: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a writer job whose loss in a power failure only repeats work (see above)."""
    job._tidings_lazy = True  # type: ignore[attr-defined]
    return job


def _is_lazy(job: Any) -> bool:
    return getattr(job, "_tidings_lazy", False)


class Writer(threading.Thread):
    """The single writing connection and its group-commit loop."""

    def __init__(
        self, path: str, max_batch: int, router: AppendRouter | None, setup: Callable[[sqlite3.Connection], None],
        *, fsync: bool = True, now_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        super().__init__(name="tidings-sqlite-writer", daemon=True)
        self.now_ns = now_ns
        """The store's clock (``core.clock``): the time notifications opened at append carry."""
        self._path = path
        self._fsync = fsync
        """False: durable commits too are left to the operating system (``synchronous=NORMAL``):
        a process crash keeps them, a power failure may take the last ones back."""
        self._max_batch = max_batch
        self._setup = setup
        """Creates the tables and migrates them, on the writing connection before any job."""
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
        # Per-namespace last event timestamp, for ``clock.later``: a value of a failed
        # transaction left here is a time the clock gave, so it only holds later ones
        # at a time already reached.
        self.last_ts: dict[str, int | None] = {}
        # The log's highest seq, likewise: ``seq`` as committed (None: read it from the
        # table on next use), ``staged_seq`` within the transaction in progress.
        self.seq: int | None = None
        self.staged_seq = 0
        # Each subscription's cursor as its last open_notifications left it, for routing
        # at append (``AppendRouter.plan``); ``staged_opened`` within the transaction.
        self.opened: dict[int, int] = {}
        self.staged_opened: dict[int, int] = {}
        self._full = fsync
        """Whether the connection is at ``synchronous=FULL`` (else NORMAL: lazy batches, or no fsync)."""
        self._failing: float | None = None
        """Since when commits fail (None: they do not), for the log's one line per episode."""
        self.commits = {"durable": 0, "lazy": 0}
        """Transactions committed each way, for tests and the profile."""
        self.keys = KeyIndex()
        """Where each live idempotency key's row is (``_sqlite_keys``)."""

    def run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=True)
            conn.execute("PRAGMA busy_timeout=10000")
            # Pages freed by trimming go back to the filesystem (the archive job runs
            # incremental_vacuum). Takes effect only on a new file, before any table.
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL" if self._fsync else "PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._setup(conn)
            self.keys.load(conn)
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
        self.staged_opened = {}
        self.keys.abort()
        durable = not all(_is_lazy(job) for job, _, _ in batch)
        try:
            full = durable and self._fsync
            if full != self._full:  # between transactions, as SQLite requires
                conn.execute("PRAGMA synchronous=FULL" if full else "PRAGMA synchronous=NORMAL")
                self._full = full
            conn.execute("BEGIN IMMEDIATE")
            alone = len(batch) == 1
            i = 0
            while i < len(batch):
                job = batch[i][0]
                if isinstance(job, Append):
                    # Consecutive appends run as one statement: this is where group commit
                    # pays, and a failure falls back to running them one by one (a group
                    # of one has failed alone already).
                    j = i
                    while j < len(batch) and isinstance(batch[j][0], Append):
                        j += 1
                    group = [b[0] for b in batch[i:j]]
                    ok, res = self._run(conn, functools.partial(_append_group, group=group), alone=alone)
                    if ok:
                        results.extend((True, r) for r in res)
                    elif len(group) == 1:
                        results.append((False, res))
                    else:
                        results.extend(self._run(conn, functools.partial(_append_one, one=a)) for a in group)
                    i = j
                else:
                    results.append(self._run(conn, job, alone=alone))
                    i += 1
            router = self.router
            appended = [
                e for (job, _, _), (good, value) in zip(batch, results, strict=True)
                if good and isinstance(job, Append) for e in value
            ] if router is not None else []
            routes = (
                _route(conn, router, appended, self._opened_now(), self.now_ns()) if router is not None and appended
                else []
            )
            conn.execute("COMMIT")
            self.commits["durable" if durable else "lazy"] += 1
        except Exception as e:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            why = cause(self._path, e)
            failure = StoreError(f"commit failed: {why}")
            results = [(False, failure)] * len(batch)
            self.seq = None  # read it again from the table
            self.keys.abort()
            if self._failing is None:  # once per episode, with its cause: not once per commit
                log.error("the store %s cannot commit: %s; publishes are refused until it can", self._path, why)
                self._failing = time.monotonic()
        else:
            if self._failing is not None:
                log.warning("the store %s commits again after %.1f s of failed commits", self._path,
                            time.monotonic() - self._failing)
                self._failing = None
            self.last_ids.update(self.staged)
            self.keys.commit()
            if self.staged_opened:
                if len(self.opened) > _OPENED_MAX:
                    # Each entry matters only until its worker resumes (its scan then covers
                    # it), so forgetting all at once costs at most one unrouted event per
                    # subscription; it bounds the memory of deleted subscriptions' entries.
                    self.opened.clear()
                self.opened.update(self.staged_opened)
            if self.seq is not None:
                self.seq = self.staged_seq
            if router is not None and appended:
                # Before any caller hears of its events: the router hands them on first.
                try:
                    router.committed(appended, routes)
                except Exception:  # never the writer's end; the events are stored either way
                    log.exception("the router failed after a commit")
        for (_job, fut, loop), (good, value) in zip(batch, results, strict=True):
            loop.call_soon_threadsafe(settle, fut, good, value)

    def _opened_now(self) -> dict[int, int]:
        if not self.staged_opened:
            return self.opened
        return {**self.opened, **self.staged_opened}

    def _run(
        self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection, Writer], Any], *, alone: bool = False,
    ) -> tuple[bool, Any]:
        """Run one job inside its own savepoint; a failure undoes only that job. A job
        ``alone`` in its transaction needs no savepoint: a failure undoes the transaction
        and begins another, as empty. (Two statements fewer, and two hand-overs of the
        interpreter lock, for each commit of one job: the common case at low rates.)"""
        if not alone:
            conn.execute("SAVEPOINT job")
        staged_before, seq_before, opened_before = dict(self.staged), self.staged_seq, dict(self.staged_opened)
        keys_before = self.keys.snapshot()
        committed_seq = self.seq
        try:
            res = fn(conn, self)
        except Exception as e:
            if alone:
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
            else:
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
            self.staged, self.staged_seq, self.staged_opened = staged_before, seq_before, opened_before
            self.keys.restore(keys_before)
            # A job that read the log's highest seq (the first append after a start or a
            # failed commit) staged it too: both go back, and the next job reads it again.
            self.seq = committed_seq
            return False, e
        if not alone:
            conn.execute("RELEASE job")
        return True, res


def _route(
    conn: sqlite3.Connection, router: AppendRouter, events: list[StoredEvent], opened: dict[int, int], now: int
) -> list[Route]:
    """Open the notifications ``router`` plans for ``events``, in their transaction.

    A failure here must not fail the publish: the routes are undone and the
    subscriptions' workers open those notifications themselves, as without a router."""
    try:
        routes = router.plan(events, opened)
    except Exception:
        log.exception("routing %d event(s) at append failed; their workers open them instead", len(events))
        return []
    if not any(r.events and r.record for r in routes):
        return routes  # nothing to write (pushed first, recorded once confirmed): no savepoint
    conn.execute("SAVEPOINT route")
    try:
        for r in routes:
            if not r.events or not r.record:
                continue
            moved = conn.execute("UPDATE subscriptions SET cursor = ? WHERE id = ?", (r.cursor, r.subscription_id))
            if moved.rowcount == 0:  # deleted meanwhile
                r.events = []
                continue
            r.ids = insert_notifications(conn, r.subscription_id, r.events, now)
            apply_stats(conn, r.stats)
    except Exception:
        log.exception("routing %d event(s) at append failed; their workers open them instead", len(events))
        conn.execute("ROLLBACK TO route")
        conn.execute("RELEASE route")
        return []
    conn.execute("RELEASE route")
    return routes


class Append:
    __slots__ = ("events", "stats")

    def __init__(self, events: Sequence[NewEvent], stats: list[Stat]) -> None:
        self.events = events
        self.stats = stats


_SEQ, _NS_KEY, _EXPIRES = itemgetter(0), itemgetter(1, 8), itemgetter(10)
"""Of a keyed row (``_append_many``): its seq, its (namespace, key), its key's expiry."""


def _append_group(c: sqlite3.Connection, w: Writer, *, group: list[Append]) -> list[list[StoredEvent]]:
    return _append_many(c, w, group)


def _append_one(c: sqlite3.Connection, w: Writer, *, one: Append) -> list[StoredEvent]:
    return _append_many(c, w, [one])[0]


def _append_many(c: sqlite3.Connection, w: Writer, group: list[Append]) -> list[list[StoredEvent]]:
    if w.seq is None:
        w.seq = w.staged_seq = c.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
    seq = w.staged_seq
    last = w.staged
    touched: dict[str, int] = {}
    outs: list[list[StoredEvent]] = []
    rows = []
    keyed = []
    seen: set[tuple[str, str]] = set()
    recheck: list[tuple[int, str, str]] = []
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
            if ns in w.last_ts:
                ts = later(e.timestamp, w.last_ts[ns])
            else:
                row = c.execute(
                    "SELECT timestamp FROM events WHERE namespace = ? ORDER BY id DESC LIMIT 1", (ns,)
                ).fetchone()
                ts = later(e.timestamp, None if row is None else row[0])
            w.last_ts[ns] = ts
            s = StoredEvent(
                seq=seq, namespace=ns, id=eid, prev_id=prev or None, timestamp=ts,
                source=e.source, data=e.data, headers=e.headers,
            )
            out.append(s)
            # Blobs are bound as bytearrays: the sqlite3 module binds bytes (and None) only
            # after asking its adapter protocol, whose failed attribute look-ups cost about
            # 0.5 µs per value, more than the copy (BENCHMARKS.md, "Binding blobs").
            data, headers = bytearray(e.data), bytearray(e.headers)
            if e.key is None:
                rows.append((seq, ns, eid, s.prev_id, ts, e.source, data, headers))
            else:
                keyed.append((seq, ns, eid, s.prev_id, ts, e.source, data, headers,
                              e.key, bytearray(e.fingerprint), e.key_expires))
        outs.append(out)
    # Each key is staged in the writer's index; claimed all at once (loops in C) unless one
    # of them needs a look at the rows: then one by one.
    kseqs = list(map(_SEQ, keyed))
    if keyed and not w.keys.claim_all(list(map(_NS_KEY, keyed)), kseqs):
        # Each key's window is judged at its event's own time.
        ats = [e.timestamp for a in group for e in a.events if e.key is not None]
        for r, at in zip(keyed, ats, strict=True):
            # A key live in a row of the log, or twice in this append: the append fails
            # whole, and the publish path answers the repeats (``KeyTaken``).
            seq_, ns_, key_ = r[0], r[1], r[8]
            k = (ns_, key_)
            if k in seen:
                raise KeyTaken(f"the idempotency key {key_!r} is taken")
            seen.add(k)
            if not w.keys.claim(k, seq_):
                if w.keys.taken(c, ns_, key_, at):
                    raise KeyTaken(f"the idempotency key {key_!r} is taken")
                recheck.append((seq_, ns_, key_))
    insert_rows(c, f"INSERT INTO events({EVENT_COLS}) VALUES ", "(?, ?, ?, ?, ?, ?, ?, ?)", rows)
    if keyed:
        if len(w.keys) > w.keys.limit:  # this append's keys are in it already: undone with the job
            raise KeysFull(f"the store keeps {w.keys.limit:,} live idempotency keys at most; "
                           "nothing was stored: retry when older keys have expired")
        insert_rows(c, f"INSERT INTO events({EVENT_COLS}, {KEY_COLS}) VALUES ",
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", keyed)
        record_span(c, kseqs, list(map(_EXPIRES, keyed)))
        for seq_, ns_, key_ in recheck:  # after the rows: an entry may name one of them
            w.keys.add(c, ns_, key_, seq_)
    c.executemany(
        "UPDATE publications SET last_event_id = ? WHERE namespace = ?", [(v, ns) for ns, v in touched.items()]
    )
    apply_stats(c, (s for a in group for s in a.stats))
    w.staged_seq = seq
    return outs


def settle(fut: asyncio.Future[Any], good: bool, value: Any) -> None:
    if fut.done():
        return
    if good:
        fut.set_result(value)
    else:
        fut.set_exception(value)
