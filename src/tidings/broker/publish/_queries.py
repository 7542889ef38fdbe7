"""The ICRC-72 queries of the broadcasters: which exist, which serve a publication, which
subscriptions each delivers (docs/scaling.md).

On a store only one process uses, this broadcaster is the only one and serves
everything; on a shared store the answers come from the heartbeats and the leases.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ...core.wire import (
    BroadcasterInfo,
    BroadcasterSubscriptionsQuery,
    InfoQuery,
    PublicationBroadcastersQuery,
    SubscriptionInfo,
    SubscriptionQuery,
)
from ...store import BroadcasterRecord, ClusterStore, PrincipalRecord, Store
from ..cluster import Membership
from ..registry import Orchestrator, stats_map, take_of

__all__ = ["BroadcasterQueries"]


class BroadcasterQueries:
    def __init__(self, store: Store, orchestrator: Orchestrator, membership: Membership) -> None:
        self._store = store
        self._orch = orchestrator
        self._m = membership

    def _nodes(self) -> list[BroadcasterRecord]:
        m = self._m
        if m.shared and m.nodes:
            return m.nodes
        return [BroadcasterRecord(id=m.me, url=m.url, started_at=0, seen_ms_ago=0)]

    async def _holders(self) -> dict[int, str]:
        """Who delivers each subscription now: its live lease's holder."""
        if not (self._m.shared and isinstance(self._store, ClusterStore)):
            return {i: self._m.me for i in self._orch.subscriptions}
        return {
            int(lease.key[4:]): lease.owner
            for lease in await self._store.leases("sub:") if lease.expires_in_ms > 0 and lease.key[4:].isdigit()
        }

    async def _info(self, node: BroadcasterRecord, extra: dict[str, Any], wanted: list[str] | None) -> BroadcasterInfo:
        stats: dict[str, Any] = {"icrc72:broadcaster:stats:events": 0}
        stats.update(await self._store.stats("broadcaster", node.id))
        stats.update({"tidings:broadcaster:url": node.url, "tidings:broadcaster:seenMsAgo": node.seen_ms_ago})
        stats.update(extra)
        return BroadcasterInfo(broadcaster=node.id, stats=stats_map(stats, wanted))

    async def get_broadcasters(self, q: InfoQuery) -> list[BroadcasterInfo]:
        nodes = [n for n in self._nodes() if q.prev is None or n.id > q.prev][: take_of(q.take)]
        if not nodes:
            return []
        delivering = Counter((await self._holders()).values())
        owning = Counter(self._m.publication_owner(ns) for ns in self._orch.publications)
        return [
            await self._info(n, {
                "tidings:broadcaster:subscriptions": delivering[n.id],
                "tidings:broadcaster:publications": owning[n.id],
            }, q.statsFilter)
            for n in nodes
        ]

    async def get_publication_broadcasters(self, q: PublicationBroadcastersQuery) -> list[BroadcasterInfo]:
        """The publication's owner (``role`` ``owner``: where its publishers should
        publish) and every broadcaster delivering some of its subscriptions (``relay``)."""
        await self._orch.known([q.namespace])
        ns_subs = {i for i, s in self._orch.subscriptions.items() if q.namespace in self._orch.namespaces_for(s)}
        per_node = Counter(node for i, node in (await self._holders()).items() if i in ns_subs)
        owner = self._m.publication_owner(q.namespace)
        out = []
        for n in self._nodes():
            if (n.id != owner and not per_node[n.id]) or (q.prev is not None and n.id <= q.prev):
                continue
            role = "owner" if n.id == owner else "relay"
            out.append(await self._info(
                n, {"tidings:broadcaster:role": role, "tidings:broadcaster:publication:subscriptions": per_node[n.id]},
                q.statsFilter,
            ))
        return out[: take_of(q.take)]

    async def get_broadcaster_subscriptions(
        self, caller: PrincipalRecord, q: BroadcasterSubscriptionsQuery
    ) -> list[SubscriptionInfo]:
        who = q.broadcaster or self._m.me
        ids = {i for i, node in (await self._holders()).items() if node == who}
        return await self._orch.get_subscriptions(
            caller, SubscriptionQuery(prev=q.prev, take=q.take, statsFilter=q.statsFilter), only=ids
        )
