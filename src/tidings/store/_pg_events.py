"""The event log in the PostgreSQL store, with group commit.

Appends queue to one task per store, which takes every append waiting and writes them
with one call of ``tidings_append`` (``_pg_functions``): the ``log_head`` row and the
``namespace_heads`` rows of the namespaces written (in name order) are updated first,
which both numbers the events and makes concurrent writers (other processes on the same
database) wait their turn, so ids never have gaps and ``seq`` order is commit order
(``_pg_migrations``). Being one statement, the call holds those locks only while the
server runs it, never while this process is stopped or cut off. If the group's call
fails, each append is tried alone, so one bad call fails alone.

A publish forwarded by another broadcaster carries a relay token (``forwarding``); it is
stored in the same statement, so the sender can learn afterwards whether the events were
stored, and withdraw the token so that they never will be (:meth:`withdraw_relay`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence

import asyncpg

from ..errors import StoreError
from ._base import EventStore
from ._pg_db import EVENT_COLS, PgAccess, event_row, stat_arrays, stat_rows
from ._records import NewEvent, Stat, StoredEvent

__all__ = ["PgEventStore"]

log = logging.getLogger("tidings.store")

_APPEND = (
    "SELECT o_seq, o_id FROM tidings_append($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::bytea[], "
    "$6::text[], $7::integer[], $8, $9::text[], $10::text[], $11::text[], $12::bigint[])"
)


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
        while True:
            batch = [await queue.get()]
            while len(batch) < self._max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            try:
                await self._commit(batch)
            except asyncio.CancelledError:
                for a in batch:
                    if not a.fut.done():
                        a.fut.set_exception(StoreError("store closed before the append was stored"))
                raise

    async def _commit(self, batch: list[_Append]) -> None:
        try:
            results = await self._write(batch)
        except Exception as e:
            if len(batch) == 1:
                _settle(batch[0], e)
                return
            log.warning("a group of %d appends failed (%s); trying each alone", len(batch), e)
            for a in batch:
                try:
                    _settle(a, (await self._write([a]))[0])
                except Exception as e1:
                    _settle(a, e1)
            return
        for a, r in zip(batch, results, strict=True):
            _settle(a, r)

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

    async def trim_events(self, namespace: str, before: int) -> int:
        async def job(c: asyncpg.Connection) -> int:
            # The log's last event stays whatever its age, as in the other stores.
            status = await c.execute(
                "DELETE FROM events e WHERE e.namespace = $1 AND e.timestamp < $2 "
                "AND e.seq < (SELECT MAX(seq) FROM events) "
                "AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.seq = e.seq) "
                "AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.seq = e.seq)",
                namespace, before,
            )
            return int(status.split()[-1])

        return await self._tx(job)


    async def _write(self, group: list[_Append]) -> list[list[StoredEvent]]:
        """Number and insert the group's events, and apply its counters: one statement."""
        cols: tuple[list[object], ...] = ([], [], [], [], [])
        for a in group:
            for e in a.events:
                cols[0].append(e.namespace)
                cols[1].append(e.timestamp)
                cols[2].append(e.source)
                cols[3].append(e.data)
                cols[4].append(e.headers)
        tokens = [a.token for a in group] if any(a.token for a in group) else None
        counts = [len(a.events) for a in group] if tokens is not None else None
        stats: dict[tuple[str, str, str], int] = {}
        for a in group:
            for scope, key, name, delta in a.stats:
                stats[(scope, key, name)] = stats.get((scope, key, name), 0) + delta
        rows = sorted((*k, v) for k, v in stats.items() if v)
        numbered = await self._call("fetch", _APPEND, *cols, tokens, counts, self._origin, *stat_arrays(rows))
        outs: list[list[StoredEvent]] = []
        k = 0
        for a in group:
            out = []
            for e in a.events:
                seq, eid = numbered[k][0], numbered[k][1]
                k += 1
                out.append(StoredEvent(
                    seq=seq, namespace=e.namespace, id=eid, prev_id=eid - 1 or None, timestamp=e.timestamp,
                    source=e.source, data=e.data, headers=e.headers,
                ))
            outs.append(out)
        return outs


def _settle(a: _Append, result: list[StoredEvent] | BaseException) -> None:
    if a.fut.done():
        return
    if isinstance(result, BaseException):
        a.fut.set_exception(result)
    else:
        a.fut.set_result(result)


def _lim(limit: int) -> int:
    return 2**62 if limit < 0 else limit
