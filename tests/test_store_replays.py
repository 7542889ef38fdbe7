"""The replay part of the ``Store`` contract, against every backend."""

from __future__ import annotations

import pytest

from tidings.store import InsufficientCredit, ReplayRecord, Stat, Store, StoredEvent

from .test_store_contract import ev, store, sub

__all__ = ["store"]


def copy_of(e: StoredEvent, rid: int) -> StoredEvent:
    tail = b'["icrc77:replay:id",{"Nat":%d}]' % rid
    return StoredEvent(
        seq=e.seq, namespace=e.namespace, id=e.id, prev_id=e.prev_id, timestamp=e.timestamp, source=e.source,
        data=e.data, headers=b"[" + tail + b"]",
    )


async def _replay(store: Store, sub_id: int, *, price: int = 0, state: str = "pending") -> ReplayRecord:
    return await store.create_replay(ReplayRecord(
        requester="alice", namespace="a.b", subscription_id=sub_id, from_id=1, to_id=4, config=[["k", {"Nat": 1}]],
        state=state, position=0, expected=3, price=price, created_at=5, updated_at=5,
    ))


async def test_replays_are_created_listed_filtered_and_moved(store: Store) -> None:
    s = await store.create_subscription(sub())
    r1 = await _replay(store, s.id)
    r2 = await _replay(store, s.id)
    assert (r1.id, r2.id) == (1, 2)
    assert [r.id for r in await store.list_replays()] == [1, 2]
    assert [r.id for r in await store.list_replays(after=1)] == [2]
    assert [r.id for r in await store.list_replays(limit=1)] == [1]
    assert await store.list_replays(namespace="x.y") == []
    assert [r.config for r in await store.get_replays([2, 9])] == [[["k", {"Nat": 1}]]]
    moved = await store.move_replay(1, "running", from_states=["pending"], now=9)
    assert moved is not None and (moved.state, moved.updated_at) == ("running", 9)
    # a state not in from_states is left alone
    assert await store.move_replay(1, "running", from_states=["pending"], now=10) is None
    assert [r.id for r in await store.list_replays(states=["running"])] == [1]
    assert [r.id for r in await store.list_replays(requester="bob")] == []
    done = await store.move_replay(1, "errored", detail="gone", from_states=["running"], now=11)
    assert done is not None and done.detail == "gone"


async def test_a_replay_batch_records_notifications_copies_position_and_debit_at_once(store: Store) -> None:
    events = await store.append([ev("a.b", i) for i in range(3)])
    s = await store.create_subscription(sub())
    r = await _replay(store, s.id, price=2)
    # not running yet: nothing written
    assert await store.record_replay_batch(r.id, s.id, [copy_of(events[0], r.id)], 1, now=1) is None
    await store.move_replay(r.id, "running", from_states=["pending"], now=1)
    with pytest.raises(InsufficientCredit):
        await store.record_replay_batch(r.id, s.id, [copy_of(events[0], r.id)], 1, now=1)
    assert await store.pending(s.id) == []
    assert await store.fund_credit("alice", 5) == 5
    copies = [copy_of(e, r.id) for e in events[:2]]
    ids = await store.record_replay_batch(
        r.id, s.id, copies, 2, [Stat("subscription", str(s.id), "n", 2)], now=3
    )
    assert ids is not None and len(ids) == 2
    assert [p.id for p in await store.pending(s.id)] == ids
    assert [p.seq for p in await store.pending(s.id)] == [events[0].seq, events[1].seq]
    assert await store.replay_events(ids) == dict(zip(ids, copies, strict=True))
    assert await store.credit_balance("alice") == 1
    (rec,) = await store.get_replays([r.id])
    assert (rec.position, rec.sent, rec.charged) == (2, 2, 4)
    assert (await store.stats("subscription", str(s.id)))["n"] == 2
    # an empty batch only moves the position
    assert await store.record_replay_batch(r.id, s.id, [], 3, now=4) == []
    (rec,) = await store.get_replays([r.id])
    assert (rec.position, rec.sent) == (3, 2)
    # notification ids continue the one sequence
    live = await store.open_notifications(s.id, events[2:], events[2].seq)
    assert live[0] > ids[-1]


async def test_replay_counts_and_sweep(store: Store) -> None:
    events = await store.append([ev("a.b", i) for i in range(3)])
    s = await store.create_subscription(sub())
    r = await _replay(store, s.id, state="running")
    ids = await store.record_replay_batch(r.id, s.id, [copy_of(e, r.id) for e in events], 3, now=1)
    assert ids is not None
    from tidings.store import DeadLetter

    await store.settle_notifications([ids[0]])
    await store.dead_letter([DeadLetter(
        id=ids[1], subscription_id=s.id, subscriber="alice", seq=events[1].seq, namespace="a.b", event_id=2,
        attempts=1, reason="x", dead_at=1,
    )])
    counts = (await store.replay_counts([r.id]))[r.id]
    assert (counts.pending, counts.dead_lettered) == (1, 1)
    await store.settle_notifications([ids[2]])
    assert await store.sweep_replay_notes(limit=1) == 1
    assert await store.sweep_replay_notes() == 1
    assert await store.sweep_replay_notes() == 0
    assert set(await store.replay_events(ids)) == {ids[1]}  # the dead letter keeps its copy


async def test_replay_batch_for_a_deleted_subscription_writes_nothing(store: Store) -> None:
    events = await store.append([ev("a.b")])
    s = await store.create_subscription(sub())
    r = await _replay(store, s.id, state="running")
    await store.delete_subscription(s.id)
    assert await store.record_replay_batch(r.id, s.id, [copy_of(events[0], r.id)], 1, now=1) is None
    (rec,) = await store.get_replays([r.id])
    assert rec.sent == 0


async def test_read_range_and_last_event_id(store: Store) -> None:
    await store.append([ev("a.b", i) for i in range(5)] + [ev("c.d")])
    assert [e.id for e in await store.read_range("a.b", 1, 5, 10)] == [2, 3, 4]
    assert [e.id for e in await store.read_range("a.b", 0, 99, 2)] == [1, 2]
    assert await store.last_event_id("a.b") == 5
    assert await store.last_event_id("x.y") == 0


async def test_credit_ledger(store: Store) -> None:
    assert await store.credit_balance("bob") == 0
    assert await store.fund_credit("bob", 10) == 10
    assert await store.fund_credit("bob", -4) == 6
    with pytest.raises(InsufficientCredit):
        await store.fund_credit("bob", -7)
    assert await store.credit_balance("bob") == 6
