"""What the PostgreSQL store's concern modules share: access to the pool, and row helpers.

Every write another broadcaster may wait on is one statement, a call of a server-side
function (``_pg_functions``), sent outside any client transaction (:meth:`PgAccess._call`):
a process that stops between two of its round trips then holds no lock. The writes
operators make (registry, schemas, principals) are client transactions
(:meth:`PgAccess._tx`), bounded by the session's ``idle_in_transaction_session_timeout``.
Either is run again from the start, a few times, when it loses a lock race (a deadlock,
or a serialisation failure), so callers never see those. A database that cannot be
reached (restarting, failing over, cut off, or a standby that takes no writes) is
:class:`tidings.errors.StoreUnavailable`; a write refused by its fence is
:class:`tidings.errors.LeaseLost`; any other database error is
:class:`tidings.errors.StoreError` and leaves nothing behind.

Counter rows (``stats``) are always upserted in one statement per transaction, sorted
by key, so two transactions touching the same counters take their locks in the same
order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import asyncpg
import msgspec

from ..errors import KeyTaken, LeaseLost, StoreError, StoreUnavailable
from ._cluster import Fence
from ._pg_functions import FENCED, KEY_TAKEN
from ._records import Stat, StoredEvent, SubscriptionRecord

__all__ = [
    "CAUGHT",
    "DL_COLS",
    "DL_FIELDS",
    "EVENT_COLS",
    "SUB_COLS",
    "PgAccess",
    "apply_stats",
    "dec",
    "enc",
    "event_row",
    "fence_args",
    "lock_quota",
    "stat_arrays",
    "stat_rows",
    "sub_row",
]

T = TypeVar("T")

enc = msgspec.json.encode
dec = msgspec.json.decode

EVENT_COLS = "seq, namespace, id, prev_id, timestamp, source, data, headers"
SUB_COLS = "id, subscriber, namespace, endpoint, mode, config, cursor, created_at"
DL_FIELDS = ("id", "subscription_id", "subscriber", "seq", "namespace", "event_id", "attempts", "reason", "dead_at")
DL_COLS = ", ".join(DL_FIELDS)

_RETRIED = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)
_ATTEMPTS = 8
# SQLSTATE classes that say the database cannot serve now, rather than that it refused
# this write: connection exceptions, insufficient resources, operator intervention
# (shutdown, "the database system is starting up"), and a read-only transaction (a
# standby, or a primary being failed over).
_UNAVAILABLE_CLASSES = ("08", "53", "57")
_UNAVAILABLE_STATES = ("25006",)


# What the driver raises, besides the server's errors: a connection lost, closed or left
# in a state it cannot go on from (``InternalClientError`` after a connection broke
# mid-operation), a timeout.
DRIVER_ERRORS = (
    OSError, TimeoutError, asyncpg.exceptions.InterfaceError, asyncpg.exceptions.InternalClientError,
)
CAUGHT = (asyncpg.PostgresError, *DRIVER_ERRORS)


def unavailable(e: BaseException) -> bool:
    """Whether ``e`` says the database cannot be reached or cannot take writes now."""
    if isinstance(e, DRIVER_ERRORS):
        return True
    state = getattr(e, "sqlstate", None) or ""
    return state[:2] in _UNAVAILABLE_CLASSES or state in _UNAVAILABLE_STATES


def store_error(e: BaseException, doing: str) -> StoreError:
    """The store error ``e`` becomes, its message naming what was being done."""
    if getattr(e, "sqlstate", None) == FENCED:
        return LeaseLost(str(e))
    if getattr(e, "sqlstate", None) == KEY_TAKEN:
        return KeyTaken(str(e))
    if unavailable(e):
        return StoreUnavailable(f"PostgreSQL is unavailable ({doing}): {type(e).__name__}: {e}")
    return StoreError(f"PostgreSQL refused {doing}: {e}")


QUOTA_LOCK: Final = 0x7471  # "tq": the advisory lock class of the limits per principal


async def lock_quota(c: asyncpg.Connection, kind: str, principal: str) -> None:
    """Hold, until ``c``'s transaction ends, the lock of ``principal``'s ``kind`` of rows.

    Under READ COMMITTED two transactions counting a principal's rows at once both see
    the count before either inserts, and both insert past the limit: so the count and
    the insert of one principal's rows are serialized, across every broadcaster on the
    database. A transaction-scoped advisory lock (two-key space: apart from the
    migrations' one-key lock) needs no table of its own; a hash collision only
    serializes two principals' creations, it never mixes their counts."""
    await c.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", QUOTA_LOCK, f"{kind}:{principal}")


def fence_args(fence: Fence | None) -> tuple[str | None, str | None, int | None]:
    """The three leading arguments of every fenced function: no fence, no check."""
    return (None, None, None) if fence is None else (fence.key, fence.owner, fence.epoch)


def stat_arrays(rows: Sequence[tuple[str, str, str, int]]) -> tuple[list[str], list[str], list[str], list[int]]:
    """Counter rows (:func:`stat_rows`) as the four arrays the functions take."""
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]


def event_row(r: Any) -> StoredEvent:
    return StoredEvent(
        seq=r[0], namespace=r[1], id=r[2], prev_id=r[3], timestamp=r[4], source=r[5], data=bytes(r[6]),
        headers=bytes(r[7]),
    )


def sub_row(r: Any) -> SubscriptionRecord:
    return SubscriptionRecord(
        id=r[0], subscriber=r[1], namespace=r[2], endpoint=r[3], mode=r[4], config=dec(r[5]), cursor=r[6],
        created_at=r[7],
    )


def stat_rows(stats: Iterable[Stat]) -> list[tuple[str, str, str, int]]:
    """Sum the deltas per counter (raising on a delta that is not a number, before any
    write), drop those that cancel out, and sort: the order locks are taken in."""
    agg: dict[tuple[str, str, str], int] = {}
    for s in stats:
        k = (s.scope, s.key, s.name)
        agg[k] = agg.get(k, 0) + s.delta
    return sorted((*k, v) for k, v in agg.items() if v)


async def apply_stats(c: asyncpg.Connection, rows: Sequence[tuple[str, str, str, int]]) -> None:
    """Upsert counter increments from :func:`stat_rows` (give all of a transaction's at once)."""
    if not rows:
        return
    await c.execute(
        "INSERT INTO stats(scope, key, name, value) "
        "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) "
        "ON CONFLICT (scope, key, name) DO UPDATE SET value = stats.value + excluded.value",
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
    )


class PgAccess:
    """How each concern's module reaches the database; ``PostgresStore`` sets ``_pool``
    and ``_origin``."""

    _pool: asyncpg.Pool | None = None
    _origin: str = ""
    """This store's id in the change signals it sends (``_pg_cluster``)."""

    async def _signal(self, c: asyncpg.Connection, kind: str, arg: str = "") -> None:
        """Tell the other processes sharing the database, at ``c``'s commit, what changed."""
        await c.execute("SELECT pg_notify('tidings', $1)", f"{self._origin} {kind} {arg}")

    def _the_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("store is not open")
        return self._pool

    async def _tx(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Run ``fn`` in one client transaction, again from the start if it lost a lock
        race. Its locks last across its round trips: for operators' changes only."""

        async def once(c: asyncpg.Connection) -> T:
            async with c.transaction():
                return await fn(c)

        return await self._retried(once)

    async def _call(self, how: str, sql: str, *args: Any) -> Any:
        """Run one statement outside any client transaction (``how``: ``fetch``,
        ``fetchval``, ``fetchrow`` or ``execute``), again if it lost a lock race: the
        server runs it to its commit without waiting on this process."""
        return await self._retried(lambda c: getattr(c, how)(sql, *args))

    async def _retried(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``fn`` on a pooled connection, run again from the start when it lost a lock race."""
        pool = self._the_pool()
        for attempt in range(_ATTEMPTS):
            try:
                async with pool.acquire() as c:
                    return await fn(c)
            except _RETRIED:
                if attempt == _ATTEMPTS - 1:
                    raise StoreError("the write kept losing lock races; try again") from None
            except CAUGHT as e:
                raise store_error(e, "a write") from e
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Run ``fn`` on a pooled connection (one statement, or a repeatable-read snapshot
        when it reads several tables that must agree)."""
        pool = self._the_pool()
        try:
            async with pool.acquire() as c:
                return await fn(c)
        except CAUGHT as e:
            raise store_error(e, "a read") from e

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        return await self._read(lambda c: c.fetch(sql, *args))

    async def _fetchval(self, sql: str, *args: Any) -> Any:
        return await self._read(lambda c: c.fetchval(sql, *args))
