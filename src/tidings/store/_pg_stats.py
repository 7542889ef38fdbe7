"""Statistics counters in the PostgreSQL store."""

from __future__ import annotations

from collections.abc import Iterable

from ._base import StatisticsStore
from ._pg_db import PgAccess, apply_stats, stat_rows
from ._records import Stat

__all__ = ["PgStatisticsStore"]


class PgStatisticsStore(PgAccess, StatisticsStore):
    async def add_stats(self, stats: Iterable[Stat]) -> None:
        rows = stat_rows(stats)
        self._the_pool()
        if rows:
            await self._tx(lambda c: apply_stats(c, rows))

    async def stat_keys(self, scope: str) -> list[str]:
        rows = await self._fetch("SELECT DISTINCT key FROM stats WHERE scope = $1 ORDER BY key", scope)
        return [r[0] for r in rows]

    async def stats(self, scope: str, key: str) -> dict[str, int]:
        rows = await self._fetch("SELECT name, value FROM stats WHERE scope = $1 AND key = $2", scope, key)
        return {r[0]: r[1] for r in rows}
