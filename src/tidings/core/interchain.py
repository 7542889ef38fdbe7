"""The rules of the Interchain Event Distributor (DOME DLT Adapter API), free of I/O.

The wire types of the DLT Adapter API (REFERENCE §4) and the rules the distributor
applies to them: the global id of an event (the ``hl`` query parameter of its
``dataLocation``, derived in :mod:`tidings.core.global_id`), matching an event against a
subscription of interest (``"*"`` matches every type), stripping the ``network``
parameter, and turning a notification back into the publish body it came from. Shared
by the live distributor and the Spark reconciliation job.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

import msgspec
from msgspec import Meta, Struct

from .global_id import GlobalIdError
from .global_id import global_id as _global_id

__all__ = [
    "ANY_TYPE",
    "IDEMPOTENCY_HEADER",
    "DltPublish",
    "DltSubscribe",
    "EventNotification",
    "InvalidEvent",
    "NetworkNotification",
    "global_id",
    "idempotency_key",
    "matches",
    "notification_of",
    "publish_body_of",
    "strip_network",
    "validate_publish",
    "validate_subscribe",
]

ANY_TYPE = "*"
"""In ``eventTypes``: every event type."""

IDEMPOTENCY_HEADER = "Idempotency-Key"
"""The header carrying :func:`idempotency_key` on every notification pushed to a consumer."""

_HASH = r"^0x[0-9a-fA-F]{64}$"
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#]+[^\s]*$")
_HTTP_URL = re.compile(r"^https?://[^\s/?#]+[^\s]*$")


class InvalidEvent(ValueError):
    """A body breaks a rule of the DLT Adapter API; ``code`` is stable."""

    def __init__(self, message: str, *, code: str = "invalid_argument") -> None:
        super().__init__(message)
        self.code = code


class DltPublish(Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=False):
    """``POST /api/v1/publishEvent``: the event Desmos asks to publish.

    Unknown fields (a ``network`` among them) are dropped on decoding: that is how the
    network parameter is stripped before republishing."""

    eventType: Annotated[str, Meta(min_length=1, max_length=255)]
    iss: Annotated[str, Meta(min_length=1)]
    entityId: Annotated[str, Meta(pattern=_HASH)]
    previousEntityHash: Annotated[str, Meta(pattern=_HASH)]
    dataLocation: Annotated[str, Meta(min_length=1)]
    relevantMetadata: list[str] = []
    rpcAddress: str | None = None


class DltSubscribe(Struct, kw_only=True):
    """``POST /api/v1/subscribe``: a subscription of interest."""

    eventTypes: Annotated[list[Annotated[str, Meta(min_length=1, max_length=255)]], Meta(min_length=1)]
    notificationEndpoint: str
    metadata: list[str] = []


class EventNotification(Struct, kw_only=True):
    """A notification as a consumer of the distributor receives it: no ``network``."""

    id: int | str | None = None
    timestamp: int | None = None
    eventType: str
    dataLocation: str
    relevantMetadata: list[str] = []
    entityIdHash: str = ""
    previousEntityHash: str = ""
    publisherAddress: str = ""


class NetworkNotification(EventNotification, kw_only=True):
    """A notification as a network's adapter emits it: ``network`` names where it was seen."""

    network: str | None = None


def global_id(data_location: str) -> str:
    """The global id of an event: the percent-decoded ``hl`` query parameter of
    ``dataLocation``, by the one rule of :mod:`tidings.core.global_id`."""
    try:
        return _global_id(data_location)
    except GlobalIdError as e:
        raise InvalidEvent(str(e), code=e.code) from None


def idempotency_key(subscription_id: str, gid: str) -> str:
    """The key a consumer gets with the notification of event ``gid`` for subscription
    ``subscription_id``: the same on every (re)delivery of that event to that subscription,
    from any distributor process, and different for every other pair. ASCII, so it fits an
    HTTP header whatever characters the global id holds."""
    digest = hashlib.sha256(gid.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{subscription_id}.{digest}"


def validate_publish(body: DltPublish) -> str:
    """Checks msgspec cannot express; returns the event's global id."""
    if not _URI.match(body.dataLocation):
        raise InvalidEvent(f"dataLocation is not a URI: {body.dataLocation[:200]!r}")
    return global_id(body.dataLocation)


def validate_subscribe(body: DltSubscribe) -> None:
    if not _HTTP_URL.match(body.notificationEndpoint):
        raise InvalidEvent(f"notificationEndpoint is not an http(s) URL: {body.notificationEndpoint[:200]!r}")


def matches(sub: DltSubscribe, event_type: str, metadata: list[str]) -> bool:
    """Does an event interest ``sub``? Its type is listed (or ``"*"`` is), and, when the
    subscription names metadata, the event carries at least one of them."""
    if ANY_TYPE not in sub.eventTypes and event_type not in sub.eventTypes:
        return False
    return not sub.metadata or any(m in sub.metadata for m in metadata)


def strip_network(n: EventNotification) -> EventNotification:
    """The notification without its ``network`` parameter, as consumers get it."""
    return EventNotification(
        id=n.id, timestamp=n.timestamp, eventType=n.eventType, dataLocation=n.dataLocation,
        relevantMetadata=list(n.relevantMetadata), entityIdHash=n.entityIdHash,
        previousEntityHash=n.previousEntityHash, publisherAddress=n.publisherAddress,
    )


def publish_body_of(n: EventNotification) -> DltPublish:
    """The publish body a notification was made from, ``network`` stripped: what is
    republished to the networks that lack the event (``publisherAddress`` is the ``iss``,
    ``entityIdHash`` the ``entityId``)."""
    body = DltPublish(
        eventType=n.eventType, iss=n.publisherAddress, entityId=n.entityIdHash,
        previousEntityHash=n.previousEntityHash, dataLocation=n.dataLocation,
        relevantMetadata=list(n.relevantMetadata),
    )
    # Round-trip through the typed decoder so a malformed notification fails here, with
    # the same rules a direct publication meets.
    try:
        checked = msgspec.json.decode(msgspec.json.encode(body), type=DltPublish)
    except msgspec.ValidationError as e:
        raise InvalidEvent(f"the notification cannot be republished: {e}") from e
    validate_publish(checked)
    return checked


def notification_of(
    body: DltPublish, *, id: int | str | None, timestamp: int | None, network: str | None
) -> NetworkNotification:
    """The notification a network emits for a published body (what a DLT adapter does)."""
    return NetworkNotification(
        id=id, timestamp=timestamp, eventType=body.eventType, dataLocation=body.dataLocation,
        relevantMetadata=list(body.relevantMetadata), entityIdHash=body.entityId,
        previousEntityHash=body.previousEntityHash, publisherAddress=body.iss, network=network,
    )
