"""Listings are answered from the store, the one truth (docs/scaling.md, "Shared state"):
a publication, publisher or subscription another broadcaster stored a moment ago is
listed by this one before its signal arrives, whatever its own copy of the registry holds.

The other broadcaster is played by writing to the store directly; this broadcaster's
copy (``Registry``) never hears of it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from tidings.broker.registry import Orchestrator, Registry
from tidings.broker.registry._reread import reread_publication
from tidings.core.wire import InfoQuery, SubscriptionQuery
from tidings.store import MemoryStore, PrincipalRecord, PublicationRecord, SQLiteStore, Store, SubscriptionRecord

ADMIN = PrincipalRecord(name="root", admin=True)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "t.db")
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def _elsewhere(store: Store, n: int) -> list[int]:
    """What another broadcaster registers: ``n`` publications, each with a second
    publisher and one subscription, the odd ones stopped."""
    ids = []
    for i in range(n):
        ns = f"com.example.n{i:04d}"
        assert await store.create_publication(PublicationRecord(namespace=ns, owner="alice"), "alice")
        assert await store.add_publisher(ns, f"pub{i % 3}")
        config = [["icrc72:subscription:stopped", {"Bool": True}]] if i % 2 else []
        sub = await store.create_subscription(SubscriptionRecord(
            id=0, subscriber=f"sub{i % 4}", namespace=ns, endpoint="https://example.com/hook", config=config,
        ))
        ids.append(sub.id)
    return ids


@pytest.mark.parametrize("n", [1, 7, 1200])  # 1200: past one page of the store's listing
async def test_what_another_broadcaster_stored_is_listed_at_once(store: Store, n: int) -> None:
    ids = await _elsewhere(store, n)
    registry = Registry()

    async def look_up(namespaces: Sequence[str], principal: str | None) -> None:
        # As the cluster's registry sync: a namespace not known here is read before refusing.
        for ns in namespaces:
            await reread_publication(store, registry, ns)

    here = Orchestrator(store, registry, broadcaster_id="b-here", look_up=look_up)

    pubs = await here.get_publications(InfoQuery(take=1000))
    if n > 1000:  # one answer holds 1,000 at most: the rest on the next page
        pubs += await here.get_publications(InfoQuery(prev=pubs[-1].namespace, take=1000))
    assert [p.namespace for p in pubs] == [f"com.example.n{i:04d}" for i in range(n)]
    assert all(dict(p.stats)["icrc72:publication:stats:publishers"] == {"Nat": 2} for p in pubs[:50])

    subs = await here.get_subscriptions(ADMIN, SubscriptionQuery(take=1000))
    if n > 1000:
        subs += await here.get_subscriptions(ADMIN, SubscriptionQuery(prev=subs[-1].id, take=1000))
    assert [s.id for s in subs] == ids
    page = await here.get_subscriptions(ADMIN, SubscriptionQuery(prev=ids[0], take=2))
    assert [s.id for s in page] == ids[1:3]
    one = await here.get_subscriptions(ADMIN, SubscriptionQuery(namespace="com.example.n0000"))
    assert [s.id for s in one] == ids[:1]

    publishers = {p.publisher: dict(p.stats) for p in await here.get_publishers(InfoQuery())}
    assert publishers["alice"]["icrc72:publisher:stats:publications"] == {"Nat": n}
    subscribers = {s.subscriber: dict(s.stats) for s in await here.get_subscribers(InfoQuery())}
    assert sum(s["icrc72:subscriber:stats:subscriptions"]["Nat"] for s in subscribers.values()) == n
    assert sum(s["icrc72:subscriber:stats:subscriptions:active"]["Nat"] for s in subscribers.values()) == (n + 1) // 2
