"""Publication and subscription configs: the ICRC-72 keys, checked and read.

A config is an ICRC-16 Map's pairs in wire form. tidings reads the keys below and keeps
every other key as given (they show in the info queries). Reading a config either
gives a typed view or raises :class:`ImproperConfig` naming the key and the reason.

Principal lists (allow, deny, controllers) are Arrays whose items are ``Principal``,
``Text`` or ``Blob`` (the UTF-8 bytes of the principal's name).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import filters
from .int64 import INT64_MAX

__all__ = [
    "FILTER",
    "PUBLICATION_CONTROLLERS",
    "PUBLISHERS_ALLOWED",
    "PUBLISHERS_DISALLOWED",
    "SCHEMA",
    "SKIP",
    "STOPPED",
    "SUBSCRIBERS_ALLOWED",
    "SUBSCRIBERS_DISALLOWED",
    "SUBSCRIPTION_CONTROLLERS",
    "ImproperConfig",
    "PublicationConfig",
    "SubscriptionConfig",
    "merge",
]

FILTER = "icrc72:subscription:filter"
SKIP = "icrc72:subscription:skip"
STOPPED = "icrc72:subscription:stopped"
SUBSCRIPTION_CONTROLLERS = "icrc72:subscription:controllers"
PUBLISHERS_ALLOWED = "icrc72:publication:publishers:allowed:list"
PUBLISHERS_DISALLOWED = "icrc72:publication:publishers:disallowed:list"
SUBSCRIBERS_ALLOWED = "icrc72:publication:subscribers:allowed:list"
SUBSCRIBERS_DISALLOWED = "icrc72:publication:subscribers:disallowed:list"
PUBLICATION_CONTROLLERS = "icrc72:publication:controllers"

# tidings' own keys: delivery policy (docs/delivery.md) and publisher authorisation.
RELIABLE = "tidings:subscription:reliable"
ON_ERROR = "tidings:subscription:onError"
RETRY_INITIAL_MS = "tidings:subscription:retry:initialMs"
RETRY_MAX_MS = "tidings:subscription:retry:maxMs"
ACK_DEADLINE_MS = "tidings:subscription:ackDeadlineMs"
MAX_ATTEMPTS = "tidings:subscription:maxAttempts"
MAX_AGE_MS = "tidings:subscription:maxAgeMs"
LEASE_MS = "tidings:subscription:leaseMs"
AUTHORIZATION_URL = "tidings:publication:authorization:url"
AUTHORIZATION_TIMEOUT_MS = "tidings:publication:authorization:timeoutMs"
CLOUDEVENTS = "tidings:subscription:cloudevents"
"""Pushes as CloudEvents (docs/cloudevents.md): Text ``binary`` or ``structured``."""
HANDSHAKE = "tidings:subscription:cloudevents:handshake"
"""Bool: the endpoint must allow tidings' origin (CloudEvents webhook handshake) first."""
DEDUP_WINDOW_MS = "tidings:publication:dedupWindowMs"
"""Nat: how long a publisher's idempotency key is remembered (docs/wire-format.md)."""
DEFAULT_DEDUP_WINDOW_MS = 600_000
"""Ten minutes: longer than the SDK's default publish deadline (a minute) plus a
failover and a restart of a member, and Azure Service Bus's default; the cost is one
small row per keyed event published within the window (BENCHMARKS.md)."""
SCHEMA = "tidings:publication:schema"
"""The schema events are checked against: a Nat schema id, or a Text name (its latest Active version)."""


class ImproperConfig(ValueError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def _last(pairs: Iterable[Sequence[Any]]) -> dict[str, Any]:
    return {k: v for k, v in pairs}


def _principals(key: str, value: Any) -> frozenset[str]:
    items = value.get("Array") if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise ImproperConfig(key, "expected an Array of Principal, Text or Blob")
    out = set()
    for item in items:
        ((tag, x),) = item.items()
        if tag in ("Principal", "Text"):
            out.add(x)
        elif tag == "Blob":
            try:
                out.add(base64.b64decode(x).decode())
            except (binascii.Error, UnicodeDecodeError):
                raise ImproperConfig(key, "a Blob principal must hold UTF-8 text") from None
        else:
            raise ImproperConfig(key, f"list items are Principal, Text or Blob, not {tag}")
    return frozenset(out)


def _nat(v: Any) -> int | None:
    if isinstance(v, dict) and len(v) == 1:
        ((tag, x),) = v.items()
        if tag.startswith("Nat") and tag != "Nats" and type(x) is int:
            return x
    return None


@dataclass(frozen=True, slots=True)
class SubscriptionConfig:
    filter: str | None = None
    predicate: Callable[[Any], bool] | None = None
    """The compiled filter over the event's wire data; None passes everything."""
    skip: tuple[int, int] | None = None
    """``(mod, offset)``: an event is delivered when ``eventId % mod == offset % mod``."""
    stopped: bool = False
    controllers: frozenset[str] | None = None
    reliable: bool = True
    """Reliable (XEP-0021 §3.1.2): resent until confirmed, within the attempt and age limits,
    then dead-lettered. Not reliable: an error answer ends the subscription (or, with
    ``on_error = "deadletter"``, dead-letters the notification at once)."""
    on_error: str = "unsubscribe"
    retry_initial_s: float | None = None
    retry_max_s: float | None = None
    ack_deadline_s: float | None = None
    max_attempts: int | None = None
    max_age_s: float | None = None
    """``None``: the service's setting applies."""
    cloudevents: str | None = None
    """``binary`` or ``structured``: pushes are CloudEvents in that HTTP mode (batched
    when a push holds several); None: tidings' own JSON array of notifications."""
    handshake: bool = False
    """The endpoint must pass the CloudEvents webhook handshake when it is registered."""
    lease_s: float | None = None
    """A ``stream:`` subscription ends by itself once no connection has listened to it
    for this long (``tidings tail``'s own subscription; docs/streaming.md)."""

    @classmethod
    def read(cls, pairs: Iterable[Sequence[Any]]) -> SubscriptionConfig:
        c = _last(pairs)
        text = predicate = None
        if FILTER in c:
            v = c[FILTER]
            if not (isinstance(v, dict) and isinstance(v.get("Text"), str)):
                raise ImproperConfig(FILTER, "expected Text")
            text = v["Text"]
            try:
                predicate = filters.compile_predicate(filters.parse(text))
            except filters.FilterSyntaxError as e:
                raise ImproperConfig(FILTER, str(e)) from None
        skip = None
        if SKIP in c:
            skip = _skip(c[SKIP])
        stopped = _bool(c, STOPPED, False)
        controllers = _principals(SUBSCRIPTION_CONTROLLERS, c[SUBSCRIPTION_CONTROLLERS]) if (
            SUBSCRIPTION_CONTROLLERS in c
        ) else None
        reliable = _bool(c, RELIABLE, True)
        on_error = "unsubscribe"
        if ON_ERROR in c:
            v = c[ON_ERROR]
            if not isinstance(v, dict) or v.get("Text") not in ("unsubscribe", "deadletter"):
                raise ImproperConfig(ON_ERROR, 'expected Text "unsubscribe" or "deadletter"')
            on_error = v["Text"]
        ms = {k: _positive_nat(c, k) for k in (RETRY_INITIAL_MS, RETRY_MAX_MS, ACK_DEADLINE_MS, MAX_AGE_MS, LEASE_MS)}
        attempts = _positive_nat(c, MAX_ATTEMPTS)
        cloudevents = None
        if CLOUDEVENTS in c:
            v = c[CLOUDEVENTS]
            if not isinstance(v, dict) or v.get("Text") not in ("binary", "structured"):
                raise ImproperConfig(CLOUDEVENTS, 'expected Text "binary" or "structured"')
            cloudevents = v["Text"]
        handshake = _bool(c, HANDSHAKE, False)
        if handshake and cloudevents is None:
            raise ImproperConfig(HANDSHAKE, f"asks for the CloudEvents webhook handshake: set {CLOUDEVENTS} too")

        def secs(key: str) -> float | None:
            v = ms[key]
            return None if v is None else v / 1000

        return cls(
            text, predicate, skip, stopped, controllers, reliable, on_error,
            secs(RETRY_INITIAL_MS), secs(RETRY_MAX_MS), secs(ACK_DEADLINE_MS), attempts, secs(MAX_AGE_MS),
            cloudevents, handshake, secs(LEASE_MS),
        )

    def passes(self, event_id: int, data: Any) -> bool:
        """Whether an event is delivered: the filter first, then skip."""
        if self.predicate is not None and not self.predicate(data):
            return False
        if self.skip is not None:
            mod, offset = self.skip
            return event_id % mod == offset % mod
        return True


def _bool(c: dict[str, Any], key: str, default: bool) -> bool:
    if key not in c:
        return default
    v = c[key]
    if v in ({"Bool": True}, {"Text": "true"}):
        return True
    if v in ({"Bool": False}, {"Text": "false"}):
        return False
    raise ImproperConfig(key, 'expected Bool (or Text "true"/"false")')


# The largest value of each duration and count a principal may set (docs/security.md):
# Pub/Sub's bounds for the ack deadline (600 s), an hour of back-off, a week of age; beyond
# them a value is a mistake, or an attack on the broker's timers.
MAX_VALUES: dict[str, int] = {
    "tidings:subscription:retry:initialMs": 600_000,
    "tidings:subscription:retry:maxMs": 3_600_000,
    "tidings:subscription:ackDeadlineMs": 600_000,
    "tidings:subscription:maxAttempts": 100_000,
    "tidings:subscription:maxAgeMs": 7 * 86_400_000,
    "tidings:subscription:leaseMs": 86_400_000,
    "tidings:publication:authorization:timeoutMs": 60_000,
    # A day, as Stripe keeps its keys: beyond it a retry is a new event, and the key table
    # would grow with a day's keyed events per day of window.
    "tidings:publication:dedupWindowMs": 86_400_000,
}
MAX_SKIP = 2**32
"""The largest skip modulus and offset."""


def _positive_nat(c: dict[str, Any], key: str) -> int | None:
    if key not in c:
        return None
    n = _nat(c[key])
    top = MAX_VALUES.get(key, INT64_MAX)
    if n is None or not 1 <= n <= top:
        raise ImproperConfig(key, f"expected a Nat from 1 to {top:,}".replace(",", "_"))
    return n


def _skip(v: Any) -> tuple[int, int]:
    n = _nat(v)
    if n is not None:
        parts = [n]
    elif isinstance(v, dict) and isinstance(v.get("Array"), list):
        parts = [_nat(x) for x in v["Array"]]  # type: ignore[misc]
    elif isinstance(v, dict) and isinstance(v.get("Nats"), list):
        parts = list(v["Nats"])
    else:
        parts = []
    if not 1 <= len(parts) <= 2 or any(p is None for p in parts):
        raise ImproperConfig(SKIP, "expected Nat mod, or Array [Nat mod, Nat offset]")
    mod, offset = parts[0], parts[1] if len(parts) == 2 else 0
    if not isinstance(mod, int) or not isinstance(offset, int) or mod < 1 or offset < 0:
        raise ImproperConfig(SKIP, "mod must be at least 1 and offset a Nat")
    if mod > MAX_SKIP or offset > MAX_SKIP:
        raise ImproperConfig(SKIP, f"mod and offset are at most {MAX_SKIP} (2^32)")
    return mod, offset


@dataclass(frozen=True, slots=True)
class PublicationConfig:
    publishers_allowed: frozenset[str] | None = None
    publishers_disallowed: frozenset[str] = frozenset()
    subscribers_allowed: frozenset[str] | None = None
    subscribers_disallowed: frozenset[str] = frozenset()
    controllers: frozenset[str] | None = None
    authorization_url: str | None = None
    """When set, the publisher approves each subscription (XEP-0021 §4.3): see docs/delivery.md."""
    authorization_timeout_s: float = 5.0
    schema: int | str | None = None
    """The bound schema: an id, or a name meaning its latest Active version (docs/schemas.md)."""
    dedup_window_ns: int = DEFAULT_DEDUP_WINDOW_MS * 1_000_000
    """How long an idempotency key is remembered (``tidings:publication:dedupWindowMs``)."""

    @classmethod
    def read(cls, pairs: Iterable[Sequence[Any]]) -> PublicationConfig:
        c = _last(pairs)

        def lst(key: str) -> frozenset[str] | None:
            return _principals(key, c[key]) if key in c else None

        url = None
        if AUTHORIZATION_URL in c:
            v = c[AUTHORIZATION_URL]
            url = v.get("Text") if isinstance(v, dict) else None
            # xmpp:<JID> asks an XMPP publisher (XEP-0021 §4.3; only its owner's JID is asked).
            if not isinstance(url, str) or not (
                (url.startswith(("http://", "https://")) and "//" != url[-2:])
                or (url.startswith("xmpp:") and len(url) > 5 and not any(ch.isspace() for ch in url))
            ):
                raise ImproperConfig(AUTHORIZATION_URL, "expected Text: an absolute http(s) URL or xmpp:<JID>")
        timeout_ms = _positive_nat(c, AUTHORIZATION_TIMEOUT_MS)
        window_ms = _positive_nat(c, DEDUP_WINDOW_MS)
        schema: int | str | None = None
        if SCHEMA in c:
            v = c[SCHEMA]
            tag, x = next(iter(v.items())) if isinstance(v, dict) and len(v) == 1 else ("", None)
            if tag == "Nat" and isinstance(x, int) and x > 0:
                schema = x
            elif tag == "Text" and isinstance(x, str) and x:
                schema = x
            else:
                raise ImproperConfig(SCHEMA, "expected a Nat schema id or the Text name of a schema")
        return cls(
            lst(PUBLISHERS_ALLOWED),
            lst(PUBLISHERS_DISALLOWED) or frozenset(),
            lst(SUBSCRIBERS_ALLOWED),
            lst(SUBSCRIBERS_DISALLOWED) or frozenset(),
            lst(PUBLICATION_CONTROLLERS),
            url,
            5.0 if timeout_ms is None else timeout_ms / 1000,
            schema,
            (DEFAULT_DEDUP_WINDOW_MS if window_ms is None else window_ms) * 1_000_000,
        )

    def publisher_refusal(self, principal: str) -> str | None:
        """The key of the list that refuses ``principal`` as a publisher, or None. The
        denied list is asked first: it wins over the allowed list."""
        if principal in self.publishers_disallowed:
            return PUBLISHERS_DISALLOWED
        if self.publishers_allowed is not None and principal not in self.publishers_allowed:
            return PUBLISHERS_ALLOWED
        return None

    def subscriber_refusal(self, principal: str) -> str | None:
        """The key of the list that refuses ``principal`` as a subscriber, or None."""
        if principal in self.subscribers_disallowed:
            return SUBSCRIBERS_DISALLOWED
        if self.subscribers_allowed is not None and principal not in self.subscribers_allowed:
            return SUBSCRIBERS_ALLOWED
        return None

    def publisher_allowed(self, principal: str) -> bool:
        return self.publisher_refusal(principal) is None

    def subscriber_allowed(self, principal: str) -> bool:
        return self.subscriber_refusal(principal) is None


def merge(pairs: Sequence[Sequence[Any]], changes: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """Apply ``[key, value]`` changes to config pairs: a value sets the key (in place if
    present, else appended), ``None`` removes it. Other keys keep their order."""
    out = [list(p) for p in pairs]
    for key, value in changes:
        first = next((i for i, p in enumerate(out) if p[0] == key), None)
        out = [p for p in out if p[0] != key]
        if value is not None:
            out.insert(len(out) if first is None else first, [key, value])
    return out


def redact_url(url: str) -> str:
    """A URL with what could be a credential hidden: ``user:password@`` and the query's
    values (``?token=...``). Only its owner set them; nobody else reads them back."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    path, q, query = path.partition("?")
    if q:
        query = "&".join(f"{k.partition('=')[0]}=***" if "=" in k else "***" for k in query.split("&"))
    return f"{scheme}://{authority}{slash}{path}{q}{query}"


def public_config(pairs: list[Any]) -> list[Any]:
    """A publication's config as any principal may see it: credentials in its
    authorisation URL redacted (docs/security.md)."""
    out = []
    for pair in pairs:
        key, value = pair[0], pair[1]
        if key == AUTHORIZATION_URL and isinstance(value, dict) and isinstance(value.get("Text"), str):
            pair = [key, {"Text": redact_url(value["Text"])}]
        out.append(pair)
    return out
