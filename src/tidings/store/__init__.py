"""Storage backends behind one interface: ``Store``, with SQLite and in-memory versions."""

from ._base import (
    AppendRouter,
    DeadLetter,
    NewEvent,
    PendingNotification,
    PrincipalRecord,
    PublicationRecord,
    Route,
    Stat,
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
    "InsufficientCredit",
    "MemoryStore",
    "NewEvent",
    "PendingNotification",
    "PrincipalRecord",
    "PublicationRecord",
    "ReplayCounts",
    "ReplayRecord",
    "Route",
    "SQLiteStore",
    "SchemaChange",
    "SchemaRecord",
    "SchemaSnapshot",
    "SchemaVersion",
    "Stat",
    "Store",
    "StoredEvent",
    "SubscriptionRecord",
    "SubscriptionSecret",
]
