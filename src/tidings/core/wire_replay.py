"""Wire types of the ICRC-77 replay methods and tidings' replay-credit methods.

Batch in, itemized out: one ``{"Ok": ...}`` or ``{"Err": {"<Variant>": ...}}`` per item.
Variants that ICRC-77 declares without a payload (``Unauthorized``, ``NotFound``,
``PublicationNotFound``, ``SubscriptionNotFound``) carry a Text explaining why, as every
tidings error does. docs/replay.md has examples.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, Struct, UnsetType

from .wire import GenericError, ICRC16Map, OneOf

__all__ = [
    "CreditBalance",
    "CreditFunding",
    "ReplayErr",
    "ReplayFilter",
    "ReplayQuery",
    "ReplayRegistration",
    "ReplayResult",
    "ReplayState",
    "ReplayStatus",
    "ReplayStatusUpdate",
    "replay_err",
    "replay_ok",
    "state_of",
]


class ReplayRegistration(Struct, kw_only=True):
    """A request to replay the events ``[range[0], range[1])`` of ``namespace`` (``range[1]``
    null: up to the last event now, announced in the ``icrc77:replay:end_id`` header)."""

    namespace: str
    range: tuple[int, int | None]
    config: ICRC16Map = []
    memo: str | None = None
    """Optional, up to 32 bytes, base64 (ICRC-16 Blob form); kept with the replay."""


class ReplayErr(OneOf):
    """Exactly one field is set (the ICRC-77 error variant)."""

    Unauthorized: str | UnsetType = UNSET
    UnauthorizedSubscriber: dict[str, str] | UnsetType = UNSET
    """``{"namespace": ...}``."""
    ImproperConfig: str | UnsetType = UNSET
    PaymentRequired: str | UnsetType = UNSET
    RangeTooLarge: str | UnsetType = UNSET
    PublicationNotFound: str | UnsetType = UNSET
    SubscriptionNotFound: str | UnsetType = UNSET
    NotFound: str | UnsetType = UNSET
    CannotCancel: str | UnsetType = UNSET
    GenericError: GenericError | UnsetType = UNSET
    GenericBatchError: str | UnsetType = UNSET


class ReplayResult(Struct, omit_defaults=True):
    Ok: Any = UNSET
    Err: ReplayErr | UnsetType = UNSET


def replay_ok(value: Any) -> ReplayResult:
    return ReplayResult(Ok=value)


def replay_err(code: str, detail: Any) -> ReplayResult:
    fields: dict[str, Any] = {code: detail}
    return ReplayResult(Err=ReplayErr(**fields))


class ReplayState(Struct, omit_defaults=True):
    """ICRC-77 ``ReplayState``: exactly one field set, e.g. ``{"completed": 120}``."""

    pending: UnsetType | None = UNSET
    running: UnsetType | None = UNSET
    completed: int | UnsetType = UNSET
    canceled: int | UnsetType = UNSET
    errored: str | UnsetType = UNSET

    def __post_init__(self) -> None:
        # msgspec turns this into a validation error: a 400 naming the field.
        if sum(getattr(self, f) is not UNSET for f in self.__struct_fields__) != 1:
            raise ValueError("a ReplayState has exactly one of pending, running, completed, canceled, errored")

    @property
    def name(self) -> str:
        for name in self.__struct_fields__:
            if getattr(self, name) is not UNSET:
                return name
        raise ValueError("empty state")


def state_of(name: str, sent: int = 0, detail: str = "") -> ReplayState:
    if name == "pending":
        return ReplayState(pending=None)
    if name == "running":
        return ReplayState(running=None)
    if name == "completed":
        return ReplayState(completed=sent)
    if name == "canceled":
        return ReplayState(canceled=sent)
    return ReplayState(errored=detail)


class ReplayStatus(Struct, kw_only=True):
    """ICRC-77 ``ReplayStatus``, with who asked and which subscription it goes to."""

    replayId: int
    namespace: str
    config: ICRC16Map
    stats: ICRC16Map
    range: tuple[int, int | None]
    """As requested (``null`` end: up to ``icrc77:replay:stats:end_id``)."""
    status: ReplayState
    requester: str
    subscription: int


class ReplayStatusUpdate(Struct, kw_only=True):
    replayId: int
    status: ReplayState


class ReplayFilter(Struct, kw_only=True, omit_defaults=True):
    namespace: str | None = None
    state: str | None = None
    """pending, running, completed, canceled or errored."""
    requester: str | None = None


class ReplayQuery(Struct, kw_only=True, omit_defaults=True):
    """Replays with ids after ``prev``, at most ``take``, optionally filtered."""

    prev: int | None = None
    take: int | None = None
    filter: ReplayFilter | None = None


class CreditFunding(Struct, kw_only=True):
    principal: str
    amount: int


class CreditBalance(Struct, kw_only=True):
    principal: str
    balance: int
    reserved: int
    """Credit the principal's active replays may still spend."""
