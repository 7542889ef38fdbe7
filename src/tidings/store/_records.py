"""The records the store speaks in: what callers hand it and what it hands back.

Records handed out are fresh objects; configs travel in ICRC-16 wire form (JSON-able).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

__all__ = [
    "AppendRouter",
    "DeadLetter",
    "KeyRecord",
    "NewEvent",
    "PendingNotification",
    "PrincipalRecord",
    "PublicationRecord",
    "Route",
    "Stat",
    "StoredEvent",
    "SubscriptionRecord",
    "SubscriptionSecret",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PrincipalRecord:
    name: str
    admin: bool = False
    created_at: int = 0
    """UTC nanoseconds."""


@dataclass(slots=True, kw_only=True)
class PublicationRecord:
    namespace: str
    owner: str
    config: list[Any] = field(default_factory=list)
    """ICRC-16 Map pairs in wire form, as registered (unknown keys kept)."""
    created_at: int = 0


@dataclass(slots=True, kw_only=True)
class SubscriptionRecord:
    id: int
    subscriber: str
    namespace: str
    endpoint: str | None
    mode: str = "trusted"
    config: list[Any] = field(default_factory=list)
    cursor: int = 0
    """Global ``seq`` of the last event this subscription has considered."""
    created_at: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionSecret:
    """A secret pushes to a subscription are signed with (Standard Webhooks)."""

    secret: str
    created_at: int
    """UTC nanoseconds."""
    expires_at: int | None = None
    """UTC nanoseconds after which it no longer signs; None: until a rotation sets it."""


class NewEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An accepted event before it has ids: data and headers already JSON-encoded."""

    namespace: str
    source: str
    timestamp: int
    data: bytes
    headers: bytes = b"[]"
    key: str | None = None
    """The publisher's idempotency key: stored in the same commit as the event, unique per
    namespace while live; an append that meets a live row of it fails with ``KeyTaken``."""
    fingerprint: bytes = b""
    key_expires: int = 0
    """UTC nanoseconds after which the key is forgotten (the publication's window)."""


class KeyRecord(msgspec.Struct, frozen=True):
    """A live idempotency key: the event it was first published as."""

    namespace: str
    key: str
    fingerprint: bytes
    source: str
    event_id: int
    expires_at: int


class StoredEvent(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    namespace: str
    id: int
    prev_id: int | None
    timestamp: int
    source: str
    data: bytes
    """The ICRC-16 data, JSON-encoded wire form."""
    headers: bytes
    """The header Map pairs, JSON-encoded wire form."""


@dataclass(slots=True, kw_only=True)
class Route:
    """Notifications for one subscription, opened in the transaction of their events."""

    subscription_id: int
    events: list[StoredEvent]
    """The events delivered to it, in log order (possibly none: all filtered out)."""
    cursor: int
    """The subscription's new cursor: the last event it was routed."""
    stats: list[Stat]
    ids: list[int] = field(default_factory=list)
    """The notification ids, one per event; filled in by the store."""
    record: bool = True
    """False: the store writes nothing for this route (neither notifications nor the
    cursor); its worker pushes the events first and records them once confirmed."""


class AppendRouter(Protocol):
    """Decides, inside an append's transaction, which notifications open with it.

    Both methods run on the store's writing thread: ``plan`` before the commit (a
    failure leaves the events unrouted, never unstored), ``committed`` right after it
    and before any caller of ``append`` hears that its events are stored.

    ``opened`` maps a subscription to the cursor of its last ``open_notifications``
    that is committed or part of this same transaction: everything up to that cursor
    is opened (or filtered out) once this transaction commits."""

    def plan(self, events: Sequence[StoredEvent], opened: Mapping[int, int]) -> list[Route]: ...

    def committed(self, events: Sequence[StoredEvent], routes: Sequence[Route]) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingNotification:
    id: int
    subscription_id: int
    seq: int
    namespace: str
    attempts: int = 0
    created_at: int = 0
    """UTC nanoseconds when the notification was recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A notification given up on: it keeps its id, so a redrive sends it again as itself."""

    id: int
    subscription_id: int
    subscriber: str
    seq: int
    namespace: str
    event_id: int
    attempts: int
    reason: str
    dead_at: int
    """UTC nanoseconds."""


@dataclass(frozen=True, slots=True)
class Stat:
    """A counter increment: ``scope`` is publication, publisher, subscriber or subscription."""

    scope: str
    key: str
    name: str
    delta: int = 1
