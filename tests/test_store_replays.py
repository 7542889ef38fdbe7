"""The replay part of the ``Store`` contract, against every backend."""

from __future__ import annotations

import msgspec
import pytest

from tidings.core import replay as rules
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


async def test_read_range_appends_a_replays_header_pairs_to_each_event(store: Store) -> None:
    own = b'[["k",{"Text":"v"}]]'
    await store.append([ev("a.b", 0), msgspec.structs.replace(ev("a.b", 1), headers=own)])
    pairs = rules.replay_pairs(7, None)
    plain, mine = await store.read_range("a.b", 0, 99, 10, pairs=pairs)
    assert plain.headers == rules.append_pairs(b"[]", pairs)
    assert mine.headers == rules.append_pairs(own, pairs)
    assert msgspec.json.decode(mine.headers)[0] == ["k", {"Text": "v"}]
    assert [e.headers for e in await store.read_range("a.b", 0, 99, 10)] == [b"[]", own]  # without: as stored


async def test_credit_ledger(store: Store) -> None:
    assert await store.credit_balance("bob") == 0
    assert await store.fund_credit("bob", 10) == 10
    assert await store.fund_credit("bob", -4) == 6
    with pytest.raises(InsufficientCredit):
        await store.fund_credit("bob", -7)
    assert await store.credit_balance("bob") == 6


async def test_a_replays_kept_ids_are_taken_once_and_never_given_again(store: Store) -> None:
    events = await store.append([ev("a.b", i) for i in range(4)])
    s = await store.create_subscription(sub())
    first = await store.open_notifications(s.id, events[:1], events[0].seq)
    r1 = await _replay(store, s.id, state="running")
    r2 = await _replay(store, s.id, state="running")
    base = await store.replay_id_base(r1.id, 3)
    assert base > first[-1]
    assert await store.replay_id_base(r1.id, 3) == base  # the same block on every call
    other = await store.replay_id_base(r2.id, 2)
    assert other >= base + 3
    later = await store.open_notifications(s.id, events[1:3], events[2].seq)
    assert later[0] >= other + 2
    recorded = await store.record_replay_batch(r1.id, s.id, [copy_of(events[3], r1.id)], 1, now=1)
    assert recorded is not None and recorded[0] > later[-1]
    # A batch recorded under kept ids: they are its pending notifications' ids.
    kept = await store.record_replay_batch(
        r2.id, s.id, [copy_of(e, r2.id) for e in events[:2]], 2, now=2, ids=[other, other + 1]
    )
    assert kept == [other, other + 1]
    assert [p.id for p in await store.pending(s.id) if p.id in kept] == kept
    assert set(await store.replay_events(kept)) == set(kept)


async def test_a_confirmed_replay_batch_records_deliveries_position_debit_and_stats_at_once(store: Store) -> None:
    events = await store.append([ev("a.b", i) for i in range(3)])
    s = await store.create_subscription(sub())
    r = await _replay(store, s.id, price=2)
    copies = [copy_of(e, r.id) for e in events[:2]]
    base = await store.replay_id_base(r.id, 3)
    ids = [base, base + 1]
    pairs = list(zip(ids, copies, strict=True))
    stat = [Stat("subscription", str(s.id), "n", 2)]
    # no such replay: nothing written
    assert await store.record_replay_confirmed(r.id + 1, s.id, pairs, 2, stat, created_at=3, now=4) is False
    await store.move_replay(r.id, "running", from_states=["pending"], now=1)
    with pytest.raises(InsufficientCredit):
        await store.record_replay_confirmed(r.id, s.id, pairs, 2, stat, created_at=3, now=4)
    assert await store.deliveries() == []
    (rec,) = await store.get_replays([r.id])
    assert (rec.position, rec.sent, rec.charged) == (0, 0, 0)
    await store.fund_credit("alice", 5)
    assert await store.record_replay_confirmed(r.id, s.id, pairs, 2, stat, created_at=3, now=4) is True
    (rec,) = await store.get_replays([r.id])
    assert (rec.position, rec.sent, rec.charged) == (2, 2, 4)
    assert await store.credit_balance("alice") == 1
    assert (await store.stats("subscription", str(s.id)))["n"] == 2
    assert await store.pending(s.id) == []  # nothing is left to send
    assert await store.replay_events(ids) == {}
    records = await store.deliveries()
    assert [
        (d.notification_id, d.subscription_id, d.subscriber, d.namespace, d.seq, d.event_id, d.source,
         d.event_timestamp, d.created_at, d.settled_at, d.attempts, d.outcome, d.replay)
        for d in records
    ] == [
        (i, s.id, "alice", "a.b", e.seq, e.id, e.source, e.timestamp, 3, 4, 1, "confirmed", True)
        for i, e in pairs
    ]
    assert records[0].serial < records[1].serial
    counts = (await store.replay_counts([r.id]))[r.id]
    assert (counts.pending, counts.dead_lettered) == (0, 0)
    # A push confirmed after a cancel and the subscription's deletion still counts: what
    # was sent is not recalled.
    await store.move_replay(r.id, "canceled", from_states=["running"], now=5)
    await store.delete_subscription(s.id)
    await store.fund_credit("alice", 1)
    more = [(base + 2, copy_of(events[2], r.id))]
    assert await store.record_replay_confirmed(r.id, s.id, more, 3, created_at=5, now=6) is True
    (rec,) = await store.get_replays([r.id])
    assert (rec.state, rec.position, rec.sent, rec.charged) == ("canceled", 3, 3, 6)
    last = (await store.deliveries())[-1]
    assert (last.notification_id, last.subscriber, last.event_id) == (more[0][0], "", events[2].id)


async def test_kept_ids_outlive_a_restart(tmp_path: object) -> None:
    from pathlib import Path

    from tidings.store import SQLiteStore

    path = Path(str(tmp_path)) / "r.db"
    first = SQLiteStore(path)
    await first.open()
    s = await first.create_subscription(sub())
    r = await _replay(first, s.id)
    base = await first.replay_id_base(r.id, 5)
    await first.close()
    again = SQLiteStore(path)
    await again.open()
    try:
        assert await again.replay_id_base(r.id, 5) == base
        events = await again.append([ev("a.b")])
        (nid,) = await again.open_notifications(s.id, events, events[0].seq)
        assert nid > base + 4
    finally:
        await again.close()
