"""Broadcasters, leases and change signals in the PostgreSQL store (``_cluster``).

Signals are ``NOTIFY tidings, '<origin> <kind> <argument>'``, sent inside the
transaction of the change they announce, so PostgreSQL delivers them at its commit and
never for a rolled-back one. ``origin`` is the sending store's own random id: a process
ignores its own signals, having applied its changes already.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from ..errors import StoreError
from ._cluster import CHANGE_LOST, BroadcasterRecord, ClusterStore, LeaseRecord
from ._pg_db import PgAccess

__all__ = ["CHANNEL", "PgClusterStore"]

log = logging.getLogger("tidings.store")

CHANNEL = "tidings"


class PgClusterStore(PgAccess, ClusterStore):
    _dsn: str
    _server_settings: dict[str, str] | None

    async def heartbeat(self, node: str, url: str, *, forget_after_s: float) -> list[BroadcasterRecord]:
        async def job(c: asyncpg.Connection) -> list[Any]:
            await c.execute(
                "INSERT INTO broadcasters(id, url, started_at, seen_at) VALUES ($1, $2, now(), clock_timestamp()) "
                "ON CONFLICT (id) DO UPDATE SET url = excluded.url, seen_at = excluded.seen_at",
                node, url,
            )
            await c.execute(
                "DELETE FROM broadcasters WHERE seen_at < clock_timestamp() - make_interval(secs => $1)",
                forget_after_s,
            )
            return await c.fetch(
                "SELECT id, url, (extract(epoch FROM started_at) * 1000)::bigint, "
                "(extract(epoch FROM clock_timestamp() - seen_at) * 1000)::bigint FROM broadcasters ORDER BY id"
            )

        rows = await self._tx(job)
        return [BroadcasterRecord(id=r[0], url=r[1], started_at=r[2], seen_ms_ago=max(0, r[3])) for r in rows]

    async def peer_secret(self, candidate: bytes) -> bytes:
        async def job(c: asyncpg.Connection) -> bytes:
            await c.execute(
                "INSERT INTO cluster_secrets(name, value) VALUES ('peer', $1) ON CONFLICT (name) DO NOTHING", candidate
            )
            return bytes(await c.fetchval("SELECT value FROM cluster_secrets WHERE name = 'peer'"))

        return await self._tx(job)  # type: ignore[no-any-return]

    async def leave(self, node: str) -> None:
        async def job(c: asyncpg.Connection) -> None:
            await c.execute("DELETE FROM leases WHERE owner = $1", node)
            await c.execute("DELETE FROM broadcasters WHERE id = $1", node)

        await self._tx(job)

    async def claim_leases(self, owner: str, keys: Sequence[str], ttl_s: float) -> list[str]:
        if not keys:
            return []
        rows = await self._tx(lambda c: c.fetch(
            "INSERT INTO leases(key, owner, expires_at) "
            "SELECT k, $2, clock_timestamp() + make_interval(secs => $3) FROM unnest($1::text[]) AS k ORDER BY k "
            "ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at "
            "WHERE leases.owner = excluded.owner OR leases.expires_at < clock_timestamp() "
            "RETURNING key",
            sorted(set(keys)), owner, ttl_s,
        ))
        return sorted(r[0] for r in rows)

    async def release_leases(self, owner: str, keys: Sequence[str]) -> None:
        if keys:
            await self._tx(lambda c: c.execute(
                "DELETE FROM leases WHERE owner = $1 AND key = ANY($2::text[])", owner, list(keys)
            ))

    async def leases(self, prefix: str = "") -> list[LeaseRecord]:
        rows = await self._fetch(
            "SELECT key, owner, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint "
            "FROM leases WHERE starts_with(key, $1) ORDER BY key",
            prefix,
        )
        return [LeaseRecord(key=r[0], owner=r[1], expires_in_ms=r[2]) for r in rows]

    async def listen(self, on_change: Callable[[str, str], None]) -> Callable[[], Awaitable[None]]:
        origin = self._origin

        def heard(_c: object, _pid: int, _channel: str, payload: str) -> None:
            sender, _, rest = payload.partition(" ")
            if sender == origin:
                return
            kind, _, arg = rest.partition(" ")
            on_change(kind, arg)

        try:
            kwargs: dict[str, Any] = {"server_settings": self._server_settings} if self._server_settings else {}
            conn = await asyncpg.connect(self._dsn, **kwargs)
            await conn.add_listener(CHANNEL, heard)
            conn.add_termination_listener(lambda _c: on_change(CHANGE_LOST, ""))
        except (OSError, asyncpg.PostgresError, asyncpg.exceptions.InterfaceError) as e:
            raise StoreError(f"cannot listen for changes: {e}") from e

        async def close() -> None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

        return close
