"""The store interface every backend implements, and the records it speaks in.

A store holds the append-only event log, the registry (principals, publications,
subscriptions), the notifications not yet confirmed, and statistics counters.

Contract (checked for every backend by ``tests/test_store_contract.py``):

* ``append`` assigns each namespace a gap-free chain of event ids starting at 1, each
  event's ``prev_id`` being the previous id of its namespace (``None`` for the first),
  and a global ``seq`` increasing across namespaces. It returns only once the events
  are durable. Concurrent calls may share one transaction (group commit); a failed
  call leaves no trace and no gap.
* Writes that belong together (notifications and the subscription cursor, counters
  and what they count) are applied atomically.
* A store may open notifications in the same transaction as the events they are for
  (``route_appends``); one that cannot says so, and its caller opens them itself.
* Reads never see a half-applied write.
* A creation given a per-principal ``limit`` counts and inserts in one atomic step
  (``LimitReached`` when at it): concurrent creations never exceed it.
"""


from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence

from ._clocked import Clocked
from ._cluster import Fence
from ._deliveries import DeliveryRecord
from ._records import (
    AppendRouter,
    DeadLetter,
    KeyRecord,
    NewEvent,
    PendingNotification,
    PrincipalRecord,
    PublicationRecord,
    Route,
    Stat,
    StoredEvent,
    SubscriptionRecord,
    SubscriptionSecret,
)
from ._replays import ReplayStore
from ._schemas import SchemaStore

__all__ = [
    "AppendRouter",
    "DeadLetter",
    "DeliveryRecord",
    "DeliveryStore",
    "EventStore",
    "KeyRecord",
    "NewEvent",
    "PendingNotification",
    "PrincipalRecord",
    "PrincipalStore",
    "PublicationRecord",
    "RegistryStore",
    "ReplayStore",
    "Route",
    "SchemaStore",
    "Stat",
    "StatisticsStore",
    "Store",
    "StoredEvent",
    "SubscriptionRecord",
    "SubscriptionSecret",
]


class PrincipalStore(ABC):
    """Principals and their token hashes."""

    @abstractmethod
    async def create_principal(self, record: PrincipalRecord, token_hash: bytes) -> bool:
        """Create a principal with its first token; False if the name is taken."""

    @abstractmethod
    async def add_token(self, name: str, token_hash: bytes) -> bool:
        """Add a token to an existing principal; False if there is no such principal."""

    @abstractmethod
    async def principal_by_token(self, token_hash: bytes) -> PrincipalRecord | None: ...

    @abstractmethod
    async def revoke_tokens(self, name: str, token_hash: bytes | None = None) -> int:
        """Delete the principal's tokens (only the one with ``token_hash`` if given, and
        only if it is that principal's); return how many were deleted."""

    @abstractmethod
    async def list_principals(self) -> list[PrincipalRecord]: ...


class RegistryStore(ABC):
    """Publications, their publishers, subscriptions and their signing secrets."""

    @abstractmethod
    async def create_publication(
        self, record: PublicationRecord, publisher: str | None = None, *, limit: int | None = None
    ) -> bool:
        """Store a new publication, with ``publisher`` as its first publisher in the same
        transaction (so no reader sees the one without the other); False, and nothing
        written, if its namespace is already registered.

        With ``limit``: ``LimitReached``, and nothing written, if ``record.owner`` owns
        ``limit`` publications already. The count and the insert are one atomic step, so
        creations made at once, through one broadcaster or several, never exceed it."""

    @abstractmethod
    async def update_publication(self, record: PublicationRecord, expected: PublicationRecord | None = None) -> bool:
        """Set a publication's owner and config. With ``expected`` (the record the change
        was computed from), a compare-and-set: written only while the stored owner and
        config are still ``expected``'s, so two changes made at once (through one
        broadcaster or several) never lose one another. True if written."""

    @abstractmethod
    async def list_publications(self, after: str | None = None, limit: int | None = None) -> list[
        PublicationRecord
    ]:
        """Publications ordered by namespace, those after ``after``."""

    @abstractmethod
    async def delete_publication(self, namespace: str) -> list[int]:
        """Remove a publication, its publishers, and the subscriptions to exactly its
        namespace (with their pending notifications); return those subscriptions' ids.
        The namespace's events stay in the log and its id chain continues if it is
        registered again."""

    @abstractmethod
    async def add_publisher(self, namespace: str, principal: str) -> bool:
        """Register ``principal`` as a publisher of ``namespace``; False if it already was."""

    @abstractmethod
    async def list_publishers(self, namespace: str | None = None) -> list[tuple[str, str]]:
        """``(namespace, principal)`` pairs, ordered by namespace then principal."""

    # -- subscriptions ----------------------------------------------------------------

    @abstractmethod
    async def create_subscription(self, record: SubscriptionRecord, *, limit: int | None = None) -> SubscriptionRecord:
        """Store a subscription; ``id`` and ``cursor`` (the log head now) are assigned.

        With ``limit``: ``LimitReached``, and nothing written, if ``record.subscriber``
        holds ``limit`` subscriptions already (counted and inserted atomically, as in
        ``create_publication``)."""

    @abstractmethod
    async def update_subscription(self, record: SubscriptionRecord, expected: SubscriptionRecord | None = None) -> bool:
        """Replace config, endpoint and mode (not the cursor). With ``expected``, a
        compare-and-set as in ``update_publication``: written only while the stored
        endpoint, mode and config are still ``expected``'s. True if written."""

    @abstractmethod
    async def move_cursor(self, subscription_id: int, cursor: int, *, fence: Fence | None = None) -> None:
        """Set a subscription's cursor (starting a stopped subscription skips ahead)."""

    @abstractmethod
    async def delete_subscription(self, subscription_id: int, *, keep_dead_letters: bool = False) -> None:
        """Remove a subscription and its pending notifications, and its dead letters unless
        ``keep_dead_letters`` (a subscription ended by delivery: its subscriber may still
        list and drop them, ``list_dead_letters(ended_of=...)``)."""

    @abstractmethod
    async def list_subscriptions(
        self, namespace: str | None = None, after: int | None = None, limit: int | None = None
    ) -> list[SubscriptionRecord]:
        """Subscriptions ordered by id."""

    # -- signing secrets --------------------------------------------------------------

    @abstractmethod
    async def add_secret(
        self, subscription_id: int, secret: str, expires_previous_at: int | None, *, created_at: int
    ) -> bool:
        """Add a signing secret to a subscription; False (nothing written) if there is none.

        With ``expires_previous_at``, the subscription's other secrets expire then at the
        latest (an earlier expiry stays); secrets expired by ``created_at`` are removed.
        ``delete_subscription`` and ``delete_publication`` remove a subscription's secrets.
        """

    @abstractmethod
    async def secrets(self, subscription_id: int, now: int) -> list[SubscriptionSecret]:
        """A subscription's secrets not expired at ``now``, newest first."""


class EventStore(Clocked, ABC):
    """The append-only event log."""

    @abstractmethod
    async def append(self, events: Sequence[NewEvent], stats: Iterable[Stat] = ()) -> list[StoredEvent]:
        """Append events durably, with counter increments in the same transaction."""

    @abstractmethod
    async def read_after(
        self, seq: int, namespaces: Sequence[str] | None = None, limit: int = 1000
    ) -> list[StoredEvent]:
        """Events with ``seq`` greater than the given one, in ``seq`` order."""

    @abstractmethod
    async def read_seqs(self, seqs: Sequence[int]) -> list[StoredEvent]:
        """The events with these ``seq`` values, in ``seq`` order (missing ones skipped)."""

    @abstractmethod
    async def count_events(self, namespace: str, upto: int | None = None) -> int:
        """How many events of ``namespace`` the log holds with ``seq <= upto`` (all if None)."""

    @abstractmethod
    async def head(self) -> int:
        """The highest ``seq`` in the log (0 when empty)."""

    def route_appends(self, router: AppendRouter | None) -> bool:
        """Have ``router`` open notifications in the transaction of each append from now on
        (None: stop). Returns whether this store does so; by default it does not, and
        notifications are opened by ``open_notifications`` after the events commit."""
        return False

    @abstractmethod
    async def find_keys(self, keys: Sequence[tuple[str, str]], now: int) -> dict[tuple[str, str], KeyRecord]:
        """The idempotency keys among ``keys`` (namespace, key) still live at ``now``."""

    @abstractmethod
    async def expire_keys(self, now: int, limit: int = 10_000) -> int:
        """Delete at most ``limit`` keys expired at ``now``; returns how many."""

    @abstractmethod
    async def trim_events(self, namespace: str, before: int) -> int:
        """Delete the events of ``namespace`` stamped before ``before`` (UTC ns); returns how many.

        A store several broadcasters share also keeps every event not older than
        ``clock.now_ns() - before`` by its own clock, whatever the caller's clock said.

        Events that unconfirmed notifications or dead letters still point at are kept,
        and the namespace's id chain goes on where it was."""


class DeliveryStore(Clocked, ABC):
    """Notifications pending confirmation, dead letters, and the record of outcomes."""

    @abstractmethod
    async def open_notifications(
        self,
        subscription_id: int,
        events: Sequence[StoredEvent],
        cursor: int,
        stats: Iterable[Stat] = (),
        ids: Sequence[int] | None = None,
        *,
        fence: Fence | None = None,
    ) -> list[int]:
        """Record notifications for these events as pending, move the cursor, return their ids.

        Notification ids are unique for this store and increase; ``ids``, one per event,
        are ids set aside by :meth:`take_notification_ids` for a batch already pushed.
        If the subscription no longer exists, nothing is written and ``[]`` is returned.
        """

    @abstractmethod
    async def take_notification_ids(self, n: int) -> int:
        """Set aside ``n`` consecutive notification ids, durably, and return the first:
        no other call or row takes them, after a restart too. For notifications pushed
        before they are recorded (:meth:`record_confirmed`)."""

    @abstractmethod
    async def record_confirmed(
        self,
        subscription_id: int,
        subscriber: str,
        confirmed: Sequence[tuple[int, StoredEvent]],
        cursor: int,
        stats: Iterable[Stat] = (),
        *,
        created_at: int,
        now: int,
        fence: Fence | None = None,
    ) -> None:
        """Record notifications that were never pending, pushed under ids from
        :meth:`take_notification_ids` and confirmed at that push, in one write: a
        ``confirmed`` delivery record each (``(id, event)`` pairs), the subscription's
        cursor moved up to ``cursor`` (never back; not at all if it is gone), and
        ``stats``."""

    @abstractmethod
    async def settle_notifications(
        self,
        ids: Sequence[int],
        stats: Mapping[int, Sequence[Stat]] | None = None,
        sent_stats: Mapping[int, Sequence[Stat]] | None = None,
        *,
        fence: Fence | None = None,
    ) -> list[int]:
        """Remove pending notifications (confirmed); return the ids that were pending.

        ``stats`` holds each notification's counter increments; only those of the ids
        that were still pending are applied, so confirming twice counts once.
        ``sent_stats`` likewise, but only for those never marked sent (``mark_sent``): a
        confirmed notification was delivered, and is counted as sent exactly once."""

    @abstractmethod
    async def mark_sent(
        self, ids: Sequence[int], stats: Mapping[int, Sequence[Stat]] | None = None, *, fence: Fence | None = None
    ) -> list[int]:
        """Mark pending notifications as delivered (the endpoint took them); return those
        newly marked, and apply only their ``stats``: each is counted as sent once."""

    @abstractmethod
    async def get_notifications(self, ids: Sequence[int]) -> list[PendingNotification]:
        """The pending notifications among ``ids``."""

    @abstractmethod
    async def former_subscribers(self, ids: Sequence[int]) -> dict[int, str]:
        """The subscriber each of ``ids`` was issued to, for those no longer pending that a
        delivery record (until trimmed) or a dead letter still names."""

    @abstractmethod
    async def pending(self, subscription_id: int) -> list[PendingNotification]:
        """Pending notifications of a subscription, oldest first."""

    @abstractmethod
    async def pending_counts(self) -> dict[int, int]:
        """How many notifications are pending, per subscription that has any."""

    @abstractmethod
    async def last_notification_id(self) -> int:
        """The highest notification id ever issued (0 when none)."""

    @abstractmethod
    async def count_attempt(
        self, ids: Sequence[int], stats: Iterable[Stat] = (), *, fence: Fence | None = None
    ) -> None:
        """Increase the attempt count of pending notifications."""

    # -- dead letters -----------------------------------------------------------------

    @abstractmethod
    async def dead_letter(
        self, letters: Sequence[DeadLetter], stats: Iterable[Stat] = (),
        *,
        fence: Fence | None = None,
    ) -> list[int]:
        """Move pending notifications to the dead letters; return the ids that were pending."""

    @abstractmethod
    async def list_dead_letters(
        self,
        subscription_ids: Sequence[int] | None = None,
        after: int | None = None,
        limit: int | None = None,
        *,
        ended_of: str | None = None,
    ) -> list[DeadLetter]:
        """Dead letters ordered by id, of these subscriptions (all if None), and with
        ``ended_of`` also those of that subscriber whose subscription no longer exists."""

    @abstractmethod
    async def redrive_dead_letters(self, ids: Sequence[int], now: int) -> list[PendingNotification]:
        """Make dead letters pending again (attempts reset, recorded ``now``); return them."""

    @abstractmethod
    async def drop_dead_letters(self, ids: Sequence[int], stats: Iterable[Stat] = ()) -> list[int]:
        """Delete dead letters for good; return the ids that existed."""

    # -- delivery records -------------------------------------------------------------

    @abstractmethod
    async def deliveries(self, after: int = 0, limit: int | None = None) -> list[DeliveryRecord]:
        """Delivery records (``tidings.store._deliveries``) with ``serial > after``, in order.

        ``settle_notifications``, ``dead_letter`` and ``drop_dead_letters`` each append one
        per notification they change (confirmed, dead, dropped), in the same transaction."""


class StatisticsStore(ABC):
    """Counters per publication, publisher, subscriber and subscription."""

    @abstractmethod
    async def add_stats(self, stats: Iterable[Stat]) -> None: ...

    @abstractmethod
    async def stats(self, scope: str, key: str) -> dict[str, int]:
        """Counters of one publication, publisher, subscriber or subscription."""

    @abstractmethod
    async def stat_keys(self, scope: str) -> list[str]:
        """Every key of ``scope`` that has counters, sorted (a subscriber whose
        subscriptions have all ended keeps its statistics)."""


class Store(
    PrincipalStore, RegistryStore, EventStore, DeliveryStore, StatisticsStore, SchemaStore, ReplayStore, ABC
):
    """Async storage for one broker: every concern's interface, one backend behind them.

    Open with ``await store.open()``, close with ``close()``. Each backend implements each
    concern in its own module (``_sqlite_events``, ``_memory_events``, ...)."""

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...
