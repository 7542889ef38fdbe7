"""The in-memory store: plain dicts and lists, for tests and throwaway brokers.

Each concern lives in its own module (``_memory_principals``, ``_memory_registry``,
``_memory_events``, ``_memory_deliveries``, ``_memory_stats``, ``_memory_schemas``,
``_memory_replays``) over one shared state (``_memory_state``).

It behaves like ``SQLiteStore`` in everything a caller can observe (ordering, ids,
return values, what a failed call leaves) except durability. No method awaits, so on
one event loop every call is atomic without locks; each write first computes all it
will change and only then mutates, so a call that raises leaves nothing behind.

Records handed out are fresh objects and configs are kept JSON-encoded, as in SQLite,
so callers can neither alter the store's state nor see values the SQLite store would
not return (a tuple comes back as a list).
"""

from __future__ import annotations

from ._base import Store
from ._memory_deliveries import MemoryDeliveryStore
from ._memory_events import MemoryEventStore
from ._memory_principals import MemoryPrincipalStore
from ._memory_registry import MemoryRegistryStore
from ._memory_replays import MemoryReplayStore
from ._memory_schemas import MemorySchemaStore
from ._memory_stats import MemoryStatisticsStore

__all__ = ["MemoryStore"]


class MemoryStore(
    MemoryPrincipalStore,
    MemoryRegistryStore,
    MemoryEventStore,
    MemoryDeliveryStore,
    MemoryStatisticsStore,
    MemorySchemaStore,
    MemoryReplayStore,
    Store,
):
    """Everything in this process's memory; lost when the object is. Survives close/open."""

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False
