"""The store's part in pushing before recording (tidings.broker.delivery._direct), against every
backend: ids set aside, a confirmed batch recorded in one write, a batch that was not
taken recorded as pending under the ids it was pushed with."""

from __future__ import annotations

from pathlib import Path

from tidings.store import SQLiteStore, Stat, Store

from .test_store_contract import ev, store, sub

__all__ = ["store"]


async def test_ids_set_aside_are_never_given_to_a_row_or_another_block(store: Store) -> None:
    events = await store.append([ev("a.b", i) for i in range(4)])
    s = await store.create_subscription(sub())
    (first,) = await store.open_notifications(s.id, events[:1], events[0].seq)
    base = await store.take_notification_ids(100)
    assert base > first
    other = await store.take_notification_ids(1)
    assert other >= base + 100
    later = await store.open_notifications(s.id, events[1:3], events[2].seq)
    assert later[0] > other and later == sorted(later)
    # A batch pushed under ids of the block, not taken: pending under exactly those ids.
    kept = await store.open_notifications(s.id, events[3:], events[3].seq, ids=[base + 7])
    assert kept == [base + 7]
    assert sorted(p.id for p in await store.pending(s.id)) == sorted([first, *later, base + 7])
    assert (await store.list_subscriptions())[0].cursor == events[3].seq


async def test_a_confirmed_batch_records_deliveries_cursor_and_stats_at_once(store: Store) -> None:
    events = await store.append([ev("a.b", i) for i in range(3)])
    s = await store.create_subscription(sub())
    start = (await store.list_subscriptions())[0].cursor
    base = await store.take_notification_ids(10)
    pairs = [(base + k, e) for k, e in enumerate(events[:2])]
    stat = [Stat("subscription", str(s.id), "n", 2)]
    await store.record_confirmed(s.id, "alice", pairs, events[2].seq, stat, created_at=3, now=4)
    assert (await store.list_subscriptions())[0].cursor == events[2].seq
    assert (await store.stats("subscription", str(s.id)))["n"] == 2
    assert await store.pending(s.id) == []
    records = await store.deliveries()
    assert [
        (d.notification_id, d.subscription_id, d.subscriber, d.namespace, d.seq, d.event_id, d.source,
         d.event_timestamp, d.created_at, d.settled_at, d.attempts, d.outcome, d.replay)
        for d in records
    ] == [
        (i, s.id, "alice", "a.b", e.seq, e.id, e.source, e.timestamp, 3, 4, 1, "confirmed", False)
        for i, e in pairs
    ]
    assert await store.former_subscribers([base, base + 1]) == {base: "alice", base + 1: "alice"}
    # The cursor never moves back (records of earlier batches may commit after later ones
    # in another process's view; here, the same store): nor does an empty batch move it.
    await store.record_confirmed(s.id, "alice", [], start, created_at=5, now=6)
    assert (await store.list_subscriptions())[0].cursor == events[2].seq
    # A subscription deleted meanwhile: what it was pushed and confirmed is still recorded.
    await store.delete_subscription(s.id)
    await store.record_confirmed(s.id, "alice", [(base + 2, events[2])], events[2].seq, created_at=7, now=8)
    assert (await store.deliveries())[-1].notification_id == base + 2
    assert await store.list_subscriptions() == []


async def test_ids_set_aside_outlive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    first = SQLiteStore(path)
    await first.open()
    s = await first.create_subscription(sub())
    base = await first.take_notification_ids(1_000)
    await first.close()
    again = SQLiteStore(path)
    await again.open()
    try:
        assert await again.take_notification_ids(1) >= base + 1_000
        events = await again.append([ev("a.b")])
        (nid,) = await again.open_notifications(s.id, events, events[0].seq)
        assert nid > base + 1_000
    finally:
        await again.close()
