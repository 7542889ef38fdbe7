"""The PostgreSQL store (asyncpg): for several broadcaster processes sharing one database.

Each concern lives in its own module (``_pg_principals``, ``_pg_registry``,
``_pg_events``, ``_pg_deliveries``, ``_pg_stats``, ``_pg_schemas``, ``_pg_replays``,
``_pg_cluster``: the broadcasters sharing the database, their leases, change signals);
this one assembles them and owns the connection pool. At open the store applies the
schema migrations the database lacks (``_pg_migrations``).

Notifications are opened by the subscriptions' workers after their events commit
(``route_appends`` is not offered): an append stays one short statement that any
number of processes can take turns on.

Every wait is bounded (docs/operations.md, "PostgreSQL: timeouts"): connecting, taking a
pooled connection and each statement's answer by ``timeout_s`` on this side; on the
server, each session sets ``lock_timeout`` (``timeout_s``), ``statement_timeout``,
``idle_in_transaction_session_timeout`` (a process stopped inside a transaction loses it,
and its locks, after that long) and TCP keepalives, so that a broadcaster that stops or
is cut off never holds the others for long, even where a client transaction remains.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import asyncpg

from ..core.addresses import redact_address
from ..core.clock import Clock
from ..errors import StoreError, StoreUnavailable
from ._base import Store
from ._pg_cluster import PgClusterStore
from ._pg_db import CAUGHT
from ._pg_deliveries import PgDeliveryStore
from ._pg_events import PgEventStore, _Append
from ._pg_migrations import migrate
from ._pg_principals import PgPrincipalStore
from ._pg_registry import PgRegistryStore
from ._pg_replays import PgReplayStore
from ._pg_schemas import PgSchemaStore
from ._pg_stats import PgStatisticsStore

__all__ = ["PostgresStore", "session_bounds"]


def session_bounds(timeout_s: float) -> dict[str, str]:
    """The server-side bounds every session sets (milliseconds, seconds for keepalives)."""
    ms = str(max(1, int(timeout_s * 1000)))
    return {
        "lock_timeout": ms,
        # Long enough for the heaviest statement (a retention trim), short enough to end
        # one whose client is gone.
        "statement_timeout": str(max(60_000, int(timeout_s * 6000))),
        "idle_in_transaction_session_timeout": "2000",
        "tcp_keepalives_idle": "5",
        "tcp_keepalives_interval": "2",
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": ms,
    }


async def _keep_session(_c: asyncpg.Connection) -> None:
    """What a pooled connection's release sends besides the rollback of a transaction left
    open (which asyncpg still does, without a round trip when there is none): nothing.

    asyncpg's default sends ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``
    at every release, one more round trip for every statement, the group commit's
    included: a publish a network away from its database waited for it. Nothing here
    leaves a session state behind on a pooled connection: advisory locks are
    transaction-scoped (``lock_quota``, the migrations'), no cursor outlives its
    transaction, the change signals are heard on a connection of their own
    (``_pg_cluster.listen``) and the session's settings are the pool's, set at connect."""


class PostgresStore(
    PgPrincipalStore,
    PgRegistryStore,
    PgEventStore,
    PgDeliveryStore,
    PgStatisticsStore,
    PgSchemaStore,
    PgReplayStore,
    PgClusterStore,
    Store,
):
    """A PostgreSQL database at ``dsn`` (``postgresql://user@host:port/database``).

    ``server_settings`` are passed to every connection (``{"search_path": "tidings"}``
    keeps the tables in a schema of their own, which must exist)."""

    def __init__(
        self, dsn: str, *, min_size: int = 2, max_size: int = 10, max_batch: int = 512,
        server_settings: dict[str, str] | None = None, timeout_s: float = 10.0, peers_within_s: float = 15.0,
        clock: Clock | None = None,
    ) -> None:
        self._clock = clock
        self._dsn = dsn
        self._peers_within_s = peers_within_s
        """A migration waits for broadcasters seen this recently to be gone (``_pg_migrations``)."""
        self._min_size = min_size
        self._max_size = max_size
        self._max_batch = max_batch
        self._timeout_s = timeout_s
        self._server_settings = {**session_bounds(timeout_s), **(server_settings or {})}
        self._origin = secrets.token_hex(8)
        self._pool: asyncpg.Pool | None = None
        self._appends: asyncio.Queue[_Append] | None = None
        self._appender_task: asyncio.Task[None] | None = None
        self.migrated: list[int] = []
        """The schema versions the last ``open`` applied."""

    @property
    def dsn(self) -> str:
        return self._dsn

    async def open(self) -> None:
        if self._pool is not None:
            return
        kwargs: dict[str, Any] = {
            "min_size": self._min_size, "max_size": self._max_size, "server_settings": self._server_settings,
            "timeout": self._timeout_s, "command_timeout": self._timeout_s, "reset": _keep_session,
        }
        try:
            pool = await asyncpg.create_pool(self._dsn, **kwargs)
        except CAUGHT as e:
            raise StoreUnavailable(
                f"cannot open PostgreSQL at {redact_address(self._dsn)} within {self._timeout_s:g} s "
                f"(TIDINGS_STORE_TIMEOUT_S): {type(e).__name__}: {e}"
            ) from e
        try:
            async with pool.acquire() as c:
                self.migrated = await migrate(c, peers_within_s=self._peers_within_s)
        except BaseException as e:
            await pool.close()
            if isinstance(e, asyncpg.PostgresError):
                raise StoreError(f"cannot migrate PostgreSQL at {redact_address(self._dsn)}: {e}") from e
            raise
        self._pool = pool
        self._appends = asyncio.Queue()
        self._appender_task = asyncio.create_task(self._appender(), name="tidings-pg-appender")

    async def close(self) -> None:
        task, self._appender_task = self._appender_task, None
        await self._stop_appender(task)
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

