"""What the console's pages read: the registry seen through one principal's rights,
searched and paged on the server.

Who sees a subscription here: an admin, its subscriber, its controllers, and the
controllers of the publication it is on. Other principals do not see it at all (the ICRC
query ``icrc72_get_subscriptions`` lists every subscription without its endpoint; the
console is stricter, docs/console.md). Who may tail a namespace: an admin, the
publication's controllers, its registered publishers, and a principal with a subscription
covering it that the publication's lists allow, as the delivery path would.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..broker import Broker
from ..core import config as cfg
from ..core.jsonview import json_view
from ..store import PrincipalRecord, StoredEvent, SubscriptionRecord

__all__ = [
    "MAX_TAKE",
    "event_view",
    "may_tail",
    "principals_page",
    "publications_page",
    "subscription_counters",
    "subscriptions_page",
    "visible_subscription",
]

MAX_TAKE = 100
_STAT = "icrc72:subscription:stats:"
_TSTAT = "tidings:subscription:stats:"


def _take(take: int | None) -> int:
    return 25 if take is None else max(1, min(take, MAX_TAKE))


def _map_view(pairs: list[Any]) -> Any:
    try:
        return json_view({"Map": pairs})
    except (ValueError, TypeError, KeyError):  # a config the view cannot read: show the wire form
        return pairs


def visible_subscription(b: Broker, caller: PrincipalRecord, sub: SubscriptionRecord) -> bool:
    o = b.orchestrator
    if caller.admin or sub.subscriber == caller.name or o.controls_subscription(caller, sub):
        return True
    pub = o.publications.get(sub.namespace)
    return pub is not None and o.controls_publication(caller, pub)


def _matches(q: str, *fields: object) -> bool:
    return not q or any(q in str(f).lower() for f in fields)


async def subscriptions_page(
    b: Broker, caller: PrincipalRecord, q: str, after: int | None, take: int | None
) -> dict[str, Any]:
    """The caller's visible subscriptions whose id, namespace or subscriber contain ``q``,
    by id after ``after``; with the number that match and the cursor of the next page."""
    q = q.strip().lower()
    o = b.orchestrator
    found = sorted(
        i for i, s in o.subscriptions.items()
        if visible_subscription(b, caller, s) and _matches(q, i, s.namespace, s.subscriber)
    )
    total = len(found)
    if after is not None:
        found = [i for i in found if i > after]
    n = _take(take)
    page, more = found[:n], len(found) > n
    pending = await b.store.pending_counts() if page else {}
    items = []
    for i in page:
        s = o.subscriptions[i]
        items.append({
            "id": i, "subscriber": s.subscriber, "namespace": s.namespace,
            "endpoint": s.endpoint if caller.admin or caller.name == s.subscriber else None,
            "mode": s.mode, "stopped": o.sub_configs[i].stopped, "config": _map_view(s.config),
            "stats": await subscription_counters(b, s, pending),
            "controlled": o.controls_subscription(caller, s),
        })
    return {"items": items, "total": total, "next": page[-1] if more else None}


async def subscription_counters(b: Broker, sub: SubscriptionRecord, pending: dict[int, int]) -> dict[str, int]:
    """The counters the charts draw: events published on the subscription's namespaces,
    notifications sent, confirmations, retries, dead letters, and what is pending now."""
    stats = await b.store.stats("subscription", str(sub.id))
    published = 0
    for ns in b.orchestrator.namespaces_for(sub):
        published += (await b.store.stats("publication", ns)).get("icrc72:publication:stats:events", 0)
    return {
        "published": published,
        "sent": stats.get(_STAT + "notifications", 0),
        "confirmed": stats.get(_STAT + "confirmations", 0),
        "retries": stats.get(_TSTAT + "retries", 0),
        "deadLetters": stats.get(_TSTAT + "deadLetters", 0),
        "pending": pending.get(sub.id, 0),
    }


async def publications_page(
    b: Broker, caller: PrincipalRecord, q: str, after: str | None, take: int | None
) -> dict[str, Any]:
    """Publications (every principal sees them, as with ``icrc72_get_publications``) whose
    namespace or owner contain ``q``, by namespace after ``after``."""
    q = q.strip().lower()
    o = b.orchestrator
    found = sorted(ns for ns, p in o.publications.items() if _matches(q, ns, p.owner))
    total = len(found)
    if after is not None:
        found = [ns for ns in found if ns > after]
    n = _take(take)
    page, more = found[:n], len(found) > n
    items = []
    for ns in page:
        p = o.publications[ns]
        stats = await b.store.stats("publication", ns)
        items.append({
            "namespace": ns, "owner": p.owner, "config": _map_view(_public(p.config)),
            "publishers": sorted(o.publishers.get(ns, ())),
            "events": stats.get("icrc72:publication:stats:events", 0),
            "notifications": stats.get("icrc72:publication:stats:notifications", 0),
            "confirmations": stats.get("icrc72:publication:stats:confirmations", 0),
            "controlled": o.controls_publication(caller, p),
        })
    return {"items": items, "total": total, "next": page[-1] if more else None}


def _public(config: list[Any]) -> list[Any]:
    return list(cfg.public_config(config))


async def principals_page(b: Broker, q: str, after: str | None, take: int | None) -> dict[str, Any]:
    """Principals (admins only: the route checks) whose name contains ``q``."""
    q = q.strip().lower()
    found = sorted((p for p in await b.store.list_principals() if _matches(q, p.name)), key=lambda p: p.name)
    total = len(found)
    if after is not None:
        found = [p for p in found if p.name > after]
    n = _take(take)
    page = found[:n]
    return {
        "items": [{"name": p.name, "admin": p.admin, "createdAt": p.created_at} for p in page],
        "total": total, "next": page[-1].name if len(found) > n else None,
    }


def may_tail(b: Broker, caller: PrincipalRecord, namespace: str) -> str | None:
    """Why ``caller`` may not tail ``namespace``, or None if it may."""
    o = b.orchestrator
    pub = o.publications.get(namespace)
    if pub is None:
        return f"no publication is registered for {namespace!r}"
    if caller.admin or o.controls_publication(caller, pub) or caller.name in o.publishers.get(namespace, ()):
        return None
    for s in o.subscriptions.values():
        if s.subscriber == caller.name and namespace in o.namespaces_for(s):
            if o.subscriber_allowed(namespace, caller.name):
                return None
            return f"{caller.name} is refused by the publication's subscriber lists of {namespace!r}"
    return (f"{caller.name} may not tail {namespace!r}: only admins, its controllers and publishers, "
            "and principals subscribed to it may")


def event_view(e: StoredEvent) -> dict[str, Any]:
    """An event decoded for reading: its data and headers as their JSON view."""
    data = msgspec.json.decode(e.data)
    headers = msgspec.json.decode(e.headers) if e.headers else []
    return {
        "seq": e.seq, "id": e.id, "prevId": e.prev_id, "timestamp": e.timestamp, "source": e.source,
        "namespace": e.namespace, "data": _safe_view(data), "headers": _map_view(headers),
    }


def _safe_view(wire: Any) -> Any:
    try:
        return json_view(wire)
    except (ValueError, TypeError, KeyError, AttributeError):
        return wire
