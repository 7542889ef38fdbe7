"""The ``Store`` contract's compare-and-sets, on every backend: a change computed from a
record read earlier is written only while the stored record is still that one, so two
changes made at once (through one broadcaster or several) never lose one another
(docs/scaling.md, "Shared state")."""

from __future__ import annotations

import dataclasses

import pytest

from tidings.store import (
    PublicationRecord,
    SchemaChange,
    SchemaConflict,
    SchemaRecord,
    SchemaVersion,
    Store,
    SubscriptionRecord,
)

from .test_store_contract import store  # noqa: F401  (the fixture: every backend)


def _pairs(**kv: int) -> list[list[object]]:
    return [[k, {"Nat": v}] for k, v in kv.items()]


async def test_a_publication_update_is_a_compare_and_set_on_the_stored_record(store: Store) -> None:  # noqa: F811
    read = PublicationRecord(namespace="a.b", owner="alice", config=_pairs(x=1), created_at=3)
    assert await store.create_publication(read)
    first = dataclasses.replace(read, config=_pairs(x=1, y=2))
    second = dataclasses.replace(read, config=_pairs(x=1, z=3))
    assert await store.update_publication(first, expected=read)
    # Computed from the same read as the first: refused, and nothing of it written.
    assert not await store.update_publication(second, expected=read)
    assert (await store.list_publications())[0].config == first.config
    # Computed again from what is stored now: written.
    stored = (await store.list_publications())[0]
    assert await store.update_publication(dataclasses.replace(stored, config=_pairs(x=1, y=2, z=3)), expected=stored)
    assert (await store.list_publications())[0].config == _pairs(x=1, y=2, z=3)
    # Without ``expected``: written whatever is stored; a publication that is not there: False.
    assert await store.update_publication(read)
    assert not await store.update_publication(dataclasses.replace(read, namespace="c.d"), expected=read)
    assert not await store.update_publication(dataclasses.replace(read, namespace="c.d"))


async def test_a_subscription_update_is_a_compare_and_set_on_the_stored_record(store: Store) -> None:  # noqa: F811
    read = await store.create_subscription(SubscriptionRecord(
        id=0, subscriber="alice", namespace="a.b", endpoint=None, config=_pairs(x=1), created_at=7,
    ))
    moved = dataclasses.replace(read, endpoint="http://x")
    stopped = dataclasses.replace(read, config=_pairs(x=1, s=1))
    assert await store.update_subscription(moved, expected=read)
    assert not await store.update_subscription(stopped, expected=read)
    (now,) = await store.list_subscriptions()
    assert (now.endpoint, now.config) == ("http://x", _pairs(x=1))
    assert await store.update_subscription(dataclasses.replace(now, config=_pairs(x=1, s=1)), expected=now)
    (now,) = await store.list_subscriptions()
    assert (now.endpoint, now.config) == ("http://x", _pairs(x=1, s=1))
    await store.delete_subscription(read.id)
    assert not await store.update_subscription(now, expected=now)
    assert not await store.update_subscription(now)


def _change(action: str) -> SchemaChange:
    return SchemaChange(schema_id=None, at=1, by="root", action=action)


async def test_schema_writes_are_compare_and_sets_on_the_registrys_seq(store: Store) -> None:  # noqa: F811
    assert await store.schema_seq() == 0
    assert (await store.load_schemas()).seq == 0
    c = _change("register")
    rec = await store.create_schema(
        SchemaRecord(format="JSON", model="{}", canonical="a"),
        [SchemaVersion(name="n", version=1, schema_id=0)], c, expect_seq=0,
    )
    assert c.seq == await store.schema_seq() == (await store.load_schemas()).seq == 1
    # A write decided on seq 0, after another was made: refused, and nothing of it written.
    with pytest.raises(SchemaConflict):
        await store.create_schema(
            SchemaRecord(format="JSON", model="{}", canonical="b"),
            [SchemaVersion(name="n", version=1, schema_id=0)], _change("register"), expect_seq=0,
        )
    with pytest.raises(SchemaConflict):
        await store.save_schema(dataclasses.replace(rec, retention_s=60), [], [_change("retention")], expect_seq=0)
    with pytest.raises(SchemaConflict):
        await store.put_schema_setting("compatibility:n", "NONE", _change("compatibility"), expect_seq=0)
    snap = await store.load_schemas()
    assert ([(r.id, r.retention_s) for r in snap.schemas], snap.settings, snap.seq) == ([(1, None)], {}, 1)
    assert [(v.name, v.version, v.schema_id) for v in snap.versions] == [("n", 1, 1)]
    # Decided on what is stored: written, each change given its seq.
    changes = [_change("retention"), _change("state")]
    await store.save_schema(dataclasses.replace(rec, retention_s=60), [], changes, expect_seq=1)
    assert [x.seq for x in changes] == [2, 3]
    s = _change("compatibility")
    await store.put_schema_setting("compatibility:n", "NONE", s, expect_seq=3)
    assert s.seq == await store.schema_seq() == 4
    # Without ``expect_seq``: written whatever the seq.
    await store.put_schema_setting("compatibility:n", None, _change("compatibility"))
    assert await store.schema_seq() == 5
    snap = await store.load_schemas()
    assert ([(r.id, r.retention_s) for r in snap.schemas], snap.settings, snap.seq) == ([(1, 60)], {}, 5)
