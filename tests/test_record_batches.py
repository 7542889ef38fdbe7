"""Delivery records of a batch confirmed whole, kept as one row per batch
(tidings.core.record_batch): every reader still sees one record per notification.

The store contract part runs on every backend (only SQLite packs; the others must read
the same); the rest is the SQLite file as the pipeline reads and trims it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.record_batch import MAX_ITEMS, RECORD_COLUMNS, expand, pack, unpack
from tidings.store import DeliveryRecord, SQLiteStore, Store, StoredEvent

from .test_store_contract import ev, store, sub

__all__ = ["store"]

_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(st.lists(st.tuples(_ints, _ints, _ints, st.sampled_from([None, "alice", "bob", "é\u2028\"x"]),
                          st.none() | _ints), min_size=1, max_size=60),
       st.integers(min_value=1, max_value=2**62))
def test_a_packed_row_expands_to_its_records_with_consecutive_serials(items: list[Any], serial: int) -> None:
    ids, seqs, eids, sources, stamps = (list(c) for c in zip(*items, strict=True))
    row = (serial, ids[0], 9, "sub", "a.b", seqs[0], eids[0], sources[0], stamps[0], 5, 6, 1, "confirmed", True)
    got = expand(row, pack(ids, seqs, eids, sources, stamps))
    assert [r[0] for r in got] == list(range(serial, serial + len(items)))
    assert [(r[1], r[5], r[6], r[7], r[8]) for r in got] == items
    assert all(r[2:5] == (9, "sub", "a.b") and r[9:] == (5, 6, 1, "confirmed", True) for r in got)
    assert all(len(r) == len(RECORD_COLUMNS) for r in got)
    assert expand(row, None) == [row]


def test_pack_refuses_what_no_row_may_hold_and_unpack_what_pack_did_not_write() -> None:
    with pytest.raises(ValueError):
        pack([], [], [], [], [])
    with pytest.raises(ValueError):
        pack(list(range(MAX_ITEMS + 1)), [0] * (MAX_ITEMS + 1), [0] * (MAX_ITEMS + 1), [None] * (MAX_ITEMS + 1),
             [None] * (MAX_ITEMS + 1))
    with pytest.raises(ValueError):
        pack([1, 2], [1], [1, 2], ["a", "b"], [1, 2])
    for bad in (b"", b"\xc1", msgspec.msgpack.encode([[1], [1, 2], [1], "s", [1]]),
                msgspec.msgpack.encode([[1, 2], [1, 2], [1, 2], ["s"], [1, 2]]),
                msgspec.msgpack.encode([[], [], [], "s", []]), msgspec.msgpack.encode({"ids": [1]})):
        with pytest.raises((msgspec.ValidationError, msgspec.DecodeError)):
            unpack(bad)
    # One publisher for the whole batch is kept once.
    same = pack(list(range(100)), list(range(100)), list(range(100)), ["publisher"] * 100, [1] * 100)
    mixed = pack(list(range(100)), list(range(100)), list(range(100)), ["publisher", None] * 50, [1] * 100)
    assert len(same) < len(mixed) - 500


def _fields(d: DeliveryRecord) -> tuple[Any, ...]:
    return (d.notification_id, d.subscription_id, d.subscriber, d.namespace, d.seq, d.event_id, d.source,
            d.event_timestamp, d.created_at, d.settled_at, d.attempts, d.outcome, d.replay)


async def _mixed_records(store: Store) -> tuple[list[tuple[int, StoredEvent]], list[int], int]:
    """A settled single record, a confirmed batch of more than two rows' worth with a gap
    in its ids at every other one, another single, and a batch of two namespaces: the
    confirmed pairs, the ids left out, and the subscription."""
    n = 2 * MAX_ITEMS + 300
    events = await store.append([ev("a.b", i) for i in range(n + 2)] + [ev("c.d", i) for i in range(3)])
    s = await store.create_subscription(sub())
    (single,) = await store.open_notifications(s.id, events[:1], events[0].seq)
    assert await store.settle_notifications([single]) == [single]
    base = await store.take_notification_ids(2 * n + 10)
    big = [(base + 2 * k, e) for k, e in enumerate(events[1 : n + 1])]
    await store.record_confirmed(s.id, "alice", big, events[n].seq, created_at=3, now=4)
    (other,) = await store.open_notifications(s.id, events[n + 1 : n + 2], events[n + 1].seq)
    assert await store.settle_notifications([other]) == [other]
    ab, cd = events[n + 1], events[n + 2 : n + 5]
    mixed = [(base + 2 * n + 1, ab), (base + 2 * n + 2, cd[0]), (base + 2 * n + 3, cd[1]),
             (base + 2 * n + 4, ab), (base + 2 * n + 5, cd[2])]
    await store.record_confirmed(s.id, "alice", mixed, events[-1].seq, created_at=5, now=6)
    gaps = [base + 2 * k + 1 for k in range(n - 1)]
    return big + mixed, gaps, s.id


async def test_every_reader_sees_one_record_per_notification_at_any_page(store: Store) -> None:
    confirmed, gaps, sub_id = await _mixed_records(store)
    full = await store.deliveries()
    serials = [d.serial for d in full]
    assert serials == sorted(set(serials))
    got = [d for d in full if d.outcome == "confirmed" and d.created_at in (3, 5)]
    assert [_fields(d) for d in got] == [
        (i, sub_id, "alice", e.namespace, e.seq, e.id, e.source, e.timestamp, 3 if k < len(confirmed) - 5 else 5,
         4 if k < len(confirmed) - 5 else 6, 1, "confirmed", False)
        for k, (i, e) in enumerate(confirmed)
    ]
    assert len(full) == len(confirmed) + 2
    # Pages start and end inside a packed row, at its edges, and past the end.
    cuts = {0, 1, 2, MAX_ITEMS - 1, MAX_ITEMS, MAX_ITEMS + 1, 2 * MAX_ITEMS, len(full) - 3, len(full) - 1}
    for k in sorted(cuts):
        after = full[k].serial if k else 0
        for limit in (1, 7, MAX_ITEMS + 3, None):
            want = [d for d in full if d.serial > after]
            assert await store.deliveries(after, limit) == (want if limit is None else want[:limit])
    assert await store.deliveries(full[-1].serial) == []
    # Whose each id was, for every id of every row; never for an id inside a row's range
    # that was not pushed, nor one past them all.
    ids = [i for i, _ in confirmed]
    assert await store.former_subscribers(ids) == dict.fromkeys(ids, "alice")
    assert await store.former_subscribers([*gaps, ids[-1] + 1, 10**15, 0, -5]) == {}


async def _stored_mixed_records(tmp_path: Path) -> list[Any]:
    """:func:`_mixed_records` in an SQLite store at ``tmp_path``, closed; its records."""
    store = SQLiteStore(tmp_path / "tidings.db")
    await store.open()
    try:
        await _mixed_records(store)
        return list(await store.deliveries())
    finally:
        await store.close()


async def test_the_pipeline_trims_and_reads_records_not_rows(tmp_path: Path) -> None:
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from tidings.pipeline._backend import hot_log
    from tidings.pipeline.deliveries import DELIVERY_SCHEMA, DeliveriesReader

    full = await _stored_mixed_records(tmp_path)
    with sqlite3.connect(tmp_path / "tidings.db") as c:
        assert c.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0] < len(full) // 100  # packed
    wanted = [tuple(getattr(d, f) for f in RECORD_COLUMNS) for d in full]

    def read(size: int, lo: int | None = None, hi: int | None = None) -> list[tuple[Any, ...]]:
        reader = DeliveriesReader.from_options(
            {"path": str(tmp_path), "table": "deliveries", "partitionSize": str(size)}, DELIVERY_SCHEMA
        )
        pushed = [f for f in (None if lo is None else GreaterThanOrEqual(("serial",), lo),
                              None if hi is None else LessThan(("serial",), hi)) if f is not None]
        assert list(reader.pushFilters(pushed)) == []
        return [tuple(r.values()) for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]

    # Partitions that cut packed rows, and bounds inside them, read each record once.
    for size in (7, MAX_ITEMS - 1, MAX_ITEMS + 1, 100_000):
        assert read(size) == wanted
    mid, end = full[MAX_ITEMS + 17].serial, full[2 * MAX_ITEMS + 5].serial
    assert read(333, mid, end) == [r for r in wanted if mid <= r[0] < end]
    with hot_log(str(tmp_path)).connect(write=True) as s:
        assert s.trim_deliveries(time.time_ns()) == len(full)
    assert read(100) == []


async def test_a_store_from_before_packed_rows_is_brought_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "tidings.db"
    store = SQLiteStore(path)
    await store.open()
    events = await store.append([ev("a.b", i) for i in range(3)])
    s = await store.create_subscription(sub())
    ids = await store.open_notifications(s.id, events[:2], events[1].seq)
    await store.settle_notifications(ids)
    await store.close()
    with sqlite3.connect(path) as c:  # as an earlier version left it
        c.execute("DROP INDEX deliveries_batches")
        c.execute("ALTER TABLE deliveries DROP COLUMN items")
        c.execute("ALTER TABLE deliveries DROP COLUMN n")
        c.execute("PRAGMA user_version = 0")  # which had no schema version yet
    again = SQLiteStore(path)
    await again.open()
    try:
        assert [d.notification_id for d in await again.deliveries()] == ids
        base = await again.take_notification_ids(10)
        await again.record_confirmed(s.id, "alice", [(base, events[2]), (base + 1, events[1])], events[2].seq,
                                     created_at=1, now=2)
        assert [d.notification_id for d in await again.deliveries()] == [*ids, base, base + 1]
        assert await again.former_subscribers([base + 1]) == {base + 1: "alice"}
    finally:
        await again.close()


async def test_the_records_source_takes_bounds_at_the_ends_of_int64(tmp_path: Path) -> None:
    """Pushed-down bounds at ±2^63 (Spark's long range): no value past int64 reaches SQLite,
    and what they select is exact (a bound no value can meet selects nothing)."""
    from pyspark.sql.datasource import GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual

    from tidings.pipeline.deliveries import DELIVERY_SCHEMA, DeliveriesReader

    full = await _stored_mixed_records(tmp_path)
    top, bottom = 2**63 - 1, -(2**63)
    cases = [
        ([GreaterThanOrEqual(("serial",), bottom)], len(full)),
        ([GreaterThan(("serial",), top)], 0),
        ([LessThan(("created_at",), bottom)], 0),
        ([LessThanOrEqual(("settled_at",), top), GreaterThan(("created_at",), bottom)], len(full)),
    ]
    for filters, want in cases:
        reader = DeliveriesReader.from_options({"path": str(tmp_path), "table": "deliveries"}, DELIVERY_SCHEMA)
        assert list(reader.pushFilters(filters)) == []
        assert sum(b.num_rows for p in reader.partitions() for b in reader.read(p)) == want, filters
