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
    "Stat",
    "Store",
    "StoredEvent",
    "SubscriptionRecord",
    "SubscriptionSecret",
]
