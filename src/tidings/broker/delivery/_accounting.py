"""Statistics accounting for delivery: which counters a step of delivery moves.

The store applies these increments in the same transaction as the change they count
(a notification recorded, a try counted, a notification settled or dead-lettered), so
the counters are exact and survive restarts (docs/delivery.md, Statistics). Each
function here only builds the increments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from ...store import Stat, StoredEvent, SubscriptionRecord

__all__ = ["counted", "event_stats", "per_notification_stats"]


class _Noted(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def event(self) -> StoredEvent: ...


def event_stats(
    sub: SubscriptionRecord, events: Sequence[StoredEvent], name: str, prefix: str = "icrc72"
) -> list[Stat]:
    """Counter increments for the subscription, its subscriber and each event's publication."""
    return counted(sub, Counter(e.namespace for e in events), name, prefix)


def counted(sub: SubscriptionRecord, per_ns: Mapping[str, int], name: str, prefix: str = "icrc72") -> list[Stat]:
    """:func:`event_stats` for events counted per namespace already (a replay's are of one)."""
    n = sum(per_ns.values())
    out = [
        Stat("subscription", str(sub.id), f"{prefix}:subscription:stats:{name}", n),
        Stat("subscriber", sub.subscriber, f"{prefix}:subscriber:stats:{name}", n),
    ]
    out.extend(Stat("publication", ns, f"{prefix}:publication:stats:{name}", c) for ns, c in per_ns.items())
    return out


def per_notification_stats(
    sub: SubscriptionRecord, notes: Iterable[_Noted], name: str, prefix: str = "icrc72"
) -> dict[int, list[Stat]]:
    """Each notification's own increments of counter ``name``, for a store call that
    applies only those of the notifications it actually changes (a settle of what is still
    pending, say). Shared per namespace: this runs for every confirmed notification."""
    by_ns: dict[str, list[Stat]] = {}
    out: dict[int, list[Stat]] = {}
    for n in notes:
        ns = n.event.namespace
        stats = by_ns.get(ns)
        if stats is None:
            stats = by_ns[ns] = event_stats(sub, [n.event], name, prefix)
        out[n.id] = stats
    return out
