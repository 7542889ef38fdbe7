"""Statistics counters in the SQLite store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from ._base import StatisticsStore
from ._records import Stat
from ._sqlite_db import SQLiteAccess, apply_stats

__all__ = ["SQLiteStatisticsStore"]


class SQLiteStatisticsStore(SQLiteAccess, StatisticsStore):
    async def add_stats(self, stats: Iterable[Stat]) -> None:
        stats = list(stats)
        await self._write(lambda c, w: apply_stats(c, stats))

    async def stat_keys(self, scope: str) -> list[str]:
        return await self._read(
            lambda c: [r[0] for r in c.execute("SELECT DISTINCT key FROM stats WHERE scope = ? ORDER BY key", (scope,))]
        )

    async def stats(self, scope: str, key: str) -> dict[str, int]:
        def q(c: sqlite3.Connection) -> dict[str, int]:
            return dict(c.execute("SELECT name, value FROM stats WHERE scope = ? AND key = ?", (scope, key)))

        return await self._read(q)
