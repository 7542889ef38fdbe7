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

from ..errors import StoreError, StoreUnavailable
from ._cluster import CHANGE_LOST, BroadcasterRecord, ClusterStore, LeaseRecord
from ._pg_db import CAUGHT, PgAccess, unavailable

__all__ = ["CHANNEL", "PgClusterStore"]

log = logging.getLogger("tidings.store")

CHANNEL = "tidings"


class PgClusterStore(PgAccess, ClusterStore):
    _dsn: str
    _server_settings: dict[str, str] | None
    _timeout_s: float = 10.0

    async def heartbeat(self, node: str, url: str, *, forget_after_s: float) -> list[BroadcasterRecord]:
        clock = self.clock
        # The database's clock read with the heartbeat: the members' one clock
        # (core.clock; its error bar is half the round trip).
        wall, sent = clock.wall_ns(), clock.monotonic_ns()
        rows = await self._call(
            "fetch", "SELECT o_id, o_url, o_started, o_seen_ago, "
            "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint FROM tidings_heartbeat($1, $2, $3)",
            node, url, forget_after_s,
        )
        if rows:
            clock.observe(int(rows[0][4]), wall, sent, clock.monotonic_ns())
        return [BroadcasterRecord(id=r[0], url=r[1], started_at=r[2], seen_ms_ago=max(0, r[3])) for r in rows]

    async def peer_secret(self, candidate: bytes) -> bytes:
        async def job(c: asyncpg.Connection) -> bytes:
            await c.execute(
                "INSERT INTO cluster_secrets(name, value) VALUES ('peer', $1) ON CONFLICT (name) DO NOTHING", candidate
            )
            return bytes(await c.fetchval("SELECT value FROM cluster_secrets WHERE name = 'peer'"))

        return await self._tx(job)  # type: ignore[no-any-return]

    async def leave(self, node: str) -> None:
        await self._call("execute", "SELECT tidings_leave($1)", node)

    async def claim_leases(self, owner: str, keys: Sequence[str], ttl_s: float) -> dict[str, int]:
        if not keys:
            return {}
        # One statement: its row locks last only while the server runs it. A lease that
        # changes owner takes a new epoch; a renewal keeps its own.
        rows = await self._call(
            "fetch",
            "INSERT INTO leases(key, owner, expires_at, epoch) "
            "SELECT k, $2, clock_timestamp() + make_interval(secs => $3), nextval('lease_epochs') "
            "FROM unnest($1::text[]) AS k ORDER BY k "
            "ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, "
            "epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch ELSE excluded.epoch END "
            "WHERE leases.owner = excluded.owner OR leases.expires_at < clock_timestamp() "
            "RETURNING key, epoch",
            sorted(set(keys)), owner, ttl_s,
        )
        return {r[0]: int(r[1]) for r in sorted(rows)}

    async def release_leases(self, owner: str, keys: Sequence[str]) -> None:
        if keys:
            await self._call(
                "execute", "DELETE FROM leases WHERE owner = $1 AND key = ANY($2::text[])", owner, list(keys)
            )

    async def leases(self, prefix: str = "") -> list[LeaseRecord]:
        rows = await self._fetch(
            "SELECT key, owner, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint, epoch "
            "FROM leases WHERE starts_with(key, $1) ORDER BY key",
            prefix,
        )
        return [LeaseRecord(key=r[0], owner=r[1], expires_in_ms=r[2], epoch=r[3]) for r in rows]

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
            conn = await asyncpg.connect(self._dsn, timeout=self._timeout_s, **kwargs)
            await conn.add_listener(CHANNEL, heard)
            conn.add_termination_listener(lambda _c: on_change(CHANGE_LOST, ""))
        except CAUGHT as e:
            raise (StoreUnavailable if unavailable(e) else StoreError)(f"cannot listen for changes: {e}") from e

        async def close() -> None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

        return close
