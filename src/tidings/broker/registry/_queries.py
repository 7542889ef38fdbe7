"""The registry, read: what the publish and delivery paths ask (who may publish, who
may receive, the configs), and the ICRC-72 queries (``icrc72_get_*``): publications,
publishers, subscribers, subscriptions and broadcasters with their statistics, paged.

A base of :class:`~tidings.broker.registry.Orchestrator`, which holds the registry
these read; kept apart so that the orchestrator's module holds the rules that change it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from ...core import config as cfg
from ...core.namespaces import is_pattern, is_system
from ...core.wire import (
    InfoQuery,
    PublicationInfo,
    PublisherInfo,
    SubscriberInfo,
    SubscriptionInfo,
    SubscriptionQuery,
)
from ...store import PrincipalRecord, PublicationRecord, Store, SubscriptionRecord
from ._registry import Registry, read_sub_config

__all__ = ["RegistryQueries", "stats_map", "take_of"]

_PAGE = 500

DEFAULT_TAKE = 100
MAX_TAKE = 1000


def take_of(take: int | None) -> int:
    """How many items a query's ``take`` asks for, within the bounds."""
    return DEFAULT_TAKE if take is None else max(0, min(take, MAX_TAKE))


def stats_map(stats: dict[str, Any], wanted: list[str] | None) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for k, v in stats.items():
        if wanted is None or any(k == w or (w.endswith(":") and k.startswith(w)) for w in wanted):
            out.append((k, {"Text": v} if isinstance(v, str) else {"Nat": v}))
    return out


class RegistryQueries:
    # Held by the Orchestrator; declared here for the queries that read them.
    _store: Store
    _look_up: Callable[[Sequence[str], str | None], Awaitable[None]] | None
    listener: Any
    registry: Registry
    schema_problem: Callable[[int | str], str | None] | None

    # -- the registry, read: what the publish and delivery paths and the faces ask ------

    @property
    def publications(self) -> dict[str, PublicationRecord]:
        return self.registry.publications

    @property
    def pub_configs(self) -> dict[str, cfg.PublicationConfig]:
        return self.registry.pub_configs

    @property
    def publishers(self) -> dict[str, set[str]]:
        return self.registry.publishers

    @property
    def subscriptions(self) -> dict[int, SubscriptionRecord]:
        return self.registry.subscriptions

    @property
    def sub_configs(self) -> dict[int, cfg.SubscriptionConfig]:
        return self.registry.sub_configs

    def require_namespaces(self, namespaces: Iterable[str]) -> None:
        self.registry.require_namespaces(namespaces)

    async def known(self, namespaces: Iterable[str]) -> None:
        """``require_namespaces``, after asking the store for those not known here."""
        missing = [ns for ns in namespaces if ns not in self.registry.publications]
        if missing and self._look_up is not None:
            await self._look_up(missing, None)
        self.registry.require_namespaces(missing)

    def may_publish(self, principal: str, namespace: str) -> bool:
        return self.registry.may_publish(principal, namespace)

    def publish_refusal(self, principal: str, namespace: str) -> str | None:
        return self.registry.publish_refusal(principal, namespace)

    async def publish_refusals(self, principal: str, namespaces: Iterable[str]) -> dict[str, str | None]:
        """``publish_refusal`` per namespace; with several broadcasters, a refusal is
        checked against the store first (the principal may have just been made a publisher
        through another broadcaster, its signal still on its way)."""
        out = {ns: self.registry.publish_refusal(principal, ns) for ns in namespaces}
        refused = [ns for ns, why in out.items() if why is not None]
        if refused and self._look_up is not None:
            await self._look_up(refused, principal)
            out.update((ns, self.registry.publish_refusal(principal, ns)) for ns in refused)
        return out

    def subscriber_allowed(self, namespace: str, principal: str, seq: int | None = None) -> bool:
        return self.registry.subscriber_allowed(namespace, principal, seq)

    def subscriber_refusal(self, namespace: str, principal: str) -> str | None:
        return self.registry.subscriber_refusal(namespace, principal)

    def namespaces_for(self, sub: SubscriptionRecord) -> list[str]:
        return self.registry.namespaces_for(sub)

    def matcher(self, pattern: str) -> Callable[[str], bool]:
        return self.registry.matcher(pattern)

    def controls_publication(self, caller: PrincipalRecord, pub: PublicationRecord) -> bool:
        return self.registry.controls_publication(caller, pub)

    def controls_subscription(self, caller: PrincipalRecord, sub: SubscriptionRecord) -> bool:
        return self.registry.controls_subscription(caller, sub)

    # -- the ICRC-72 queries ----------------------------------------------------------

    async def get_publications(self, q: InfoQuery) -> list[PublicationInfo]:
        # The control plane's publications are the service's own: an operator reads them
        # by name (docs/scaling.md), and they are never listed among the users' ones.
        # Listed from the store, the one truth: a publication registered or deleted
        # through another broadcaster a moment ago is answered as it is, not as this
        # one's copy has it until the signal arrives (docs/scaling.md, "Shared state").
        pubs = [(p.namespace, p) for p in await self._stored_publications(q.prev, take_of(q.take))]
        publishers: dict[str, int] = defaultdict(int)
        if pubs:
            for ns, _ in await self._store.list_publishers():
                publishers[ns] += 1
        out = []
        listener = self.listener
        elsewhere_subs = [s for s in self.registry.subscriptions.values()
                          if listener is not None and not listener.delivers(s.id)]
        away: dict[int, int] | None = None  # their stored cursors, read once if needed
        for ns, pub in pubs:
            stats = {"icrc72:publication:stats:publishers": publishers[ns],
                     "icrc72:publication:stats:events": 0,
                     "icrc72:publication:stats:events:sent": 0,
                     "icrc72:publication:stats:notifications": 0,
                     "icrc72:publication:stats:confirmations": 0}
            stats.update(await self._store.stats("publication", ns))
            upto = self.listener.sent_position(ns) if self.listener is not None else None
            elsewhere = [s.id for s in elsewhere_subs if ns in self.registry.namespaces_for(s)]
            if elsewhere:
                if away is None:
                    away = {s.id: s.cursor for s in await self._store.list_subscriptions()}
                cursors = [away[i] for i in elsewhere if i in away]
                if cursors:
                    upto = min(cursors) if upto is None else min(upto, *cursors)
            stats["icrc72:publication:stats:events:sent"] = await self._store.count_events(ns, upto)
            entries = stats_map(stats, q.statsFilter)
            entries.extend(stats_map(self._schema_status(ns), q.statsFilter))
            out.append(PublicationInfo(
                namespace=ns, config=cfg.public_config(pub.config), stats=entries,
            ))
        return out

    async def _stored_publications(self, prev: str | None, take: int) -> list[PublicationRecord]:
        out: list[PublicationRecord] = []
        while len(out) < take:
            page = await self._store.list_publications(after=prev, limit=_PAGE)
            out.extend(p for p in page if not is_system(p.namespace))
            if len(page) < _PAGE:
                break
            prev = page[-1].namespace
        return out[:take]

    async def _stored_subscriptions(self, q: SubscriptionQuery, only: set[int] | None) -> list[SubscriptionRecord]:
        take, prev = take_of(q.take), q.prev
        out: list[SubscriptionRecord] = []
        while len(out) < take:
            page = await self._store.list_subscriptions(namespace=q.namespace, after=prev, limit=_PAGE)
            out.extend(s for s in page if only is None or s.id in only)
            if len(page) < _PAGE:
                break
            prev = page[-1].id
        return out[:take]

    def _schema_status(self, namespace: str) -> dict[str, Any]:
        """A bound publication's schema as publishing sees it now: whether its events are
        taken (a schema Retracted after binding refuses them all) and, if not, why."""
        conf = self.registry.pub_configs.get(namespace)
        if conf is None or conf.schema is None or self.schema_problem is None:
            return {}
        problem = self.schema_problem(conf.schema)
        if problem is None:
            return {"tidings:publication:schema:accepting": 1}
        return {"tidings:publication:schema:accepting": 0, "tidings:publication:schema:refusal": problem}

    async def get_publishers(self, q: InfoQuery) -> list[PublisherInfo]:
        counts: dict[str, int] = defaultdict(int)
        for _, p in await self._store.list_publishers():  # the store's, as every listing
            counts[p] += 1
        names = sorted(p for p in counts if q.prev is None or p > q.prev)[: take_of(q.take)]
        out = []
        for p in names:
            stats = {"icrc72:publisher:stats:publications": counts[p],
                     "icrc72:publisher:stats:cyclesReceived": 0,
                     "icrc72:publisher:stats:events": 0}
            stats.update(await self._store.stats("publisher", p))
            out.append(PublisherInfo(publisher=p, stats=stats_map(stats, q.statsFilter)))
        return out

    async def get_subscribers(self, q: InfoQuery) -> list[SubscriberInfo]:
        total: dict[str, int] = defaultdict(int)
        active: dict[str, int] = defaultdict(int)
        for s in await self._store.list_subscriptions():  # the store's, as every listing
            total[s.subscriber] += 1
            active[s.subscriber] += not read_sub_config(s.config).stopped
        known = set(total) | set(await self._store.stat_keys("subscriber"))
        names = sorted(p for p in known if q.prev is None or p > q.prev)[: take_of(q.take)]
        out = []
        for p in names:
            stats = {"icrc72:subscriber:stats:subscriptions": total[p],
                     "icrc72:subscriber:stats:subscriptions:active": active[p],
                     "icrc72:subscriber:stats:notifications": 0,
                     "icrc72:subscriber:stats:confirmations": 0,
                     "icrc72:subscriber:stats:cyclesPaid": 0,
                     "icrc76:subscriber:stats:requests": 0}
            stats.update(await self._store.stats("subscriber", p))
            out.append(SubscriberInfo(subscriber=p, stats=stats_map(stats, q.statsFilter)))
        return out

    async def get_subscriptions(
        self, caller: PrincipalRecord, q: SubscriptionQuery, *, only: set[int] | None = None
    ) -> list[SubscriptionInfo]:
        """``only``: of these ids (a broadcaster's, ``broker.publish``)."""
        if q.namespace is not None and not is_pattern(q.namespace):
            await self.known([q.namespace])  # registered elsewhere a moment ago: read, then refused
        # Listed from the store, as publications are; a subscription deleted after the
        # listing is answered as it was when listed.
        subs = [(s.id, s) for s in await self._stored_subscriptions(q, only)]
        out = []
        for i, s in subs:
            stats = {"icrc72:subscription:stats:notifications": 0,
                     "icrc72:subscription:stats:confirmations": 0,
                     "icrc72:subscription:stats:cyclesPaid": 0,
                     "icrc76:subscription:stats:requests": 0}
            stats.update(await self._store.stats("subscription", str(i)))
            # Endpoints may embed secrets: only the subscriber and admins see them.
            visible = caller.admin or caller.name == s.subscriber
            out.append(SubscriptionInfo(
                id=i, subscriber=s.subscriber, namespace=s.namespace,
                endpoint=s.endpoint if visible else None, mode=s.mode, config=s.config,
                stats=stats_map(stats, q.statsFilter),
            ))
        return out
