"""The event log in the PostgreSQL store, with group commit.

Appends queue to one task per store, which takes every append waiting and writes them
with one call of ``tidings_append`` (``_pg_functions``): the ``log_head`` row and the
``namespace_heads`` rows of the namespaces written (in name order) are updated first,
which both numbers the events and makes concurrent writers (other processes on the same
database) wait their turn, so ids never have gaps and ``seq`` order is commit order
(``_pg_migrations``). Being one statement, the call holds those locks only while the
server runs it, never while this process is stopped or cut off. If the group's call
fails, each append is tried alone, so one bad call fails alone. Two groups may be in
flight at once, on two connections, and up to four while the database is slow to
answer, so that a database a network away costs a publish one round trip; their answers
are given in the order they were sent (``_pg_order``).

A publish forwarded by another broadcaster carries a relay token (``forwarding``); it is
stored in the same statement, so the sender can learn afterwards whether the events were
stored, and withdraw the token so that they never will be (:meth:`withdraw_relay`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence

import asyncpg

from ..errors import KeyTaken, StoreError, StoreUnavailable
from ._base import EventStore
from ._pg_db import EVENT_COLS, PgAccess, event_row, stat_arrays, stat_rows
from ._pg_keyed_events import EXPIRE_KEYS, FIND_KEYS, KEY_INDEX
from ._pg_order import Sequencer
from ._records import KeyRecord, NewEvent, Stat, StoredEvent

__all__ = ["PgEventStore"]

log = logging.getLogger("tidings.store")

_APPEND = (
    "SELECT o_seq, o_id, o_ts FROM tidings_append($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::bytea[], "
    "$6::text[], $7::integer[], $8, $9::text[], $10::text[], $11::text[], $12::bigint[], "
    "$13::text[], $14::bytea[], $15::bigint[])"
)
_APPEND_CLEARING = _APPEND[:-1] + ", p_clear => true)"
"""The same, giving up first the append's keys whose window has passed (``_pg_keyed_events``)."""


class _Append:
    __slots__ = ("events", "fut", "stats", "token")

    def __init__(
        self, events: Sequence[NewEvent], stats: list[tuple[str, str, str, int]],
        fut: asyncio.Future[list[StoredEvent]], token: str | None = None,
    ) -> None:
        self.events = events
        self.stats = stats
        self.fut = fut
        self.token = token


class PgEventStore(PgAccess, EventStore):
    """``PostgresStore`` starts :meth:`_appender` on open and cancels it on close."""

    _appends: asyncio.Queue[_Append] | None = None
    _max_batch: int = 512
    _in_flight: int = 2
    """Groups in flight at once while the database answers quickly."""
    _max_in_flight: int = 4
    """... and while it answers slowly: a group out ``_slow_s`` lets one more start."""
    _slow_s: float = 0.005

    async def append(self, events: Sequence[NewEvent], stats: Iterable[Stat] = ()) -> list[StoredEvent]:
        return await self.append_relayed(events, stats, None)

    async def append_relayed(
        self, events: Sequence[NewEvent], stats: Iterable[Stat], token: str | None
    ) -> list[StoredEvent]:
        """:meth:`append`, recording ``token`` with the events (a forwarded publish):
        refused with :class:`StoreError` if the token was withdrawn or used already."""
        self._the_pool()
        rows = stat_rows(stats)  # a bad increment fails this call before anything is queued
        if self._appends is None:
            raise StoreError("store is not open")
        fut: asyncio.Future[list[StoredEvent]] = asyncio.get_running_loop().create_future()
        self._appends.put_nowait(_Append(events, rows, fut, token))
        return await fut

    async def withdraw_relay(self, token: str) -> list[StoredEvent] | None:
        """Make sure a forwarded publish is stored by nobody from now on: None if it was
        not stored (now it never will be), else the events it was stored as."""
        row = await self._call("fetchrow", "SELECT o_first, o_n FROM tidings_withdraw_relay($1)", token)
        if row is None or row[0] is None:
            return None
        first, n = int(row[0]), int(row[1])
        rows = await self._fetch(
            f"SELECT {EVENT_COLS} FROM events WHERE seq >= $1 AND seq < $2 ORDER BY seq", first, first + n
        )
        return [event_row(r) for r in rows]

    async def _appender(self) -> None:
        queue = self._appends
        if queue is None:
            return
        # Groups in flight at once, each on a connection of its own: the next group is sent
        # while the previous one's answer travels back (``_pg_order``). Two at once while
        # the database answers quickly: more would split the appends into more, smaller
        # transactions for nothing. Once the oldest group has been out ``_slow_s`` (a
        # database a network away), one more may start, up to ``_max_in_flight``: a publish
        # then waits for its own round trip, not for a slot first (BENCHMARKS.md,
        # "PostgreSQL a network away").
        order = Sequencer()
        running: dict[asyncio.Task[None], list[_Append]] = {}
        sent: dict[asyncio.Task[None], float] = {}
        freed = asyncio.Event()

        def done(t: asyncio.Task[None]) -> None:
            running.pop(t, None)
            sent.pop(t, None)
            freed.set()

        try:
            while True:
                while len(running) >= self._in_flight:
                    wait: float | None = None
                    if len(running) < self._max_in_flight:
                        age = time.monotonic() - min(sent.values())
                        if age >= self._slow_s:
                            break
                        wait = self._slow_s - age
                    freed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(freed.wait(), wait)
                batch = [await queue.get()]
                while len(batch) < self._max_batch and not queue.empty():
                    batch.append(queue.get_nowait())
                task = asyncio.create_task(self._commit(batch, order, order.start()))
                running[task] = batch
                sent[task] = time.monotonic()
                task.add_done_callback(done)
        except asyncio.CancelledError:
            stopped = list(running.items())
            for t, _ in stopped:
                t.cancel()
            await asyncio.gather(*(t for t, _ in stopped), return_exceptions=True)
            for settle in order.abandon():
                settle()
            for _, batch in stopped:
                for a in batch:
                    _settle(a, StoreError("store closed before the append was stored"))
            raise

    async def _commit(self, batch: list[_Append], order: Sequencer, ticket: int) -> None:
        outcome: list[list[StoredEvent] | BaseException]
        try:
            outcome = list(await self._write(batch))
        except asyncio.CancelledError:
            order.finish(ticket, lambda: None)
            raise
        except Exception as e:
            if len(batch) == 1 or isinstance(e, StoreUnavailable):
                # A database that cannot be reached fails each append alone as it failed the
                # group (one timeout per append, in a row, while it is paused): all at once.
                outcome = [e] * len(batch)
            else:
                log.warning("a group of %d appends failed (%s); trying each alone", len(batch), e)
                outcome = []
                for a in batch:
                    try:
                        outcome.append((await self._write([a]))[0])
                    except asyncio.CancelledError:
                        order.finish(ticket, lambda: None)
                        raise
                    except Exception as e1:
                        outcome.append(e1)
        def settle() -> None:
            for a, r in zip(batch, outcome, strict=True):
                _settle(a, r)

        order.finish(ticket, settle)

    async def _stop_appender(self, task: asyncio.Task[None] | None) -> None:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        queue, self._appends = self._appends, None
        while queue is not None and not queue.empty():
            a = queue.get_nowait()
            if not a.fut.done():
                a.fut.set_exception(StoreError("store closed before the append was stored"))

    async def read_after(
        self, seq: int, namespaces: Sequence[str] | None = None, limit: int = 1000
    ) -> list[StoredEvent]:
        if namespaces is None:
            rows = await self._fetch(
                f"SELECT {EVENT_COLS} FROM events WHERE seq > $1 ORDER BY seq LIMIT $2", seq, _lim(limit)
            )
        else:
            rows = await self._fetch(
                f"SELECT {EVENT_COLS} FROM events WHERE namespace = ANY($1::text[]) AND seq > $2 "
                "ORDER BY seq LIMIT $3",
                list(namespaces), seq, _lim(limit),
            )
        return [event_row(r) for r in rows]

    async def read_seqs(self, seqs: Sequence[int]) -> list[StoredEvent]:
        rows = await self._fetch(
            f"SELECT {EVENT_COLS} FROM events WHERE seq = ANY($1::bigint[]) ORDER BY seq", list(set(seqs))
        )
        return [event_row(r) for r in rows]

    async def count_events(self, namespace: str, upto: int | None = None) -> int:
        if upto is None:
            return int(await self._fetchval("SELECT COUNT(*) FROM events WHERE namespace = $1", namespace))
        return int(await self._fetchval(
            "SELECT COUNT(*) FROM events WHERE namespace = $1 AND seq <= $2", namespace, upto
        ))

    async def head(self) -> int:
        return int(await self._fetchval("SELECT seq FROM log_head"))

    async def find_keys(self, keys: Sequence[tuple[str, str]], now: int) -> dict[tuple[str, str], KeyRecord]:
        rows = await self._fetch(FIND_KEYS, [k[0] for k in keys], [k[1] for k in keys], now)
        return {(r[0], r[1]): KeyRecord(r[0], r[1], bytes(r[2]), r[3], r[4], r[5]) for r in rows}

    async def expire_keys(self, now: int, limit: int = 10_000) -> int:
        return int(await self._call("fetchval", EXPIRE_KEYS, now, limit))

    async def trim_events(self, namespace: str, before: int) -> int:
        # The age the caller keeps, measured again on the database's clock when the
        # delete runs: a member whose clock is ahead (or not yet measured) trims nothing
        # early, and every member may run the same round at once (docs/semantics.md).
        keep_ns = max(0, self.clock.now_ns() - before)

        async def job(c: asyncpg.Connection) -> int:
            # The log's last event stays whatever its age, as in the other stores.
            status = await c.execute(
                "DELETE FROM events e WHERE e.namespace = $1 AND e.timestamp < LEAST($2, "
                "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint - $3) "
                "AND e.seq < (SELECT MAX(seq) FROM events) "
                "AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.seq = e.seq) "
                "AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.seq = e.seq)",
                namespace, before, keep_ns,
            )
            return int(status.split()[-1])

        return await self._tx(job)


    async def _write(self, group: list[_Append]) -> list[list[StoredEvent]]:
        """Number and insert the group's events, and apply its counters: one statement."""
        cols: tuple[list[object], ...] = ([], [], [], [], [])
        keyed = False
        for a in group:
            for e in a.events:
                cols[0].append(e.namespace)
                cols[1].append(e.timestamp)
                cols[2].append(e.source)
                cols[3].append(e.data)
                cols[4].append(e.headers)
                keyed = keyed or e.key is not None
        # Only a group with keys sends their arrays: an unkeyed publish costs nothing more.
        keys: tuple[list[object] | None, ...] = (None, None, None)
        if keyed:
            events = [e for a in group for e in a.events]
            keys = ([e.key for e in events], [e.fingerprint for e in events], [e.key_expires for e in events])
        tokens = [a.token for a in group] if any(a.token for a in group) else None
        counts = [len(a.events) for a in group] if tokens is not None else None
        stats: dict[tuple[str, str, str], int] = {}
        for a in group:
            for scope, key, name, delta in a.stats:
                stats[(scope, key, name)] = stats.get((scope, key, name), 0) + delta
        rows = sorted((*k, v) for k, v in stats.items() if v)
        args = (*cols, tokens, counts, self._origin, *stat_arrays(rows), *keys)
        if keyed:
            numbered = await self._retried(lambda c: _append_keyed(c, args))
        else:
            numbered = await self._call("fetch", _APPEND, *args)
        outs: list[list[StoredEvent]] = []
        k = 0
        for a in group:
            out = []
            for e in a.events:
                seq, eid, ts = numbered[k][0], numbered[k][1], numbered[k][2]
                k += 1
                out.append(StoredEvent(
                    seq=seq, namespace=e.namespace, id=eid, prev_id=eid - 1 or None, timestamp=ts,
                    source=e.source, data=e.data, headers=e.headers,
                ))
            outs.append(out)
        return outs


async def _append_keyed(c: asyncpg.Connection, args: tuple[object, ...]) -> list[asyncpg.Record]:
    """``tidings_append`` of a group with keys. A key held by a row (the index says which
    rule: ``_pg_keyed_events``) is either live, or past its window and not yet cleared by
    the reclaimer: the append runs once more, giving up the expired keys in the same
    statement; a key still held then is taken (live, twice in the group, or appended by
    another member at once)."""
    for sql in (_APPEND, _APPEND_CLEARING):
        try:
            return await c.fetch(sql, *args)
        except asyncpg.UniqueViolationError as e:
            if e.constraint_name != KEY_INDEX:
                raise
    raise KeyTaken("an idempotency key of this append is taken")


def _settle(a: _Append, result: list[StoredEvent] | BaseException) -> None:
    if a.fut.done():
        return
    if isinstance(result, BaseException):
        a.fut.set_exception(result)
    else:
        a.fut.set_result(result)


def _lim(limit: int) -> int:
    return 2**62 if limit < 0 else limit
