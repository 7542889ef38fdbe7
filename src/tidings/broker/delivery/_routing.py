"""Routing at append: notifications opened in the same transaction as their events.

Without it a live event costs two durable commits before its push: the event, then the
notification record with the subscription's cursor (``Store.open_notifications``, one
per subscription). With it, the store asks :class:`Router` inside the append's
transaction which subscriptions the new events go to, and records those notifications
in the same commit; the subscription's worker then only pushes them.

Only a worker that is *caught up* is routed: one that has considered every earlier
event of the namespace (its ``scan`` is at or past the namespace's last event before
this transaction), or whose own ``open_notifications`` of everything up to there is
committed, or is in this very transaction, while the worker waits for it (``opening``).
The latter matters under load: a worker that once fell behind reads the log itself,
and without it would stay behind, one commit later each time, for as long as events
keep coming (docs/benchmarks/history/2026-11-25-04-live-latency-worker-caught-up.md). Any other worker (behind, stopped,
starting again, subscribed by a pattern) reads the events itself as before, so each
event is opened for a subscription exactly once, by one path or the other:

* ``plan`` and ``committed`` run on the store's writing thread. They read the
  delivery's state but change only their own (``_ns_seq``, ``_routed``), which no
  other thread writes.
* ``committed`` schedules the hand-over on the event loop before the store settles the
  append's futures, so a worker's ``scan`` is past the routed events before the tail
  shows them; a worker never reads the log beyond the tail's head
  (``Worker._next``), so it cannot see them before either.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter

from ...store import Route, StoredEvent
from ._notes import RoutedTo
from ._ports import Routable, RouterHub

__all__ = ["Router"]

log = logging.getLogger("tidings.delivery")
_namespace = attrgetter("namespace")
_seq = attrgetter("seq")


class Router:
    """The delivery's :class:`tidings.store.AppendRouter`."""

    def __init__(
        self,
        delivery: RouterHub,
        loop: asyncio.AbstractEventLoop,
        stats: Callable[..., list],  # _accounting.event_stats, passed in by the hub
    ) -> None:
        self._d = delivery
        self._loop = loop
        self._stats = stats
        # The seq of each namespace's last stored event, as of the last commit seen. A
        # namespace not seen since start is not routed until one commit has been.
        self._ns_seq: dict[str, int] = {}
        # The last event routed to each subscription; ahead of its worker's ``scan``
        # until the hand-over runs on the event loop.
        self._routed: dict[int, int] = {}

    def forget(self, sub_id: int) -> None:
        self._routed.pop(sub_id, None)

    def plan(self, events: Sequence[StoredEvent], opened: Mapping[int, int]) -> list[Route]:  # of RoutedTo
        d = self._d
        registry = d.registry
        configs = registry.sub_configs
        by_ns: dict[str, list[StoredEvent]] = {}
        for e in events:
            by_ns.setdefault(e.namespace, []).append(e)
        routes: list[Route] = []
        for ns, evs in by_ns.items():
            before = self._ns_seq.get(ns)
            group = d.wakeable(ns)  # a snapshot: the loop replaces it, never changes it
            if before is None or not group:
                continue
            for w in group:
                sub = w.sub
                if w.started or w.saturated() or max(w.scan, self._routed.get(sub.id, 0), _opening(w, opened)) < before:
                    continue  # behind, resuming or at its cap: its worker reads the log itself
                conf = configs.get(sub.id)
                if conf is None or conf.stopped:
                    continue
                try:
                    passing = registry.deliverable(sub.subscriber, conf, evs, d.data_of, ns)
                except Exception:  # the worker's own path meets the same error and reports it
                    log.exception("subscription %s: routing at append failed", sub.id)
                    continue
                if w.direct():  # nothing written now: pushed first, recorded when confirmed
                    routes.append(RoutedTo(
                        subscription_id=sub.id, events=passing, cursor=evs[-1].seq, stats=[], record=False,
                        generation=w.generation, after=before,
                    ))
                    continue
                # Counted as recorded now, as sent when the endpoint takes them (worker).
                stats = self._stats(sub, passing, "recorded", prefix="tidings") if passing else []
                routes.append(RoutedTo(
                    subscription_id=sub.id, events=passing, cursor=evs[-1].seq, stats=stats, generation=w.generation,
                ))
        return routes

    def committed(self, events: Sequence[StoredEvent], routes: Sequence[Route]) -> None:
        # Events come in seq order, so the last of each namespace wins: one C-level pass.
        self._ns_seq.update(zip(map(_namespace, events), map(_seq, events), strict=True))
        for r in routes:
            self._routed[r.subscription_id] = r.cursor
        if routes:
            # Only this router's plans come back here: they are all RoutedTo.
            self._loop.call_soon_threadsafe(self._d.routed, [r for r in routes if isinstance(r, RoutedTo)])


def _opening(w: Routable, opened: Mapping[int, int]) -> int:
    """The cursor of the open ``w`` awaits, if the store has it (committed or in this
    transaction); 0 otherwise. An open left by an earlier worker of the subscription
    (cancelled, or before a restart) matches neither its cursor nor its generation."""
    mine = w.opening
    if mine is None or mine[1] != w.generation or opened.get(w.sub.id) != mine[0]:
        return 0
    return mine[0]
