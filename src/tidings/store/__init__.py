"""Storage backends behind one interface per concern, assembled as ``Store``.

The concerns (``tidings.store._base``): ``PrincipalStore``, ``RegistryStore``
(publications, publishers, subscriptions, secrets), ``EventStore``, ``DeliveryStore``
(notifications, dead letters, delivery records), ``StatisticsStore``, ``SchemaStore`` and
``ReplayStore``. Each backend implements each concern in its own module: SQLite
(``SQLiteStore``, embedded), PostgreSQL (``PostgresStore``, shared by several
processes) and memory (``MemoryStore``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._address import redact_address, store_for
from ._base import (
    AppendRouter,
    DeadLetter,
    DeliveryStore,
    EventStore,
    KeyRecord,
    NewEvent,
    PendingNotification,
    PrincipalRecord,
    PrincipalStore,
    PublicationRecord,
    RegistryStore,
    ReplayStore,
    Route,
    SchemaStore,
    Stat,
    StatisticsStore,
    Store,
    StoredEvent,
    SubscriptionRecord,
    SubscriptionSecret,
)
from ._cluster import CHANGE_LOG, CHANGE_LOST, CHANGE_REGISTRY, BroadcasterRecord, ClusterStore, Fence, LeaseRecord
from ._deliveries import DeliveryRecord
from ._disk import cause as disk_cause
from ._replays import InsufficientCredit, ReplayCounts, ReplayRecord
from ._schemas import SchemaChange, SchemaConflict, SchemaRecord, SchemaSnapshot, SchemaVersion
from .memory import MemoryStore
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgresql import PostgresStore

__all__ = [
    "CHANGE_LOG",
    "CHANGE_LOST",
    "CHANGE_REGISTRY",
    "AppendRouter",
    "BroadcasterRecord",
    "ClusterStore",
    "DeadLetter",
    "DeliveryRecord",
    "DeliveryStore",
    "EventStore",
    "Fence",
    "InsufficientCredit",
    "KeyRecord",
    "LeaseRecord",
    "MemoryStore",
    "NewEvent",
    "PendingNotification",
    "PostgresStore",
    "PrincipalRecord",
    "PrincipalStore",
    "PublicationRecord",
    "RegistryStore",
    "ReplayCounts",
    "ReplayRecord",
    "ReplayStore",
    "Route",
    "SQLiteStore",
    "SchemaChange",
    "SchemaConflict",
    "SchemaRecord",
    "SchemaSnapshot",
    "SchemaStore",
    "SchemaVersion",
    "Stat",
    "StatisticsStore",
    "Store",
    "StoredEvent",
    "SubscriptionRecord",
    "SubscriptionSecret",
    "disk_cause",
    "redact_address",
    "store_for",
]


def __getattr__(name: str) -> Any:
    # PostgresStore needs asyncpg (the ``postgresql`` extra): imported when asked for.
    if name == "PostgresStore":
        from .postgresql import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
