"""Wire types of the ICRC-72 methods, as msgspec Structs.

These Structs are the single description of what travels: the HTTP API decodes
bodies with them, the SDK encodes with them, and the OpenAPI document is generated
from them. Field names follow the ICRC-72 draft (``eventId`` next to ``prev_id`` is
the draft's own mix). ICRC-16 values inside are kept in wire form (``Any``) and
checked by :func:`tidings.core.values.check`.

Results are batch in, itemized out: one entry per input item, in input order, each
``{"Ok": ...}`` or ``{"Err": {"<Code>": ...}}``, or ``null`` for an item not processed.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

__all__ = [
    "BroadcasterInfo",
    "BroadcasterSubscriptionsQuery",
    "ConfirmResult",
    "DeadLetterInfo",
    "DeadLetterQuery",
    "Err",
    "Event",
    "EventNotification",
    "EventRelay",
    "GenericError",
    "InfoQuery",
    "ItemResult",
    "NotificationResult",
    "OneOf",
    "PendingAuthorization",
    "PrincipalCreate",
    "PrincipalCreated",
    "PublicationBroadcastersQuery",
    "PublicationInfo",
    "PublicationRegistration",
    "PublicationUpdate",
    "PublisherInfo",
    "SecretRotation",
    "SubscriberInfo",
    "SubscriptionInfo",
    "SubscriptionQuery",
    "SubscriptionRegistration",
    "SubscriptionUpdate",
    "TokenRevocation",
    "TokensRevoked",
    "Whoami",
]

ICRC16 = Any
"""An ICRC-16 value in wire form (``{"Nat": 5}``)."""

ICRC16Map = list[tuple[str, Any]]
"""The pairs of an ICRC-16 Map: ``[["key", {"Text": "v"}], ...]``."""


class Event(Struct, kw_only=True, omit_defaults=True):
    """An event as a publisher hands it to ``icrc72_publish``.

    The broadcaster assigns ``id``, ``prev_id`` and ``timestamp``; see docs/wire-format.md
    for what a publisher-supplied ``id`` means.
    """

    namespace: str
    data: ICRC16
    id: int | str | None = None
    timestamp: int | None = None
    headers: ICRC16Map | None = None
    idempotencyKey: str | None = None
    """The publisher's key for this event (docs/wire-format.md, "Idempotency keys"): a
    repeat of it within the publication's deduplication window stores nothing and is
    answered with the first event's id."""


class EventRelay(Struct, kw_only=True, omit_defaults=True):
    """An event as stored in the log and relayed between broadcasters."""

    id: int
    prev_id: int | None
    timestamp: int
    namespace: str
    source: str
    data: ICRC16
    headers: ICRC16Map = []


class EventNotification(Struct, kw_only=True):
    """One event as pushed to a subscriber (``icrc72_handle_notification``)."""

    id: int
    eventId: int
    prev_id: int | None
    timestamp: int
    namespace: str
    data: ICRC16
    source: str
    filter: str | None = None
    headers: ICRC16Map = []


class GenericError(Struct):
    error_code: int
    message: str


class OneOf(Struct, omit_defaults=True):
    """An error variant on the wire: exactly one field is set, and its name is the code."""

    @property
    def code(self) -> str:
        for name in self.__struct_fields__:
            if getattr(self, name) is not UNSET:
                return name
        raise ValueError("empty error")


class Err(OneOf):
    """An item's error: exactly one field is set. Which codes a method uses is in docs."""

    Unauthorized: str | UnsetType = UNSET
    ImproperId: str | UnsetType = UNSET
    ImproperConfig: str | UnsetType = UNSET
    NotFound: str | UnsetType = UNSET
    Busy: str | UnsetType = UNSET
    GenericError: GenericError | UnsetType = UNSET
    GenericBatchError: str | UnsetType = UNSET


class ItemResult(Struct, omit_defaults=True):
    """``{"Ok": value}`` or ``{"Err": {...}}``; a publish answered from its idempotency
    key (nothing stored this time) also carries ``"repeat": true``."""

    Ok: Any = UNSET
    Err: Err | UnsetType = UNSET
    repeat: bool | UnsetType = UNSET


class NotificationResult(Struct, omit_defaults=True):
    """A subscriber's answer for one notification in trusted mode."""

    Ok: Any = UNSET
    Err: Any = UNSET


class ConfirmResult(Struct, omit_defaults=True):
    """``{"allAccepted": null}`` or ``{"itemized": [...]}``, as ICRC-72 ``confirm_messages``."""

    allAccepted: UnsetType | None = UNSET
    itemized: list[ItemResult | None] | UnsetType = UNSET


class PublicationRegistration(Struct, kw_only=True):
    namespace: str
    config: ICRC16Map = []


class SubscriptionRegistration(Struct, kw_only=True):
    """A subscription request. ``endpoint`` is where notifications are POSTed.

    ``mode`` chooses the confirmation: ``trusted`` (the endpoint's 2xx answer confirms)
    or ``oneshot`` (the subscriber calls ``icrc72_confirm_notifications`` later).
    """

    namespace: str
    endpoint: str | None = None
    config: ICRC16Map = []
    filter: str | None = None
    skip: int | list[int] | None = None
    stopped: bool = False
    mode: Literal["trusted", "oneshot"] = "trusted"
    reliable: bool = True
    """XEP-0021 §3.1.2; stored as ``tidings:subscription:reliable``."""
    authInfo: Any = None
    """XEP-0021 §3.1.1: passed untouched to the publisher's authorisation endpoint."""
    secret: str | None = None
    """The secret pushes are signed with (``whsec_<base64>``); the broker makes one if None."""


class SecretRotation(Struct, kw_only=True):
    """A new signing secret for subscription ``id``; the old ones keep signing for
    ``overlap_s`` seconds (None: the service's ``secret_overlap_s``)."""

    id: int
    overlap_s: int | None = None


class PublicationUpdate(Struct, kw_only=True):
    """Changes to a publication's config: each pair sets a key, or removes it when the
    value is ``null``."""

    namespace: str
    config: list[tuple[str, Any | None]] = []


class SubscriptionUpdate(Struct, kw_only=True):
    """Changes to a subscription: config pairs as for publications, and optionally a new
    endpoint or confirmation mode."""

    id: int
    config: list[tuple[str, Any | None]] = []
    endpoint: str | None = None
    mode: Literal["trusted", "oneshot"] | None = None
    authInfo: Any = UNSET
    """New authorisation info for the publisher (XEP-0021 §3.1.1). A new endpoint or
    authInfo on a publication that approves its subscribers is asked about again."""


class InfoQuery(Struct, kw_only=True, omit_defaults=True):
    """Paging for the info queries: items after ``prev``, at most ``take`` of them."""

    prev: str | None = None
    take: int | None = None
    statsFilter: list[str] | None = None


class SubscriptionQuery(Struct, kw_only=True, omit_defaults=True):
    namespace: str | None = None
    prev: int | None = None
    take: int | None = None
    statsFilter: list[str] | None = None


class PublicationBroadcastersQuery(Struct, kw_only=True, omit_defaults=True):
    """``icrc72_get_publication_broadcasters``: the broadcasters serving one publication."""

    namespace: str
    prev: str | None = None
    take: int | None = None
    statsFilter: list[str] | None = None


class BroadcasterSubscriptionsQuery(Struct, kw_only=True, omit_defaults=True):
    """``icrc72_get_broadcaster_subscriptions``: the subscriptions one broadcaster delivers
    (the one answering, unless ``broadcaster`` names another), by id."""

    broadcaster: str | None = None
    prev: int | None = None
    take: int | None = None
    statsFilter: list[str] | None = None


class PublicationInfo(Struct, kw_only=True):
    namespace: str
    config: ICRC16Map
    stats: ICRC16Map


class PublisherInfo(Struct, kw_only=True):
    publisher: str
    stats: ICRC16Map


class SubscriberInfo(Struct, kw_only=True):
    subscriber: str
    stats: ICRC16Map


class SubscriptionInfo(Struct, kw_only=True):
    id: int
    subscriber: str
    namespace: str
    endpoint: str | None
    mode: str
    config: ICRC16Map
    stats: ICRC16Map


class BroadcasterInfo(Struct, kw_only=True):
    broadcaster: str
    stats: ICRC16Map


class PrincipalCreate(Struct, kw_only=True):
    name: str
    admin: bool = False


class PrincipalCreated(Struct, kw_only=True):
    name: str
    token: str
    admin: bool


class TokenRevocation(Struct, kw_only=True):
    """Revoke ``token`` of ``principal``, or every token it has when ``token`` is absent."""

    principal: str
    token: str | None = None


class TokensRevoked(Struct, kw_only=True):
    revoked: int


class DeadLetterQuery(Struct, kw_only=True, omit_defaults=True):
    """Dead letters after ``prev`` (an id), of one subscription or of all the caller's."""

    subscription: int | None = None
    prev: int | None = None
    take: int | None = None


class DeadLetterInfo(Struct, kw_only=True):
    id: int
    """The notification id; a redrive sends the notification again under it."""
    subscription: int
    subscriber: str
    namespace: str
    eventId: int
    attempts: int
    reason: str
    timestamp: int
    """When it was dead-lettered, UTC nanoseconds."""


class PendingAuthorization(Struct, kw_only=True):
    """A subscription request waiting for its publisher's approval (XEP-0021 §4.3)."""

    namespace: str
    subscriber: str
    since: int


class Whoami(Struct):
    name: str
    admin: bool


class PrincipalInfo(Struct, kw_only=True):
    """A principal as ``tidings_get_principals`` lists it (admins only): never a token."""

    name: str
    admin: bool
    createdAt: int
    """UTC nanoseconds."""


def ok(value: Any = None) -> ItemResult:
    return ItemResult(Ok=value)


def err(code: str, detail: Any) -> ItemResult:
    return ItemResult(Err=Err(**{code: detail}))


encoder = msgspec.json.Encoder()
