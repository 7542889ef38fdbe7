"""The event log in the PostgreSQL store, with group commit.

Appends queue to one task per store, which takes every append waiting and writes them
in one transaction: the ``log_head`` row and the ``namespace_heads`` rows of the
namespaces written (in name order) are updated first, which both numbers the events
and makes concurrent writers (other processes on the same database) wait their turn,
so ids never have gaps and ``seq`` order is commit order (``_pg_migrations``). If the
group's transaction fails, each append is tried alone, so one bad call fails alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

import asyncpg

from ..errors import StoreError
from ._base import EventStore
from ._cluster import CHANGE_LOG
from ._pg_db import EVENT_COLS, PgAccess, apply_stats, event_row, stat_rows
from ._records import NewEvent, Stat, StoredEvent

__all__ = ["PgEventStore"]

log = logging.getLogger("tidings.store")

_INSERT = (
    f"INSERT INTO events({EVENT_COLS}) SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], "
    "$4::bigint[], $5::bigint[], $6::text[], $7::bytea[], $8::bytea[])"
)


class _Append:
    __slots__ = ("events", "fut", "stats")

    def __init__(
        self, events: Sequence[NewEvent], stats: list[tuple[str, str, str, int]], fut: asyncio.Future[list[StoredEvent]]
    ) -> None:
        self.events = events
        self.stats = stats
        self.fut = fut


class PgEventStore(PgAccess, EventStore):
    """``PostgresStore`` starts :meth:`_appender` on open and cancels it on close."""

    _appends: asyncio.Queue[_Append] | None = None
    _max_batch: int = 512

    async def append(self, events: Sequence[NewEvent], stats: Iterable[Stat] = ()) -> list[StoredEvent]:
        self._the_pool()
        rows = stat_rows(stats)  # a bad increment fails this call before anything is queued
        if self._appends is None:
            raise StoreError("store is not open")
        fut: asyncio.Future[list[StoredEvent]] = asyncio.get_running_loop().create_future()
        self._appends.put_nowait(_Append(events, rows, fut))
        return await fut

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
            results = await self._tx(lambda c: _write(c, batch, self._signal))
        except Exception as e:
            if len(batch) == 1:
                _settle(batch[0], e)
                return
            log.warning("a group of %d appends failed (%s); trying each alone", len(batch), e)
            for a in batch:
                try:
                    _settle(a, (await self._tx(lambda c, a=a: _write(c, [a], self._signal)))[0])  # type: ignore[misc]
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


async def _write(
    c: asyncpg.Connection, group: list[_Append], signal: Callable[[asyncpg.Connection, str, str], Awaitable[None]]
) -> list[list[StoredEvent]]:
    """Number and insert the group's events, and apply its counters, in ``c``'s transaction."""
    counts: dict[str, int] = {}
    stats: dict[tuple[str, str, str], int] = {}
    for a in group:
        for e in a.events:
            counts[e.namespace] = counts.get(e.namespace, 0) + 1
        for scope, key, name, delta in a.stats:
            stats[(scope, key, name)] = stats.get((scope, key, name), 0) + delta
    total = sum(counts.values())
    outs: list[list[StoredEvent]] = []
    if total:
        head = await c.fetchval("UPDATE log_head SET seq = seq + $1 RETURNING seq", total)
        names = sorted(counts)
        heads = await c.fetch(
            "INSERT INTO namespace_heads(namespace, last_id) SELECT * FROM unnest($1::text[], $2::bigint[]) "
            "ON CONFLICT (namespace) DO UPDATE SET last_id = namespace_heads.last_id + excluded.last_id "
            "RETURNING namespace, last_id",
            names, [counts[n] for n in names],
        )
        last = {r[0]: r[1] - counts[r[0]] for r in heads}  # each namespace's id before this group
        seq = head - total
        cols: list[list[object]] = [[], [], [], [], [], [], [], []]
        for a in group:
            out = []
            for e in a.events:
                seq += 1
                prev = last[e.namespace]
                last[e.namespace] = prev + 1
                s = StoredEvent(
                    seq=seq, namespace=e.namespace, id=prev + 1, prev_id=prev or None, timestamp=e.timestamp,
                    source=e.source, data=e.data, headers=e.headers,
                )
                out.append(s)
                for col, v in zip(cols, (seq, s.namespace, s.id, s.prev_id, s.timestamp, s.source, s.data,
                                         s.headers), strict=True):
                    col.append(v)
            outs.append(out)
        await c.execute(_INSERT, *cols)
        await signal(c, CHANGE_LOG, str(head))
    else:
        outs = [[] for _ in group]
    rows = sorted((*k, v) for k, v in stats.items() if v)
    await apply_stats(c, rows)
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
