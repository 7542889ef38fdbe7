"""The ``Store`` contract's per-principal limits, on every backend: a creation given a
``limit`` counts the principal's rows and inserts in one atomic step, so creations made
at once (through one broadcaster or several) never take a principal past it
(docs/scaling.md, "Shared state: one truth")."""

from __future__ import annotations

import asyncio

import pytest

from tidings.errors import LimitReached, StoreError
from tidings.store import PublicationRecord, ReplayRecord, Store, SubscriptionRecord

from .test_store_contract import store  # noqa: F401  (the fixture: every backend)

N = 12
LIMIT = 3


def pub(ns: str, owner: str = "alice") -> PublicationRecord:
    return PublicationRecord(namespace=ns, owner=owner, config=[], created_at=1)


def sub(subscriber: str = "alice", ns: str = "a.b") -> SubscriptionRecord:
    return SubscriptionRecord(id=0, subscriber=subscriber, namespace=ns, endpoint="http://x", config=[], created_at=1)


async def test_a_publication_past_its_owners_limit_is_refused_and_not_written(store: Store) -> None:  # noqa: F811
    for i in range(LIMIT):
        assert await store.create_publication(pub(f"a.n{i}"), publisher="alice", limit=LIMIT)
    with pytest.raises(LimitReached) as e:
        await store.create_publication(pub("a.over"), publisher="alice", limit=LIMIT)
    assert isinstance(e.value, StoreError) and e.value.limit == LIMIT
    assert "a.over" not in {p.namespace for p in await store.list_publications()}
    assert ("a.over", "alice") not in await store.list_publishers()
    # A namespace already registered is answered as taken, whatever the count.
    assert not await store.create_publication(pub("a.n0"), limit=LIMIT)
    # The count is the owner's: another principal, or no limit (an admin), is not held back.
    assert await store.create_publication(pub("b.n0", owner="bob"), limit=LIMIT)
    assert await store.create_publication(pub("a.admin"), limit=None)
    # Deleting one makes room for exactly one.
    await store.delete_publication("a.n0")
    await store.delete_publication("a.admin")
    assert await store.create_publication(pub("a.again"), limit=LIMIT)
    with pytest.raises(LimitReached):
        await store.create_publication(pub("a.over"), limit=LIMIT)


async def test_a_subscription_past_its_subscribers_limit_is_refused_and_not_written(store: Store) -> None:  # noqa: F811
    made = [await store.create_subscription(sub(), limit=LIMIT) for _ in range(LIMIT)]
    with pytest.raises(LimitReached):
        await store.create_subscription(sub(), limit=LIMIT)
    assert len(await store.list_subscriptions()) == LIMIT
    assert (await store.create_subscription(sub("bob"), limit=LIMIT)).subscriber == "bob"
    await store.create_subscription(sub(), limit=None)
    await store.delete_subscription(made[0].id)
    await store.delete_subscription(made[1].id)
    await store.create_subscription(sub(), limit=LIMIT)
    with pytest.raises(LimitReached):
        await store.create_subscription(sub(), limit=LIMIT)


async def _outcomes(tries: list[asyncio.Future[object] | object]) -> tuple[int, int]:
    done = await asyncio.gather(*tries, return_exceptions=True)  # type: ignore[arg-type]
    unexpected = [r for r in done if isinstance(r, BaseException) and not isinstance(r, LimitReached)]
    assert not unexpected, unexpected
    return sum(1 for r in done if not isinstance(r, BaseException)), sum(1 for r in done if isinstance(r, LimitReached))


async def test_concurrent_publications_of_one_owner_never_pass_its_limit(store: Store) -> None:  # noqa: F811
    made, refused = await _outcomes([
        store.create_publication(pub(f"a.n{i}"), publisher="alice", limit=LIMIT) for i in range(N)
    ])
    assert (made, refused) == (LIMIT, N - LIMIT)
    assert sum(1 for p in await store.list_publications() if p.owner == "alice") == LIMIT
    assert len(await store.list_publishers()) == LIMIT


async def test_concurrent_subscriptions_of_one_subscriber_never_pass_its_limit(store: Store) -> None:  # noqa: F811
    made, refused = await _outcomes([store.create_subscription(sub(), limit=LIMIT) for _ in range(N)])
    assert (made, refused) == (LIMIT, N - LIMIT)
    assert len(await store.list_subscriptions()) == LIMIT


def replay(sub_id: int, requester: str = "alice") -> ReplayRecord:
    return ReplayRecord(
        requester=requester, namespace="a.b", subscription_id=sub_id, from_id=1, to_id=4, config=[],
        state="pending", position=0, expected=3, created_at=5, updated_at=5,
    )


async def test_a_replay_past_its_requesters_limit_of_active_ones_is_refused(store: Store) -> None:  # noqa: F811
    s = await store.create_subscription(sub())
    made = [await store.create_replay(replay(s.id), limit=LIMIT) for _ in range(LIMIT)]
    with pytest.raises(LimitReached):
        await store.create_replay(replay(s.id), limit=LIMIT)
    assert len(await store.list_replays()) == LIMIT
    await store.create_replay(replay(s.id, "bob"), limit=LIMIT)
    # Only pending and running replays count: one that ended makes room.
    assert await store.move_replay(made[0].id, "running", from_states=["pending"], now=6)
    with pytest.raises(LimitReached):
        await store.create_replay(replay(s.id), limit=LIMIT)
    assert await store.move_replay(made[0].id, "completed", from_states=["running"], now=7)
    await store.create_replay(replay(s.id), limit=LIMIT)
    with pytest.raises(LimitReached):
        await store.create_replay(replay(s.id), limit=LIMIT)


async def test_concurrent_replays_of_one_requester_never_pass_its_limit(store: Store) -> None:  # noqa: F811
    s = await store.create_subscription(sub())
    made, refused = await _outcomes([store.create_replay(replay(s.id), limit=LIMIT) for _ in range(N)])
    assert (made, refused) == (LIMIT, N - LIMIT)
    assert len(await store.list_replays(states=["pending", "running"])) == LIMIT


async def test_concurrent_replays_of_many_requesters_never_pass_the_total(store: Store) -> None:  # noqa: F811
    """TIDINGS_REPLAY_MAX_CONCURRENT: one count of every requester's active replays, taken
    with the insert, whichever broadcaster registers them."""
    s = await store.create_subscription(sub())
    made, refused = await _outcomes([
        store.create_replay(replay(s.id, requester=f"p{i}"), limit=LIMIT, total=LIMIT) for i in range(N)
    ])
    assert (made, refused) == (LIMIT, N - LIMIT)
    with pytest.raises(LimitReached) as e:
        await store.create_replay(replay(s.id, requester="other"), total=LIMIT)
    assert e.value.everyone and e.value.limit == LIMIT
    (first,) = await store.list_replays(limit=1)
    await store.move_replay(first.id, "done", from_states=["pending"], now=6)
    await store.create_replay(replay(s.id, requester="other"), total=LIMIT)  # room again
