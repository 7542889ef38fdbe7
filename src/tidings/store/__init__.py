"""Storage backends behind one interface: ``Store``, with SQLite and in-memory versions."""

from ._base import (
    DeadLetter,
    NewEvent,
    PendingNotification,
    PrincipalRecord,
    PublicationRecord,
    Stat,
    Store,
    StoredEvent,
    SubscriptionRecord,
    SubscriptionSecret,
)
from ._schemas import SchemaChange, SchemaRecord, SchemaSnapshot, SchemaVersion
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = [
    "DeadLetter",
    "MemoryStore",
    "NewEvent",
    "PendingNotification",
    "PrincipalRecord",
    "PublicationRecord",
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
