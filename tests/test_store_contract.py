"""The ``Store`` contract, run against every backend (see ``tidings.store._base``)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from tidings.errors import StoreError
from tidings.store import (
    MemoryStore,
    NewEvent,
    PostgresStore,
    PrincipalRecord,
    PublicationRecord,
    SchemaChange,
    SchemaRecord,
    SchemaVersion,
    SQLiteStore,
    Stat,
    Store,
    StoredEvent,
    SubscriptionRecord,
)

from .pg_support import fresh_schema


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store
    if request.param == "memory":
        s = MemoryStore()
    elif request.param == "sqlite":
        s = SQLiteStore(tmp_path / "t.db")
    else:
        async with fresh_schema(request.getfixturevalue("pg_database")) as schema:
            s = PostgresStore(request.getfixturevalue("pg_database"), server_settings={"search_path": schema})
            await s.open()
            try:
                yield s
            finally:
                await s.close()
        return
    await s.open()
    try:
        yield s
    finally:
        await s.close()


def ev(ns: str, n: int = 0) -> NewEvent:
    return NewEvent(namespace=ns, source="src", timestamp=1_000 + n, data=b'{"Nat":%d}' % n)


def sub(ns: str = "a.b", subscriber: str = "alice", endpoint: str | None = "http://x") -> SubscriptionRecord:
    return SubscriptionRecord(
        id=0, subscriber=subscriber, namespace=ns, endpoint=endpoint, config=[["k", {"Nat": 1}]],
        created_at=7,
    )


def assert_chains(events: Sequence[StoredEvent]) -> None:
    """Global seqs are 1..n; each namespace's ids are 1..m linked by prev_id, in seq order."""
    ordered = sorted(events, key=lambda e: e.seq)
    assert [e.seq for e in ordered] == list(range(1, len(ordered) + 1))
    by_ns: dict[str, list[StoredEvent]] = defaultdict(list)
    for e in ordered:
        by_ns[e.namespace].append(e)
    for evs in by_ns.values():
        assert [e.id for e in evs] == list(range(1, len(evs) + 1))
        assert [e.prev_id for e in evs] == [None, *range(1, len(evs))]


# -- principals -----------------------------------------------------------------------


async def test_principals_and_tokens(store: Store) -> None:
    assert await store.create_principal(PrincipalRecord(name="bob", created_at=5), b"t-bob")
    assert await store.create_principal(PrincipalRecord(name="alice", admin=True), b"t-alice")
    assert not await store.create_principal(PrincipalRecord(name="bob"), b"t-other")
    # The refused create left no token behind.
    assert await store.principal_by_token(b"t-other") is None

    assert await store.principal_by_token(b"t-bob") == PrincipalRecord(name="bob", created_at=5)
    assert await store.principal_by_token(b"t-alice") == PrincipalRecord(name="alice", admin=True)
    assert await store.principal_by_token(b"nope") is None

    assert await store.add_token("bob", b"t-bob-2")
    assert not await store.add_token("carol", b"t-carol")
    assert await store.principal_by_token(b"t-carol") is None
    assert (await store.principal_by_token(b"t-bob-2")) == PrincipalRecord(name="bob", created_at=5)

    assert [p.name for p in await store.list_principals()] == ["alice", "bob"]
    assert [p.admin for p in await store.list_principals()] == [True, False]

    # Revoking: one token, only if it is that principal's; then all of them.
    assert await store.revoke_tokens("alice", b"t-bob") == 0
    assert await store.revoke_tokens("bob", b"t-bob") == 1
    assert await store.principal_by_token(b"t-bob") is None
    assert await store.principal_by_token(b"t-bob-2") is not None
    assert await store.revoke_tokens("bob") == 1
    assert await store.principal_by_token(b"t-bob-2") is None
    assert await store.principal_by_token(b"t-alice") is not None
    assert [p.name for p in await store.list_principals()] == ["alice", "bob"]  # the principal stays


# -- publications and publishers ------------------------------------------------------


async def test_publications(store: Store) -> None:
    for ns in ["c.ns", "a.ns", "b.ns"]:
        rec = PublicationRecord(namespace=ns, owner="alice", config=[["x", {"Nat": 1}]], created_at=3)
        assert await store.create_publication(rec)
    assert not await store.create_publication(PublicationRecord(namespace="a.ns", owner="bob"))

    pubs = await store.list_publications()
    assert [p.namespace for p in pubs] == ["a.ns", "b.ns", "c.ns"]
    assert pubs[0] == PublicationRecord(
        namespace="a.ns", owner="alice", config=[["x", {"Nat": 1}]], created_at=3
    )

    await store.update_publication(PublicationRecord(namespace="b.ns", owner="bob", config=[], created_at=99))
    b = (await store.list_publications(after="a.ns", limit=1))[0]
    # Owner and config replaced; created_at is not something an update changes.
    assert (b.namespace, b.owner, b.config, b.created_at) == ("b.ns", "bob", [], 3)
    # Updating an unknown namespace does not create it.
    await store.update_publication(PublicationRecord(namespace="zz", owner="bob"))

    assert [p.namespace for p in await store.list_publications(limit=2)] == ["a.ns", "b.ns"]
    assert [p.namespace for p in await store.list_publications(after="b.ns")] == ["c.ns"]
    assert [p.namespace for p in await store.list_publications(after="b.ns", limit=5)] == ["c.ns"]
    assert await store.list_publications(after="c.ns") == []
    assert await store.list_publications(limit=0) == []


async def test_publishers(store: Store) -> None:
    assert await store.add_publisher("b.ns", "zed")
    assert await store.add_publisher("a.ns", "mia")
    assert await store.add_publisher("b.ns", "amy")
    assert not await store.add_publisher("b.ns", "amy")
    assert await store.list_publishers() == [("a.ns", "mia"), ("b.ns", "amy"), ("b.ns", "zed")]
    assert await store.list_publishers("b.ns") == [("b.ns", "amy"), ("b.ns", "zed")]
    assert await store.list_publishers("none") == []


async def test_a_publication_is_created_with_its_first_publisher(store: Store) -> None:
    assert await store.create_publication(PublicationRecord(namespace="p.ns", owner="alice"), publisher="alice")
    assert await store.list_publishers("p.ns") == [("p.ns", "alice")]
    # Registered already: neither the publication nor the publisher is written.
    assert not await store.create_publication(PublicationRecord(namespace="p.ns", owner="bob"), publisher="bob")
    assert await store.list_publishers("p.ns") == [("p.ns", "alice")]
    assert [p.owner for p in await store.list_publications()] == ["alice"]


async def test_records_are_copies(store: Store) -> None:
    config: list = [["x", {"Nat": 1}]]
    await store.create_publication(PublicationRecord(namespace="a", owner="o", config=config))
    config.append(["y", {"Nat": 2}])
    (await store.list_publications())[0].config.append("junk")
    assert (await store.list_publications())[0].config == [["x", {"Nat": 1}]]

    rec = sub()
    created = await store.create_subscription(rec)
    created.config.append("junk")
    rec.config.append("junk")
    listed = (await store.list_subscriptions())[0]
    listed.config.append("junk")
    listed.cursor = 42
    assert (await store.list_subscriptions())[0] == SubscriptionRecord(
        id=created.id, subscriber="alice", namespace="a.b", endpoint="http://x",
        config=[["k", {"Nat": 1}]], cursor=0, created_at=7,
    )


# -- subscriptions --------------------------------------------------------------------


async def test_subscriptions(store: Store) -> None:
    s1 = await store.create_subscription(sub("a.b"))
    assert (s1.id, s1.cursor, s1.subscriber, s1.mode) == (1, 0, "alice", "trusted")
    await store.append([ev("a.b"), ev("c.d"), ev("a.b")])
    s2 = await store.create_subscription(sub("c.d", subscriber="bob", endpoint=None))
    assert s2.id > s1.id
    assert s2.cursor == await store.head() == 3
    s3 = await store.create_subscription(sub("a.b"))

    await store.update_subscription(
        SubscriptionRecord(id=s1.id, subscriber="ignored", namespace="ignored", endpoint="http://y",
                           mode="untrusted", config=[], cursor=999)
    )
    got = (await store.list_subscriptions(limit=1))[0]
    # Config, endpoint and mode replaced; the cursor (and who/where) kept.
    assert got == SubscriptionRecord(id=s1.id, subscriber="alice", namespace="a.b", endpoint="http://y",
                                     mode="untrusted", config=[], cursor=0, created_at=7)

    assert [s.id for s in await store.list_subscriptions()] == [s1.id, s2.id, s3.id]
    assert [s.id for s in await store.list_subscriptions(after=s1.id)] == [s2.id, s3.id]
    assert [s.id for s in await store.list_subscriptions(after=s1.id, limit=1)] == [s2.id]
    assert [s.id for s in await store.list_subscriptions(namespace="a.b")] == [s1.id, s3.id]
    assert [s.id for s in await store.list_subscriptions(namespace="a.b", after=s1.id)] == [s3.id]
    assert await store.list_subscriptions(namespace="zz") == []

    await store.delete_subscription(s1.id)
    await store.delete_subscription(12345)  # unknown: no error
    assert [s.id for s in await store.list_subscriptions()] == [s2.id, s3.id]
    # Ids are never reused, even of deleted subscriptions.
    s4 = await store.create_subscription(sub())
    assert s4.id > s3.id


# -- the event log --------------------------------------------------------------------


async def test_append_chains_ids_per_namespace(store: Store) -> None:
    assert await store.head() == 0
    first = await store.append([ev("a", 1), ev("a", 2), ev("b", 3)])
    assert [(e.seq, e.namespace, e.id, e.prev_id) for e in first] == [
        (1, "a", 1, None), (2, "a", 2, 1), (3, "b", 1, None),
    ]
    assert first[0] == StoredEvent(seq=1, namespace="a", id=1, prev_id=None, timestamp=1001, source="src",
                                   data=b'{"Nat":1}', headers=b"[]")
    second = await store.append([ev("b", 4), ev("c", 5), ev("a", 6)])
    assert [(e.seq, e.namespace, e.id, e.prev_id) for e in second] == [
        (4, "b", 2, 1), (5, "c", 1, None), (6, "a", 3, 2),
    ]
    assert await store.append([]) == []
    assert await store.head() == 6
    log = await store.read_after(0)
    assert log == first + second
    assert_chains(log)


async def test_concurrent_appends_stay_gap_free(store: Store) -> None:
    nss = ["x", "y", "z"]
    batches = [[ev(nss[(i + k) % 3], i) for k in range(i % 4 + 1)] for i in range(50)]
    results = await asyncio.gather(*(store.append(b) for b in batches))
    for batch, out in zip(batches, results, strict=True):
        assert [e.namespace for e in out] == [e.namespace for e in batch]
        assert [e.timestamp for e in out] == [e.timestamp for e in batch]
        # One call's events are contiguous in the log.
        assert [e.seq for e in out] == list(range(out[0].seq, out[0].seq + len(out)))
    returned = [e for out in results for e in out]
    assert len({(e.namespace, e.id) for e in returned}) == len(returned)
    assert_chains(returned)
    log = await store.read_after(0, limit=10_000)
    assert sorted(returned, key=lambda e: e.seq) == log
    assert await store.head() == len(log) == sum(map(len, batches))


async def test_failed_append_leaves_nothing(store: Store) -> None:
    await store.append([ev("a")], [Stat("publication", "a", "events")])
    bad = Stat("publication", "a", "events", "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await store.append([ev("a"), ev("b")], [bad])
    assert await store.head() == 1
    assert await store.stats("publication", "a") == {"events": 1}
    # Failing alongside good calls (one group in SQLite): the others land, no gaps.
    results = await asyncio.gather(
        store.append([ev("a"), ev("b")]), store.append([ev("a")], [bad]), store.append([ev("b"), ev("a")]),
        return_exceptions=True,
    )
    assert isinstance(results[1], TypeError)
    assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
    log = await store.read_after(0)
    assert len(log) == 5
    assert_chains(log)


async def test_read_after_and_read_seqs(store: Store) -> None:
    await store.append([ev("a", i) if i % 2 else ev("b", i) for i in range(10)])
    assert [e.seq for e in await store.read_after(0)] == list(range(1, 11))
    assert [e.seq for e in await store.read_after(7)] == [8, 9, 10]
    assert await store.read_after(10) == []
    assert [e.seq for e in await store.read_after(0, limit=3)] == [1, 2, 3]
    assert [e.seq for e in await store.read_after(3, limit=2)] == [4, 5]
    a = await store.read_after(0, namespaces=["a"])
    assert [(e.seq, e.id) for e in a] == [(2, 1), (4, 2), (6, 3), (8, 4), (10, 5)]
    assert [e.seq for e in await store.read_after(4, namespaces=["a"], limit=2)] == [6, 8]
    assert [e.seq for e in await store.read_after(0, namespaces=["a", "b"], limit=4)] == [1, 2, 3, 4]
    assert await store.read_after(0, namespaces=["zz"]) == []
    assert await store.read_after(0, namespaces=[]) == []

    got = await store.read_seqs([9, 2, 42, 5, 0])
    assert [e.seq for e in got] == [2, 5, 9]
    assert got[0] == (await store.read_after(1, limit=1))[0]
    assert await store.read_seqs([]) == []
    assert await store.head() == 10


# -- notifications --------------------------------------------------------------------


async def test_notifications(store: Store) -> None:
    s = await store.create_subscription(sub("a"))
    other = await store.create_subscription(sub("a", subscriber="bob"))
    events = await store.append([ev("a", i) for i in range(4)])
    assert await store.last_notification_id() == 0

    sent = [Stat("subscription", "1", "sent", 3)]
    ids = await store.open_notifications(s.id, events[:3], cursor=3, stats=sent)
    assert len(ids) == 3 and ids == sorted(ids) and len(set(ids)) == 3
    assert await store.stats("subscription", "1") == {"sent": 3}
    assert {x.id: x.cursor for x in await store.list_subscriptions()} == {s.id: 3, other.id: 0}
    more = await store.open_notifications(other.id, events, cursor=4)
    assert min(more) > max(ids)
    assert await store.last_notification_id() == max(more)

    pend = await store.pending(s.id)
    assert [(p.id, p.subscription_id, p.seq, p.namespace, p.attempts) for p in pend] == [
        (ids[i], s.id, events[i].seq, "a", 0) for i in range(3)
    ]
    got = await store.get_notifications([ids[2], 99_999, ids[0]])
    assert sorted(p.id for p in got) == [ids[0], ids[2]]

    await store.count_attempt([ids[0], ids[1]])
    await store.count_attempt([ids[0], 99_999])
    assert [p.attempts for p in await store.pending(s.id)] == [2, 1, 0]

    ok = {i: [Stat("subscription", "1", "ok", 2)] for i in (ids[0], 99_999, ids[1])}
    settled = await store.settle_notifications([ids[0], 99_999, ids[1]], ok)
    assert settled == [ids[0], ids[1]]
    # Settling again settles nothing and counts nothing.
    assert await store.settle_notifications([ids[0], ids[1]], ok) == []
    assert await store.stats("subscription", "1") == {"sent": 3, "ok": 4}
    assert [p.id for p in await store.pending(s.id)] == [ids[2]]
    assert await store.get_notifications(ids[:2]) == []

    # Settling everything does not lower the high-water mark, nor are ids reused.
    await store.settle_notifications([ids[2], *more])
    assert await store.pending(s.id) == [] and await store.pending(other.id) == []
    assert await store.last_notification_id() == max(more)
    again = await store.open_notifications(s.id, events[3:], cursor=4)
    assert again[0] > max(more)
    assert await store.open_notifications(s.id, [], cursor=4) == []


async def test_open_notifications_for_missing_subscription(store: Store) -> None:
    events = await store.append([ev("a")])
    s = await store.create_subscription(sub("a"))
    await store.open_notifications(s.id, events, cursor=1)
    before = await store.last_notification_id()
    await store.delete_subscription(s.id)
    assert await store.pending(s.id) == []  # deleting dropped its pending notifications
    stat = Stat("subscription", "x", "n")
    assert await store.open_notifications(s.id, events, cursor=1, stats=[stat]) == []
    assert await store.last_notification_id() == before
    assert await store.stats("subscription", "x") == {}
    assert await store.list_subscriptions() == []


# -- statistics -----------------------------------------------------------------------


async def test_stats_aggregate(store: Store) -> None:
    await store.add_stats([Stat("publication", "a", "events"), Stat("publication", "a", "events", 4)])
    await store.add_stats([Stat("publication", "a", "events", 2), Stat("publication", "a", "bytes", 10)])
    await store.add_stats([Stat("publisher", "a", "events", 1)])
    assert await store.stats("publication", "a") == {"events": 7, "bytes": 10}
    assert await store.stats("publisher", "a") == {"events": 1}
    assert await store.stats("publication", "b") == {}
    # Increments that cancel out within one call create nothing.
    await store.add_stats([Stat("publication", "b", "n", 3), Stat("publication", "b", "n", -3)])
    assert await store.stats("publication", "b") == {}
    await store.add_stats([Stat("publication", "a", "bytes", -10)])
    assert await store.stats("publication", "a") == {"events": 7, "bytes": 0}
    await store.add_stats([])

    await store.append([ev("a")], [Stat("publication", "a", "events"), Stat("publisher", "p", "events")])
    assert (await store.stats("publication", "a"))["events"] == 8
    assert await store.stats("publisher", "p") == {"events": 1}


# -- lifecycle ------------------------------------------------------------------------


async def test_calls_after_close_raise(store: Store) -> None:
    await store.append([ev("a")])
    await store.close()
    with pytest.raises(StoreError):
        await store.append([ev("a")])
    with pytest.raises(StoreError):
        await store.create_principal(PrincipalRecord(name="x"), b"t")
    with pytest.raises(StoreError):
        await store.head()
    with pytest.raises(StoreError):
        await store.read_after(0)
    await store.close()  # closing twice is harmless


async def test_sqlite_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    s = SQLiteStore(path)
    await s.open()
    try:
        await s.create_principal(PrincipalRecord(name="alice", admin=True), b"tok")
        await s.create_publication(PublicationRecord(namespace="reg", owner="alice", config=[["x", 1]]))
        await s.add_publisher("reg", "alice")
        sid = (await s.create_subscription(sub("reg"))).id
        # "free" has no publication; "late" gets one only after its events.
        first = await s.append([ev("reg"), ev("free"), ev("reg"), ev("late"), ev("free")],
                               [Stat("publication", "reg", "events", 2)])
        await s.create_publication(PublicationRecord(namespace="late", owner="alice"))
        note_ids = await s.open_notifications(sid, first[:2], cursor=2)
        await s.settle_notifications(note_ids[1:])
    finally:
        await s.close()

    s = SQLiteStore(path)
    await s.open()
    try:
        assert await s.principal_by_token(b"tok") == PrincipalRecord(name="alice", admin=True)
        assert [p.namespace for p in await s.list_publications()] == ["late", "reg"]
        assert await s.list_publishers() == [("reg", "alice")]
        assert [(x.id, x.cursor) for x in await s.list_subscriptions()] == [(sid, 2)]
        assert await s.read_after(0) == first
        assert await s.head() == 5
        assert [p.id for p in await s.pending(sid)] == note_ids[:1]
        assert await s.last_notification_id() == note_ids[-1]
        assert await s.stats("publication", "reg") == {"events": 2}

        more = await s.append([ev("reg"), ev("free"), ev("late"), ev("new")])
        assert [(e.seq, e.namespace, e.id, e.prev_id) for e in more] == [
            (6, "reg", 3, 2), (7, "free", 3, 2), (8, "late", 2, 1), (9, "new", 1, None),
        ]
        assert_chains(await s.read_after(0))
        assert (await s.open_notifications(sid, more[:1], cursor=6))[0] > note_ids[-1]
    finally:
        await s.close()


async def test_sqlite_failing_job_does_not_poison_group(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "t.db")
    await s.open()
    try:
        assert await s.create_principal(PrincipalRecord(name="alice"), b"tok")
        results = await asyncio.gather(
            s.append([ev("a"), ev("b")]),
            s.create_principal(PrincipalRecord(name="alice"), b"tok-2"),  # False, not an error
            s.create_subscription(sub("a")),
            s.add_token("alice", b"tok"),  # duplicate hash: this job fails
            s.append([ev("a")]),
            s.create_principal(PrincipalRecord(name="bob"), b"tok"),  # duplicate hash again
            s.append([ev("b"), ev("a")]),
            s.add_publisher("a", "alice"),
            return_exceptions=True,
        )
        assert results[1] is False and results[7] is True
        assert isinstance(results[2], SubscriptionRecord)
        assert isinstance(results[3], sqlite3.IntegrityError)
        assert isinstance(results[5], sqlite3.IntegrityError)
        appended: list[StoredEvent] = []
        for r in (results[0], results[4], results[6]):
            assert isinstance(r, list)
            appended.extend(r)
        assert_chains(appended)
        assert await s.read_after(0) == sorted(appended, key=lambda e: e.seq)
        assert [p.name for p in await s.list_principals()] == ["alice"]
        assert await s.principal_by_token(b"tok-2") is None
        assert len(await s.list_subscriptions()) == 1
    finally:
        await s.close()


# -- deletion, cursors, counts ---------------------------------------------------------


async def test_delete_publication_ends_its_subscriptions_and_keeps_the_chain(store: Store) -> None:
    await store.create_publication(PublicationRecord(namespace="a.b", owner="alice"))
    await store.create_publication(PublicationRecord(namespace="a.c", owner="alice"))
    await store.add_publisher("a.b", "alice")
    first = await store.append([ev("a.b", 1), ev("a.b", 2), ev("a.c", 3)])
    s1 = await store.create_subscription(sub("a.b"))
    s2 = await store.create_subscription(sub("a.c"))
    await store.open_notifications(s1.id, first[:1], first[0].seq)

    assert await store.delete_publication("a.b") == [s1.id]
    assert [p.namespace for p in await store.list_publications()] == ["a.c"]
    assert await store.list_publishers("a.b") == []
    assert [s.id for s in await store.list_subscriptions()] == [s2.id]
    assert await store.pending(s1.id) == []
    # The events stay; registering the namespace again continues its chain.
    assert await store.count_events("a.b") == 2
    await store.create_publication(PublicationRecord(namespace="a.b", owner="bob"))
    (again,) = await store.append([ev("a.b", 4)])
    assert (again.id, again.prev_id) == (3, 2)


async def test_move_cursor_and_count_events(store: Store) -> None:
    events = await store.append([ev("x", 1), ev("y", 2), ev("x", 3)])
    s = await store.create_subscription(sub("x"))
    assert s.cursor == 3
    await store.move_cursor(s.id, 1)
    assert (await store.list_subscriptions())[0].cursor == 1
    assert await store.count_events("x") == 2
    assert await store.count_events("x", upto=events[1].seq) == 1
    assert await store.count_events("nope") == 0


async def test_dead_letters_move_list_redrive_and_drop(store: Store) -> None:
    from tidings.store import DeadLetter

    events = await store.append([ev("a", 1), ev("a", 2), ev("a", 3)])
    s = await store.create_subscription(sub("a"))
    ids = await store.open_notifications(s.id, events, events[-1].seq)
    (first,) = await store.get_notifications(ids[:1])
    assert first.created_at > 0

    def letter(i: int, e: StoredEvent) -> DeadLetter:
        return DeadLetter(id=i, subscription_id=s.id, subscriber="alice", seq=e.seq, namespace=e.namespace,
                          event_id=e.id, attempts=5, reason="HTTP 500", dead_at=99)

    stats = [Stat("subscription", str(s.id), "dead", 2)]
    assert await store.dead_letter([letter(ids[0], events[0]), letter(ids[1], events[1])], stats) == ids[:2]
    assert await store.dead_letter([letter(ids[0], events[0])]) == []  # no longer pending
    assert [p.id for p in await store.pending(s.id)] == ids[2:]
    dead = await store.list_dead_letters()
    assert [d.id for d in dead] == ids[:2] and dead[0].reason == "HTTP 500" and dead[0].event_id == 1
    assert [d.id for d in await store.list_dead_letters([s.id], after=ids[0])] == ids[1:2]
    assert await store.list_dead_letters([s.id + 1]) == []
    assert (await store.stats("subscription", str(s.id)))["dead"] == 2

    (back,) = await store.redrive_dead_letters([ids[0], 12345], now=7)
    assert (back.id, back.seq, back.attempts, back.created_at) == (ids[0], events[0].seq, 0, 7)
    assert [p.id for p in await store.pending(s.id)] == [ids[0], ids[2]]
    assert await store.drop_dead_letters([ids[1], ids[1]]) == [ids[1]]
    assert await store.list_dead_letters() == []
    # A redriven notification keeps its id, and new ones still get fresh ids.
    (fresh,) = await store.open_notifications(s.id, events[:1], events[-1].seq)
    assert fresh > max(ids)


async def test_pending_counts(store: Store) -> None:
    events = await store.append([ev("a", 1), ev("a", 2)])
    s1 = await store.create_subscription(sub("a"))
    s2 = await store.create_subscription(sub("a"))
    assert await store.pending_counts() == {}
    await store.open_notifications(s1.id, events, events[-1].seq)
    (one,) = await store.open_notifications(s2.id, events[:1], events[-1].seq)
    assert await store.pending_counts() == {s1.id: 2, s2.id: 1}
    await store.settle_notifications([one])
    assert await store.pending_counts() == {s1.id: 2}


async def test_secrets_rotate_expire_and_go_with_their_subscription(store: Store) -> None:
    from tidings.store import SubscriptionSecret

    a = await store.create_subscription(sub("a"))
    b = await store.create_subscription(sub("b"))
    assert await store.secrets(a.id, now=0) == []
    assert not await store.add_secret(a.id + b.id + 1, "nope", None, created_at=1)  # no such subscription
    assert await store.add_secret(a.id, "s1", None, created_at=10)
    assert await store.add_secret(b.id, "b1", None, created_at=10)
    assert await store.secrets(a.id, now=11) == [SubscriptionSecret(secret="s1", created_at=10)]

    # Rotation: the new one first, the old one until it expires.
    assert await store.add_secret(a.id, "s2", 100, created_at=20)
    assert await store.secrets(a.id, now=21) == [
        SubscriptionSecret(secret="s2", created_at=20),
        SubscriptionSecret(secret="s1", created_at=10, expires_at=100),
    ]
    assert [s.secret for s in await store.secrets(a.id, now=99)] == ["s2", "s1"]
    assert [s.secret for s in await store.secrets(a.id, now=100)] == ["s2"]
    # A later rotation never extends an earlier expiry, only shortens; the same instant keeps order.
    assert await store.add_secret(a.id, "s3", 500, created_at=20)
    assert [(s.secret, s.expires_at) for s in await store.secrets(a.id, now=30)] == [
        ("s3", None), ("s2", 500), ("s1", 100)
    ]
    assert await store.add_secret(a.id, "s4", 40, created_at=30)
    assert [(s.secret, s.expires_at) for s in await store.secrets(a.id, now=35)] == [
        ("s4", None), ("s3", 40), ("s2", 40), ("s1", 40)
    ]
    assert [s.secret for s in await store.secrets(a.id, now=40)] == ["s4"]
    assert [s.secret for s in await store.secrets(b.id, now=35)] == ["b1"]  # untouched

    await store.delete_subscription(a.id)
    assert await store.secrets(a.id, now=35) == []
    await store.delete_publication("b")
    assert await store.secrets(b.id, now=35) == []


async def test_stat_keys(store: Store) -> None:
    await store.add_stats(
        [Stat("subscriber", "bob", "x"), Stat("subscriber", "al", "y"), Stat("publication", "n", "z")]
    )
    assert await store.stat_keys("subscriber") == ["al", "bob"]
    assert await store.stat_keys("nothing") == []


# -- the schema registry's tables --------------------------------------------------------


async def test_schemas_get_ids_never_reused_and_round_trip(store: Store) -> None:
    change = SchemaChange(schema_id=None, at=5, by="alice", action="register")
    a = await store.create_schema(
        SchemaRecord(format="JSON", model='{"type":"object"}', canonical="c1", created_at=5, created_by="alice"),
        [SchemaVersion(name="pay.transfer", version=1, schema_id=0, created_at=5)], change,
    )
    b = await store.create_schema(
        SchemaRecord(format="AVRO", model='"string"', canonical="c2", replaces=a.id), [],
        SchemaChange(schema_id=None, at=6, by="bob", action="register"),
    )
    assert (a.id, b.id) == (1, 2)
    b.deleted_at, b.state, b.retention_s = 9, "Retracted", 60
    await store.save_schema(b, [SchemaVersion(name="pay.transfer", version=2, schema_id=b.id, created_at=6)],
                            [SchemaChange(schema_id=b.id, at=9, by="root", action="delete", detail="x")])
    await store.put_schema_setting("limits", {"max_count": 3}, SchemaChange(schema_id=None, at=10, by="root",
                                                                             action="limits"))
    c = await store.create_schema(SchemaRecord(format="JSON", model="{}", canonical="c3"), [],
                                  SchemaChange(schema_id=None, at=11, by="c", action="register"))
    assert c.id == 3
    snap = await store.load_schemas()
    assert [(r.id, r.state, r.deleted_at, r.retention_s, r.replaces) for r in snap.schemas] == [
        (1, "Active", None, None, None), (2, "Retracted", 9, 60, 1), (3, "Active", None, None, None),
    ]
    assert [(v.name, v.version, v.schema_id) for v in snap.versions] == [("pay.transfer", 1, 1), ("pay.transfer", 2, 2)]
    assert snap.settings == {"limits": {"max_count": 3}}
    log = await store.schema_changes(None)
    assert [(x.seq, x.schema_id, x.by, x.action) for x in log] == [
        (1, 1, "alice", "register"), (2, 2, "bob", "register"), (3, 2, "root", "delete"),
        (4, None, "root", "limits"), (5, 3, "c", "register"),
    ]
    assert [x.seq for x in await store.schema_changes(2)] == [2, 3]
    assert [x.seq for x in await store.schema_changes(None, after=3, limit=1)] == [4]
    await store.put_schema_setting("limits", None, SchemaChange(schema_id=None, at=12, by="root", action="limits"))
    assert (await store.load_schemas()).settings == {}


async def test_imported_ids_soft_deletes_and_references_round_trip(store: Store) -> None:
    """What the Confluent face needs: an id given in IMPORT mode (later ids go on above
    it), soft-deleted versions, and references kept with the schema."""
    refs = [["customer.json", "customer-value", 1]]
    imported = await store.create_schema(
        SchemaRecord(id=500, format="JSON", model="{}", canonical="i", references=refs),
        [SchemaVersion(name="orders", version=7, schema_id=0, created_at=1)],
        SchemaChange(schema_id=None, at=1, by="root", action="register"))
    assert imported.id == 500
    after = await store.create_schema(SchemaRecord(format="JSON", model="{}", canonical="a"), [],
                                      SchemaChange(schema_id=None, at=2, by="root", action="register"))
    assert after.id == 501
    await store.save_schema(None, [SchemaVersion(name="orders", version=7, schema_id=500, created_at=1,
                                                 soft_deleted_at=3)], [])
    snap = await store.load_schemas()
    assert [(r.id, r.references) for r in snap.schemas] == [(500, refs), (501, [])]
    assert [(v.name, v.version, v.schema_id, v.soft_deleted_at, v.deleted_at) for v in snap.versions] == [
        ("orders", 7, 500, 3, None)]

async def test_trim_events_keeps_what_is_still_owed_and_the_chain(store: Store) -> None:
    await store.create_publication(PublicationRecord(namespace="a", owner="o"))
    old = await store.append([ev("a", 1), ev("a", 2), ev("b", 3), ev("a", 4)])  # timestamps 1001..1004
    sid = (await store.create_subscription(sub("a"))).id
    await store.open_notifications(sid, old[1:2], cursor=2)
    assert await store.trim_events("a", 1004) == 1  # event 2 is owed to the subscription; b is not "a"
    assert [e.seq for e in await store.read_after(0)] == [2, 3, 4]
    assert await store.read_seqs([1, 2]) == [old[1]]
    assert await store.count_events("a") == 2
    # The log's last event stays even when it is old, and ids go on from the chain's end.
    assert await store.trim_events("a", 10_000) == 0
    new = await store.append([ev("a", 5)])
    assert (new[0].seq, new[0].id, new[0].prev_id) == (5, 4, 3)
    assert await store.trim_events("a", 10_000) == 1
    assert [e.seq for e in await store.read_after(0)] == [2, 3, 5]


async def test_deliveries_record_each_outcome_with_what_it_settled(store: Store) -> None:
    from tidings.store import DeadLetter, DeliveryRecord

    published = await store.append([ev("a", 1), ev("a", 2), ev("a", 3)])
    s = await store.create_subscription(sub("a", subscriber="carol"))
    ids = await store.open_notifications(s.id, published, published[-1].seq)
    created = {p.id: p.created_at for p in await store.pending(s.id)}
    await store.count_attempt([ids[0], ids[0]])
    assert await store.deliveries() == []

    before = time.time_ns()
    assert await store.settle_notifications([ids[0], ids[0], 99_999]) == [ids[0]]
    assert await store.settle_notifications([ids[0]]) == []  # settled once, recorded once
    letter = DeadLetter(id=ids[1], subscription_id=s.id, subscriber="carol", seq=published[1].seq, namespace="a",
                        event_id=published[1].id, attempts=4, reason="HTTP 500", dead_at=before + 5)
    assert await store.dead_letter([letter, letter]) == [ids[1]]
    assert await store.drop_dead_letters([ids[1], 12_345]) == [ids[1]]
    after = time.time_ns()

    got = await store.deliveries()
    assert all(isinstance(r, DeliveryRecord) for r in got)
    assert [r.serial for r in got] == [1, 2, 3] and not any(r.replay for r in got)
    confirmed, dead, dropped = got
    e0, e1 = published[0], published[1]
    assert (confirmed.notification_id, confirmed.subscription_id, confirmed.subscriber, confirmed.namespace,
            confirmed.seq, confirmed.event_id, confirmed.source, confirmed.event_timestamp, confirmed.created_at,
            confirmed.attempts, confirmed.outcome) == (
        ids[0], s.id, "carol", "a", e0.seq, e0.id, "src", e0.timestamp, created[ids[0]], 3, "confirmed",
    )
    assert before <= confirmed.settled_at <= after
    assert (dead.notification_id, dead.event_id, dead.event_timestamp, dead.created_at, dead.settled_at,
            dead.attempts, dead.outcome) == (ids[1], e1.id, e1.timestamp, created[ids[1]], before + 5, 4, "dead")
    assert (dropped.notification_id, dropped.subscriber, dropped.source, dropped.created_at, dropped.attempts,
            dropped.outcome) == (ids[1], "carol", "src", None, 4, "dropped")
    assert before <= dropped.settled_at <= after
    # Paging, and the pending notification left has no record yet.
    assert [r.serial for r in await store.deliveries(after=1, limit=1)] == [2]
    assert [r.notification_id for r in await store.deliveries()] == [ids[0], ids[1], ids[1]]
    # Who each was issued to, once no longer pending: confirmed, dropped; not the pending one.
    assert await store.former_subscribers([ids[0], ids[1], ids[2], 99_999]) == {ids[0]: "carol", ids[1]: "carol"}


async def test_a_notification_is_counted_as_sent_once(store: Store) -> None:
    """``mark_sent`` and ``settle_notifications(sent_stats=...)`` count each notification
    once between them, whichever comes first."""
    published = await store.append([ev("a", 1), ev("a", 2), ev("a", 3)])
    s = await store.create_subscription(sub("a", subscriber="erin"))
    ids = await store.open_notifications(s.id, published, published[-1].seq)
    sent = {i: [Stat("subscription", str(s.id), "sent")] for i in ids}
    assert await store.mark_sent([ids[0], ids[0], 99_999], sent) == [ids[0]]
    assert await store.mark_sent([ids[0]], sent) == []
    assert await store.settle_notifications(ids[:2], None, sent) == ids[:2]  # ids[1] counted here
    assert await store.mark_sent(ids[:2], sent) == []  # settled: nothing left to count
    assert await store.mark_sent([ids[2]], sent) == [ids[2]]
    assert await store.settle_notifications([ids[2]], None, sent) == [ids[2]]
    assert (await store.stats("subscription", str(s.id)))["sent"] == 3


async def test_sqlite_store_of_an_earlier_version_gets_the_sent_column(tmp_path: Path) -> None:
    from tidings.store import SQLiteStore

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE notifications (id INTEGER PRIMARY KEY AUTOINCREMENT, subscription_id INTEGER NOT NULL, "
        "seq INTEGER NOT NULL, namespace TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
        "created_at INTEGER NOT NULL DEFAULT 0)"
    )
    conn.execute("INSERT INTO notifications(subscription_id, seq, namespace) VALUES (1, 1, 'a')")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    await store.open()
    try:
        # Counted as sent when it was recorded, by the earlier version: not again.
        assert await store.mark_sent([1]) == []
        published = await store.append([ev("a", 1)])
        s = await store.create_subscription(sub("a"))
        (nid,) = await store.open_notifications(s.id, published, published[-1].seq)
        assert await store.mark_sent([nid]) == [nid]
    finally:
        await store.close()


async def test_dead_letters_may_outlive_their_subscription(store: Store) -> None:
    from tidings.store import DeadLetter

    published = await store.append([ev("a", 1), ev("a", 2)])
    ended = await store.create_subscription(sub("a", subscriber="fay"))
    deleted = await store.create_subscription(sub("a", subscriber="fay"))
    live = await store.create_subscription(sub("a", subscriber="gus"))
    letters = []
    for s in (ended, deleted, live):
        (nid,) = await store.open_notifications(s.id, published[:1], published[0].seq)
        letters.append(DeadLetter(id=nid, subscription_id=s.id, subscriber=s.subscriber, seq=published[0].seq,
                                  namespace="a", event_id=published[0].id, attempts=1, reason="endpoint_gone",
                                  dead_at=1))
    await store.dead_letter(letters)
    await store.delete_subscription(ended.id, keep_dead_letters=True)
    await store.delete_subscription(deleted.id)
    assert [d.subscription_id for d in await store.list_dead_letters()] == [ended.id, live.id]
    assert [d.subscription_id for d in await store.list_dead_letters([live.id], ended_of="fay")] == [ended.id, live.id]
    assert [d.subscription_id for d in await store.list_dead_letters([], ended_of="gus")] == []
    assert [d.subscription_id for d in await store.list_dead_letters([live.id])] == [live.id]


async def test_former_subscribers_name_dead_letters_too(store: Store) -> None:
    from tidings.store import DeadLetter

    published = await store.append([ev("a", 1)])
    s = await store.create_subscription(sub("a", subscriber="dan"))
    (nid,) = await store.open_notifications(s.id, published, published[-1].seq)
    assert await store.former_subscribers([nid]) == {}
    letter = DeadLetter(id=nid, subscription_id=s.id, subscriber="dan", seq=published[0].seq, namespace="a",
                        event_id=published[0].id, attempts=1, reason="max_age", dead_at=1)
    assert await store.dead_letter([letter]) == [nid]
    assert await store.former_subscribers([nid, nid]) == {nid: "dan"}


async def test_deliveries_of_replayed_notifications_are_marked_and_keep_their_event(store: Store) -> None:
    from tidings.store._replays import ReplayRecord

    published = await store.append([ev("a", 1), ev("a", 2)])
    s = await store.create_subscription(sub("a"))
    assert await store.trim_events("a", 10_000) == 1  # the first event leaves the hot log
    replay = await store.create_replay(ReplayRecord(requester="alice", namespace="a", subscription_id=s.id,
                                                    from_id=1, to_id=3))
    assert await store.move_replay(replay.id, "running", from_states=["pending"], now=5) is not None
    ids = await store.record_replay_batch(replay.id, s.id, published, 2, now=5)
    assert ids is not None
    await store.settle_notifications(ids)
    records = await store.deliveries()
    assert [(r.notification_id, r.replay, r.event_id, r.source, r.event_timestamp) for r in records] == [
        (i, True, e.id, "src", e.timestamp) for i, e in zip(ids, published, strict=True)
    ]


async def test_event_timestamps_never_go_back_within_a_namespace(store: Store) -> None:
    """The later of an event's own stamp and its namespace's previous one (``core.clock``):
    a member whose clock stepped back, or a group commit of appends stamped out of order,
    never stores a namespace's timestamps backwards; another namespace keeps its own."""
    def at(ns: str, ts: int) -> NewEvent:
        return NewEvent(namespace=ns, source="src", timestamp=ts, data=b'{"Nat":0}')

    first = await store.append([at("a", 5_000), at("a", 4_000), at("b", 1_000)])
    assert [e.timestamp for e in first] == [5_000, 5_000, 1_000]
    both = await asyncio.gather(store.append([at("a", 3_000)]), store.append([at("a", 7_000), at("b", 2_000)]))
    later = await store.append([at("a", 6_000), at("b", 500)])
    assert [e.timestamp for e in later] == [7_000, 2_000]
    stored = await store.read_after(0)
    assert [e.timestamp for e in stored] == [e.timestamp for e in [*first, *both[0], *both[1], *later]]
    for ns in ("a", "b"):
        stamps = [e.timestamp for e in sorted(stored, key=lambda e: e.id) if e.namespace == ns]
        assert stamps == sorted(stamps)
