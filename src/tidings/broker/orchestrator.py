"""The orchestrator: publications, publishers, subscriptions, and the info queries.

It keeps the registry in memory (loaded from the store at start, written through on
every change) so the publish path checks permissions without touching the store.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from ..core import values
from ..core.namespaces import namespace_error
from ..core.wire import (
    BroadcasterInfo,
    InfoQuery,
    ItemResult,
    PublicationInfo,
    PublicationRegistration,
    PublisherInfo,
    SubscriberInfo,
    SubscriptionInfo,
    SubscriptionQuery,
    SubscriptionRegistration,
    err,
    ok,
)
from ..errors import NotFound
from ..store import PrincipalRecord, PublicationRecord, Store, SubscriptionRecord

__all__ = ["Orchestrator"]

DEFAULT_TAKE = 100
MAX_TAKE = 1000

_SUB_FILTER = "icrc72:subscription:filter"
_SUB_SKIP = "icrc72:subscription:skip"
_SUB_STOPPED = "icrc72:subscription:stopped"


def _take(take: int | None) -> int:
    return DEFAULT_TAKE if take is None else max(0, min(take, MAX_TAKE))


def _stats_map(stats: dict[str, int], wanted: list[str] | None) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for k, v in stats.items():
        if wanted is None or any(k == w or (w.endswith(":") and k.startswith(w)) for w in wanted):
            out.append((k, {"Nat": v}))
    return out


def _config_error(config: Sequence[tuple[str, object]]) -> str | None:
    for key, value in config:
        try:
            values.check(value, f"$.config.{key}")
        except values.InvalidValue as e:
            return str(e)
    return None


class Orchestrator:
    def __init__(
        self,
        store: Store,
        *,
        broadcaster_id: str,
        on_subscription: Callable[[SubscriptionRecord], None] = lambda s: None,
    ) -> None:
        self._store = store
        self._broadcaster_id = broadcaster_id
        self._on_subscription = on_subscription
        self.publications: dict[str, PublicationRecord] = {}
        self.publishers: dict[str, set[str]] = defaultdict(set)
        self.subscriptions: dict[int, SubscriptionRecord] = {}

    async def load(self) -> None:
        for pub in await self._store.list_publications():
            self.publications[pub.namespace] = pub
        for ns, principal in await self._store.list_publishers():
            self.publishers[ns].add(principal)
        for sub in await self._store.list_subscriptions():
            self.subscriptions[sub.id] = sub

    def require_namespaces(self, namespaces: Sequence[str]) -> None:
        """Raise 404 ``namespace_not_found`` naming every unknown namespace in a batch."""
        missing = sorted({ns for ns in namespaces if ns not in self.publications})
        if missing:
            raise NotFound(
                f"no publication is registered for namespace(s) {', '.join(map(repr, missing))}; "
                "register it with icrc72_register_publication first",
                code="namespace_not_found",
            )

    def may_publish(self, principal: str, namespace: str) -> bool:
        return principal in self.publishers.get(namespace, ())

    # -- registrations ----------------------------------------------------------------

    async def register_publications(
        self, caller: PrincipalRecord, regs: Sequence[PublicationRegistration]
    ) -> list[ItemResult]:
        out: list[ItemResult] = []
        for reg in regs:
            problem = namespace_error(reg.namespace) or _config_error(reg.config)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            existing = self.publications.get(reg.namespace)
            if existing is None:
                rec = PublicationRecord(
                    namespace=reg.namespace, owner=caller.name, config=[list(p) for p in reg.config],
                    created_at=time.time_ns(),
                )
                if await self._store.create_publication(rec):
                    self.publications[rec.namespace] = rec
                existing = self.publications.get(reg.namespace)
            elif reg.config and [list(p) for p in reg.config] != existing.config:
                out.append(err(
                    "ImproperConfig",
                    f"namespace {reg.namespace!r} is already registered; change its config with "
                    "icrc72_update_publication",
                ))
                continue
            if await self._store.add_publisher(reg.namespace, caller.name):
                self.publishers[reg.namespace].add(caller.name)
            out.append(ok(reg.namespace))
        return out

    async def register_subscriptions(
        self, caller: PrincipalRecord, regs: Sequence[SubscriptionRegistration]
    ) -> list[ItemResult]:
        self.require_namespaces([r.namespace for r in regs])
        out: list[ItemResult] = []
        for reg in regs:
            problem = _endpoint_error(reg.endpoint) or _config_error(reg.config)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            config = [list(p) for p in reg.config]
            keys = {k for k, _ in config}
            if reg.filter is not None and _SUB_FILTER not in keys:
                config.append([_SUB_FILTER, {"Text": reg.filter}])
            if reg.skip is not None and _SUB_SKIP not in keys:
                skip = reg.skip if isinstance(reg.skip, list) else [reg.skip]
                config.append([_SUB_SKIP, {"Array": [{"Nat": n} for n in skip]}])
            if reg.stopped and _SUB_STOPPED not in keys:
                config.append([_SUB_STOPPED, {"Bool": True}])
            rec = await self._store.create_subscription(SubscriptionRecord(
                id=0, subscriber=caller.name, namespace=reg.namespace, endpoint=reg.endpoint,
                mode=reg.mode, config=config, created_at=time.time_ns(),
            ))
            self.subscriptions[rec.id] = rec
            self._on_subscription(rec)
            out.append(ok(rec.id))
        return out

    # -- queries ----------------------------------------------------------------------

    async def get_publications(self, q: InfoQuery) -> list[PublicationInfo]:
        names = sorted(ns for ns in self.publications if q.prev is None or ns > q.prev)[: _take(q.take)]
        out = []
        for ns in names:
            stats = {"icrc72:publication:stats:publishers": len(self.publishers.get(ns, ())),
                     "icrc72:publication:stats:events": 0,
                     "icrc72:publication:stats:notifications": 0,
                     "icrc72:publication:stats:confirmations": 0}
            stats.update(await self._store.stats("publication", ns))
            out.append(PublicationInfo(
                namespace=ns, config=self.publications[ns].config, stats=_stats_map(stats, q.statsFilter),
            ))
        return out

    async def get_publishers(self, q: InfoQuery) -> list[PublisherInfo]:
        counts: dict[str, int] = defaultdict(int)
        for principals in self.publishers.values():
            for p in principals:
                counts[p] += 1
        names = sorted(p for p in counts if q.prev is None or p > q.prev)[: _take(q.take)]
        out = []
        for p in names:
            stats = {"icrc72:publisher:stats:publications": counts[p],
                     "icrc72:publisher:stats:cyclesReceived": 0,
                     "icrc72:publisher:stats:events": 0}
            stats.update(await self._store.stats("publisher", p))
            out.append(PublisherInfo(publisher=p, stats=_stats_map(stats, q.statsFilter)))
        return out

    async def get_subscribers(self, q: InfoQuery) -> list[SubscriberInfo]:
        counts: dict[str, int] = defaultdict(int)
        for s in self.subscriptions.values():
            counts[s.subscriber] += 1
        names = sorted(p for p in counts if q.prev is None or p > q.prev)[: _take(q.take)]
        out = []
        for p in names:
            stats = {"icrc72:subscriber:stats:subscriptions": counts[p],
                     "icrc72:subscriber:stats:subscriptions:active": sum(
                         1 for s in self.subscriptions.values() if s.subscriber == p and not _stopped(s)),
                     "icrc72:subscriber:stats:notifications": 0,
                     "icrc72:subscriber:stats:confirmations": 0,
                     "icrc72:subscriber:stats:cyclesPaid": 0,
                     "icrc76:subscriber:stats:requests": 0}
            stats.update(await self._store.stats("subscriber", p))
            out.append(SubscriberInfo(subscriber=p, stats=_stats_map(stats, q.statsFilter)))
        return out

    async def get_subscriptions(self, caller: PrincipalRecord, q: SubscriptionQuery) -> list[SubscriptionInfo]:
        if q.namespace is not None:
            self.require_namespaces([q.namespace])
        ids = sorted(
            i for i, s in self.subscriptions.items()
            if (q.prev is None or i > q.prev) and (q.namespace is None or s.namespace == q.namespace)
        )[: _take(q.take)]
        out = []
        for i in ids:
            s = self.subscriptions[i]
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
                stats=_stats_map(stats, q.statsFilter),
            ))
        return out

    async def get_broadcasters(self, q: InfoQuery) -> list[BroadcasterInfo]:
        if (q.prev is not None and q.prev >= self._broadcaster_id) or _take(q.take) == 0:
            return []
        stats = await self._store.stats("broadcaster", self._broadcaster_id)
        return [BroadcasterInfo(broadcaster=self._broadcaster_id, stats=_stats_map(stats, q.statsFilter))]


def _stopped(s: SubscriptionRecord) -> bool:
    v = values.map_get(s.config, _SUB_STOPPED)
    return v in ({"Bool": True}, {"Text": "true"})


def _endpoint_error(endpoint: str | None) -> str | None:
    if not endpoint:
        return "a subscription needs an endpoint: the http(s) URL notifications are POSTed to"
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"endpoint {endpoint!r} is not an absolute http(s) URL"
    return None
