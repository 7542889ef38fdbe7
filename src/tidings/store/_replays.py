"""What the store keeps for ICRC-77 replays, and the part of the interface for it.

A replay's notifications are ordinary pending notifications (same id sequence, same
confirmation, retries and dead letters) plus a copy of the event they carry, with the
replay headers appended: an archived event is no longer in the hot log, so the copy is
what a resend after a restart or a redrive sends. Copies whose notification is neither
pending nor dead-lettered any more are removed by :meth:`ReplayStore.sweep_replay_notes`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from ..core.replay import append_pairs
from ._cluster import Fence

if TYPE_CHECKING:
    from ._records import Stat, StoredEvent

__all__ = ["InsufficientCredit", "ReplayCounts", "ReplayRecord", "ReplayStore", "with_pairs"]


@dataclass(slots=True, kw_only=True)
class ReplayRecord:
    id: int = 0
    """Assigned by :meth:`ReplayStore.create_replay`."""
    requester: str
    namespace: str
    subscription_id: int
    from_id: int
    to_id: int
    """Exclusive end, resolved at registration."""
    open_end: bool = False
    """The request gave no end: notifications carry ``icrc77:replay:end_id``."""
    config: list[Any] = field(default_factory=list)
    memo: str | None = None
    state: str = "pending"
    detail: str = ""
    """The text of ``errored``."""
    position: int = 0
    """The last event id considered (sent, filtered out or missing); ``from_id - 1`` at first."""
    sent: int = 0
    expected: int = 0
    price: int = 0
    """Credit per event sent, fixed at registration."""
    charged: int = 0
    created_at: int = 0
    updated_at: int = 0


@dataclass(frozen=True, slots=True)
class ReplayCounts:
    pending: int
    dead_lettered: int


class InsufficientCredit(Exception):
    """Recording a replay batch would take the requester's credit below zero."""


class ReplayStore(ABC):
    @abstractmethod
    async def create_replay(
        self, record: ReplayRecord, *, limit: int | None = None, total: int | None = None
    ) -> ReplayRecord:
        """Store a new replay; its ``id`` is assigned (ids increase, never reused).

        With ``limit``: ``LimitReached``, and nothing written, if ``record.requester``
        has ``limit`` replays active (pending or running) already; with ``total``, the
        same if ``total`` replays of all requesters are (``everyone`` set). Counted and
        inserted in one atomic step (as ``create_subscription``)."""

    @abstractmethod
    async def list_replays(
        self,
        after: int | None = None,
        limit: int | None = None,
        *,
        namespace: str | None = None,
        states: Sequence[str] | None = None,
        requester: str | None = None,
    ) -> list[ReplayRecord]:
        """Replays ordered by id, those after ``after``, optionally filtered."""

    @abstractmethod
    async def get_replays(self, ids: Sequence[int]) -> list[ReplayRecord]:
        """The replays among ``ids``, ordered by id."""

    @abstractmethod
    async def move_replay(
        self, replay_id: int, state: str, *, detail: str = "", from_states: Iterable[str], now: int
    ) -> ReplayRecord | None:
        """Set the state if the current one is in ``from_states``; the record, or None."""

    @abstractmethod
    async def record_replay_batch(
        self,
        replay_id: int,
        subscription_id: int,
        events: Sequence[StoredEvent],
        position: int,
        stats: Iterable[Stat] = (),
        *,
        now: int,
        ids: Sequence[int] | None = None,
        fence: Fence | None = None,
    ) -> list[int] | None:
        """In one transaction: record ``events`` (copies, replay headers included) as
        pending notifications of the subscription, keep their copies, move the replay's
        position and ``sent``, and debit its requester ``price`` per event. The
        notifications take ``ids`` (kept for the replay, :meth:`replay_id_base`) when
        given, else new ones.

        Nothing is written and None is returned when the replay is not ``running`` or the
        subscription is gone; :class:`InsufficientCredit` is raised (nothing written)
        when the credit does not cover the batch. With no events, only the position moves.
        """

    @abstractmethod
    async def replay_id_base(self, replay_id: int, n: int) -> int:
        """The first of ``n`` notification ids kept for a replay: taken on the first call
        (durably, before this returns: no other notification gets them, a crash and
        restart included) and the same on every later call. The replay's event with id
        ``from_id + k`` is pushed as notification ``base + k``, so a batch pushed again
        after a crash keeps its notification ids (:meth:`record_replay_confirmed`)."""

    @abstractmethod
    async def record_replay_confirmed(
        self,
        replay_id: int,
        subscription_id: int,
        confirmed: Sequence[tuple[int, StoredEvent]],
        position: int,
        stats: Iterable[Stat] = (),
        *,
        created_at: int,
        now: int,
        fence: Fence | None = None,
    ) -> bool:
        """In one transaction, for a replay batch already pushed under its kept ids and
        confirmed by the endpoint: a ``confirmed`` delivery record (replay, one attempt)
        per ``(notification id, event copy)``, the replay's position and ``sent`` moved,
        its requester debited ``price`` per event, and ``stats`` applied. No pending
        notification or event copy is written: nothing is left to send.

        The pushes happened, so they are recorded whatever the replay's state now (a cancel
        does not recall what was sent) and if the subscription is gone meanwhile (the
        subscriber is then recorded as ``''``). Nothing is written and False is returned
        only when the replay does not exist; :class:`InsufficientCredit` is raised
        (nothing written) when the credit does not cover the batch.
        """

    @abstractmethod
    async def replay_events(self, notification_ids: Sequence[int]) -> dict[int, StoredEvent]:
        """The event copies of the replay notifications among these ids."""

    @abstractmethod
    async def replay_counts(self, replay_ids: Sequence[int]) -> dict[int, ReplayCounts]:
        """Per replay: its notifications still pending, and dead-lettered."""

    @abstractmethod
    async def sweep_replay_notes(self, limit: int | None = None) -> int:
        """Remove copies whose notification is settled or dropped, at most ``limit`` (so one
        call never holds the writer long); return how many."""

    @abstractmethod
    async def read_range(
        self, namespace: str, after_id: int, before_id: int, limit: int, *, pairs: bytes | None = None
    ) -> list[StoredEvent]:
        """Events of ``namespace`` in the hot log with ``after_id < id < before_id``, by id;
        with the header ``pairs`` appended to each, if given (what a replay adds:
        ``tidings.core.replay.append_pairs``), so a replay makes no copy of its own."""

    @abstractmethod
    async def last_event_id(self, namespace: str) -> int:
        """The highest event id ``namespace`` has been given (0: none), trimmed or not."""

    # -- the credit ledger --------------------------------------------------------------

    @abstractmethod
    async def fund_credit(self, principal: str, amount: int) -> int:
        """Add ``amount`` (may be negative, not below zero) to a balance; the new balance.
        Raises :class:`InsufficientCredit` if it would go below zero."""

    @abstractmethod
    async def credit_balance(self, principal: str) -> int:
        """A principal's credit (0 if never funded)."""


def with_pairs(events: list[StoredEvent], pairs: bytes | None) -> list[StoredEvent]:
    """``events`` with the header ``pairs`` appended to each (``read_range``)."""
    if pairs is None:
        return events
    return [msgspec.structs.replace(e, headers=append_pairs(e.headers, pairs)) for e in events]
