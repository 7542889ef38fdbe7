"""ICRC-77 replay rules: the state machine, ranges, the request config, pricing, headers.

Pure: the broker (``tidings.broker.replay``) does the I/O. docs/replay.md explains the
choices made where ICRC-77 leaves them open.

States::

    pending ──> running ──> completed(n)
       │           ├──────> canceled(n)
       │           └──────> errored(text)
       ├──> completed(0)  (nothing of the range is left to send)
       ├──> canceled(0)
       └──> errored(text)

``n`` is the number of notifications sent. A terminal state never changes again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import config as cfg

__all__ = [
    "ACTIVE",
    "END_HEADER",
    "ID_HEADER",
    "PRICING",
    "STATES",
    "SUBSCRIPTION",
    "TERMINAL",
    "Pricing",
    "ReplayConfig",
    "ReplayRuleError",
    "can_move",
    "cost",
    "read_pricing",
    "resolve_range",
    "with_replay_headers",
]

STATES: Final = ("pending", "running", "completed", "canceled", "errored")
ACTIVE: Final = frozenset({"pending", "running"})
TERMINAL: Final = frozenset({"completed", "canceled", "errored"})
_MOVES: Final = {
    "pending": frozenset({"running", "completed", "canceled", "errored"}),
    "running": frozenset({"completed", "canceled", "errored"}),
}

ID_HEADER: Final = "icrc77:replay:id"
END_HEADER: Final = "icrc77:replay:end_id"
PRICING: Final = "icrc77:pricing"
SUBSCRIPTION: Final = "icrc77:replay:subscription"
"""Request config key: the id (Nat) of the requester's subscription the replay goes to."""


class ReplayRuleError(ValueError):
    """A request breaks a rule; ``code`` is the ICRC-77 error variant to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def can_move(state: str, to: str) -> bool:
    """Whether a replay in ``state`` may move to ``to``."""
    return to in _MOVES.get(state, frozenset())


def resolve_range(start: int, end: int | None, last_id: int, max_range: int) -> tuple[int, int]:
    """The closed-open id range ``[from, to)`` a request asks for, checked.

    ``end`` None means up to the last event now (``last_id``). Event ids start at 1, so a
    ``from`` of 0 reads as 1. Raises ``ImproperConfig`` for an empty or inverted range or
    one ending after the last event, ``RangeTooLarge`` beyond ``max_range`` events.
    """
    if start < 0 or (end is not None and end < 0):
        raise ReplayRuleError("ImproperConfig", "range bounds are Nats")
    lo = max(start, 1)
    hi = last_id + 1 if end is None else end
    if hi > last_id + 1:
        raise ReplayRuleError(
            "ImproperConfig", f"the range ends at {hi} (exclusive) but the namespace's last event is {last_id}"
        )
    if hi <= lo:
        what = f"the namespace's last event is {last_id}" if end is None else f"[{start}, {end}) is empty"
        raise ReplayRuleError("ImproperConfig", f"nothing to replay: {what}")
    if hi - lo > max_range:
        raise ReplayRuleError(
            "RangeTooLarge", f"[{lo}, {hi}) holds {hi - lo} events; at most {max_range} per request"
        )
    return lo, hi


def _unwrap(value: Any) -> tuple[bool, Any]:
    """``(present, value)`` of a config value that may be wrapped in ``#Option``."""
    if isinstance(value, dict) and len(value) == 1 and "Option" in value:
        inner = value["Option"]
        return (inner is not None), inner
    return True, value


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """What a replay request's config asks for; filter and skip as for live delivery."""

    subscription: int | None
    """The requester's subscription to deliver to; None: the first (lowest id) that fits."""
    rules: cfg.SubscriptionConfig
    """The compiled filter and skip (only those two fields are meaningful)."""

    @property
    def filter(self) -> str | None:
        return self.rules.filter

    @classmethod
    def read(cls, pairs: Iterable[Sequence[Any]], subscription_pairs: Iterable[Sequence[Any]] = ()) -> ReplayConfig:
        """Read a request config. A key the request does not give is taken from the
        subscription's config (``subscription_pairs``); ``#Option(null)`` in the request
        means "none", overriding the subscription. Raises ``ReplayRuleError``
        (``ImproperConfig``) for a malformed key or an unsupported filter or skip."""
        own = {k: v for k, v in pairs}
        sub = {k: v for k, v in subscription_pairs}
        sub_id = None
        if SUBSCRIPTION in own:
            present, v = _unwrap(own[SUBSCRIPTION])
            if present:
                n = cfg._nat(v)
                if n is None:
                    raise ReplayRuleError("ImproperConfig", f"{SUBSCRIPTION}: expected a Nat subscription id")
                sub_id = n
        chosen: list[tuple[str, Any]] = []
        for key in (cfg.FILTER, cfg.SKIP):
            if key in own:
                present, v = _unwrap(own[key])
                if present:
                    chosen.append((key, v))
            elif key in sub:
                chosen.append((key, sub[key]))
        try:
            rules = cfg.SubscriptionConfig.read(chosen)
        except cfg.ImproperConfig as e:
            raise ReplayRuleError("ImproperConfig", str(e)) from None
        return cls(sub_id, rules)


@dataclass(frozen=True, slots=True)
class Pricing:
    """A publication's ``icrc77:pricing``: credit units per event sent."""

    per_event: int
    currency: str | None = None


def read_pricing(pairs: Iterable[Sequence[Any]]) -> Pricing | None:
    """The pricing in a publication config, or None. Accepts ``#Class`` (as ICRC-77 writes
    it) or ``#Map`` with ``perEvent`` (Nat) and optional ``currency`` (Text)."""
    c = {k: v for k, v in pairs}
    if PRICING not in c or c[PRICING] is None:
        return None
    v = c[PRICING]
    fields: dict[str, Any] = {}
    if isinstance(v, dict) and isinstance(v.get("Class"), list):
        for prop in v["Class"]:
            if not isinstance(prop, dict) or not isinstance(prop.get("name"), str):
                raise cfg.ImproperConfig(PRICING, "Class properties need a name and a value")
            fields[prop["name"]] = prop.get("value")
    elif isinstance(v, dict) and isinstance(v.get("Map"), list):
        for pair in v["Map"]:
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                raise cfg.ImproperConfig(PRICING, "Map entries are [Text, value] pairs")
            fields[pair[0]] = pair[1]
    else:
        raise cfg.ImproperConfig(PRICING, "expected a Class or Map with perEvent (Nat) and currency (Text)")
    per_event = cfg._nat(fields.get("perEvent"))
    if per_event is None:
        raise cfg.ImproperConfig(PRICING, "perEvent must be a Nat")
    currency = fields.get("currency")
    if currency is not None:
        if not (isinstance(currency, dict) and isinstance(currency.get("Text"), str)):
            raise cfg.ImproperConfig(PRICING, "currency must be Text")
        currency = currency["Text"]
    return Pricing(per_event, currency)


def cost(pricing: Pricing | None, events: int) -> int:
    """Credit ``events`` notifications cost under ``pricing`` (nothing without one)."""
    return 0 if pricing is None else pricing.per_event * events


def kept_id(base: int, from_id: int, event_id: int) -> int:
    """The notification id a replay keeps for ``event_id``, however often its batch is
    pushed: the ids are set aside once for the whole range, from ``base`` (the store's
    ``replay_id_base``), in the range's order from ``from_id``."""
    return base + event_id - from_id


def with_replay_headers(headers: bytes, replay_id: int, end_id: int | None) -> bytes:
    """The event's header pairs (JSON) with the replay headers appended, never rewritten."""
    return append_pairs(headers, replay_pairs(replay_id, end_id))


def replay_pairs(replay_id: int, end_id: int | None) -> bytes:
    """The replay headers as JSON pairs without brackets, the same for all of a replay's events."""
    pairs = b'["' + ID_HEADER.encode() + b'",{"Nat":' + str(replay_id).encode() + b"}]"
    if end_id is not None:
        pairs += b',["' + END_HEADER.encode() + b'",{"Nat":' + str(end_id).encode() + b"}]"
    return pairs


def append_pairs(headers: bytes, pairs: bytes) -> bytes:
    """``headers`` (a JSON array of pairs) with ``pairs`` appended."""
    body = headers.strip()
    if body in (b"", b"[]"):
        return b"[" + pairs + b"]"
    return body[:-1] + b"," + pairs + b"]"
