"""Storage backends behind one interface per concern, assembled as ``Store``.

The concerns (``tidings.store._base``): ``PrincipalStore``, ``RegistryStore``
(publications, publishers, subscriptions, secrets), ``EventStore``, ``DeliveryStore``
(notifications, dead letters, delivery records), ``StatisticsStore``, ``SchemaStore`` and
``ReplayStore``. Each backend implements each concern in its own module: SQLite
(``SQLiteStore``, embedded) and memory (``MemoryStore``).
"""

from ._base import (
    AppendRouter,
    DeadLetter,
    DeliveryStore,
    EventStore,
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
from ._deliveries import DeliveryRecord
from ._replays import InsufficientCredit, ReplayCounts, ReplayRecord
from ._schemas import SchemaChange, SchemaRecord, SchemaSnapshot, SchemaVersion
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = [
    "AppendRouter",
    "DeadLetter",
    "DeliveryRecord",
    "DeliveryStore",
    "EventStore",
    "InsufficientCredit",
    "MemoryStore",
    "NewEvent",
    "PendingNotification",
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
]
