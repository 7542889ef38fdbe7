"""The in-memory store's state and the helpers each concern's module shares."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ..core.clock import Clock
from ..errors import StoreError
from ._deliveries import DeliveryRecord
from ._records import (
    DeadLetter,
    KeyRecord,
    PendingNotification,
    PrincipalRecord,
    Stat,
    StoredEvent,
    SubscriptionRecord,
    SubscriptionSecret,
)

__all__ = ["MemoryState", "aggregate", "dec", "enc", "limited"]

enc = msgspec.json.encode
dec = msgspec.json.decode


def aggregate(stats: Iterable[Stat]) -> dict[tuple[str, str, str], int]:
    """Sum the deltas per counter, dropping those that cancel out (as SQLite does)."""
    agg: dict[tuple[str, str, str], int] = {}
    for s in stats:
        k = (s.scope, s.key, s.name)
        agg[k] = agg.get(k, 0) + s.delta
    return {k: v for k, v in agg.items() if v}


def limited(rows: list[Any], limit: int | None) -> list[Any]:
    # SQLite reads a negative LIMIT as "no limit".
    return rows if limit is None or limit < 0 else rows[:limit]


class Sub:
    """A subscription as stored: config JSON-encoded, everything else plain."""

    __slots__ = ("config", "created_at", "cursor", "endpoint", "id", "mode", "namespace", "subscriber")

    def __init__(self, r: SubscriptionRecord, sub_id: int, cursor: int) -> None:
        self.id = sub_id
        self.subscriber = r.subscriber
        self.namespace = r.namespace
        self.endpoint = r.endpoint
        self.mode = r.mode
        self.config = enc(r.config)
        self.cursor = cursor
        self.created_at = r.created_at

    def record(self) -> SubscriptionRecord:
        return SubscriptionRecord(
            id=self.id, subscriber=self.subscriber, namespace=self.namespace, endpoint=self.endpoint,
            mode=self.mode, config=dec(self.config), cursor=self.cursor, created_at=self.created_at,
        )


class MemoryState:
    """Plain dicts and lists; every concern's module reads and writes them."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock
        self._open = False
        self._principals: dict[str, PrincipalRecord] = {}
        self._tokens: dict[bytes, str] = {}
        # namespace -> (owner, JSON config, created_at)
        self._publications: dict[str, tuple[str, bytes, int]] = {}
        self._publishers: set[tuple[str, str]] = set()
        self._subs: dict[int, Sub] = {}
        self._last_sub_id = 0
        self._events: list[StoredEvent] = []  # seq n is at index n - 1
        self._trimmed: set[int] = set()  # seqs retention has deleted
        self._last_ids: dict[str, int] = {}
        self._last_ts: dict[str, int] = {}  # kept when retention trims, as the ids are
        self._keys: dict[tuple[str, str], KeyRecord] = {}  # idempotency keys, live or not yet reclaimed
        self._notes: dict[int, PendingNotification] = {}  # insertion order is id order
        self._sent: set[int] = set()  # pending notifications the endpoint took (mark_sent)
        self._last_note_id = 0
        self._stats: dict[tuple[str, str, str], int] = {}
        self._dead: dict[int, DeadLetter] = {}
        self._secrets: dict[int, list[SubscriptionSecret]] = {}  # in the order added
        self._deliveries: list[DeliveryRecord] = []  # serial n is at index n - 1

    def _check(self) -> None:
        if not self._open:
            raise StoreError("store is not open")

    def _apply_stats(self, agg: dict[tuple[str, str, str], int]) -> None:
        for k, v in agg.items():
            self._stats[k] = self._stats.get(k, 0) + v

    def _confirmed_records(
        self, subscription_id: int, subscriber: str, confirmed: Sequence[tuple[int, StoredEvent]],
        created_at: int, now: int, *, replay: bool,
    ) -> None:
        base = len(self._deliveries)  # not read inside the generator: extend grows the list as it goes
        self._deliveries.extend(
            DeliveryRecord(
                serial=base + k + 1, notification_id=i, subscription_id=subscription_id,
                subscriber=subscriber, namespace=e.namespace, seq=e.seq, event_id=e.id, source=e.source,
                event_timestamp=e.timestamp, created_at=created_at, settled_at=now, attempts=1,
                outcome="confirmed", replay=replay,
            )
            for k, (i, e) in enumerate(confirmed)
        )

    def _replay_state(self) -> dict[str, Any]:
        """The replays, their event copies and the credit ledger (``_memory_replays``)."""
        st: dict[str, Any] | None = getattr(self, "_replays_mem", None)
        if st is None:
            st = {"replays": {}, "notes": {}, "credits": {}, "last_id": 0}
            self._replays_mem = st
        return st
