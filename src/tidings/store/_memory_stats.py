"""Statistics counters in the in-memory store."""

from __future__ import annotations

from collections.abc import Iterable

from ._base import StatisticsStore
from ._memory_state import MemoryState, aggregate
from ._records import Stat

__all__ = ["MemoryStatisticsStore"]


class MemoryStatisticsStore(MemoryState, StatisticsStore):
    async def add_stats(self, stats: Iterable[Stat]) -> None:
        self._check()
        self._apply_stats(aggregate(stats))

    async def stat_keys(self, scope: str) -> list[str]:
        self._check()
        return sorted({k for (s, k, _n) in self._stats if s == scope})

    async def stats(self, scope: str, key: str) -> dict[str, int]:
        self._check()
        return {n: v for (s, k, n), v in self._stats.items() if s == scope and k == key}
