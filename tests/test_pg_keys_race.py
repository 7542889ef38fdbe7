"""PostgreSQL keeps each idempotency key in its event's row, unique per namespace through a
partial index (``store/_pg_keyed_events``). Two members race for keys there: these tests
aim the race at the two places the rule could break: two appends of one key at once, and
an append of a live key while another connection deletes the event holding it (the
archive, retention), whose transaction the test holds open across the append."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tidings.errors import KeyTaken
from tidings.store import NewEvent, PostgresStore

from .pg_support import two_members

NS = "keys.race"


def _event(key: str | None, n: int, *, at: int = 1_000, expires: int = 10**12) -> NewEvent:
    return NewEvent(namespace=NS, source="alice", timestamp=at, data=b'{"Nat":%d}' % n, key=key,
                    fingerprint=b"f%d" % n, key_expires=expires)


@pytest.fixture
async def members(pg_database: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore, str]]:
    async with two_members(pg_database) as both:
        yield both


async def _sql(pg_database: str, schema: str, query: str, *args: object) -> object:
    """``query``'s first value, on a connection of its own (as another process would)."""
    c = await asyncpg.connect(pg_database, server_settings={"search_path": schema})
    try:
        return await c.fetchval(query, *args)
    finally:
        await c.close()


async def _rows_of(pg_database: str, schema: str, key: str) -> object:
    return await _sql(pg_database, schema, "SELECT count(*) FROM events WHERE namespace = $1 AND idem_key = $2",
                      NS, key)


async def test_two_members_appending_the_same_keys_at_once_store_each_once(
    members: tuple[PostgresStore, PostgresStore, str], pg_database: str
) -> None:
    a, b, schema = members
    for i in range(40):
        key = f"k{i}"
        got = await asyncio.gather(a.append([_event(key, 2 * i)]), b.append([_event(key, 2 * i + 1)]),
                                   return_exceptions=True)
        stored = [g for g in got if isinstance(g, list)]
        assert len(stored) == 1, got
        assert all(isinstance(g, KeyTaken) for g in got if not isinstance(g, list)), got
        for m in (a, b):
            held = (await m.find_keys([(NS, key)], 0))[(NS, key)]
            assert held.event_id == stored[0][0].id
        assert await _rows_of(pg_database, schema, key) == 1
    assert await a.head() == 40


async def test_a_live_key_whose_event_is_being_deleted_is_still_taken(
    members: tuple[PostgresStore, PostgresStore, str], pg_database: str
) -> None:
    """The delete holds its transaction open while the other member appends the key: the
    append waits on the index for it, and once it commits must find the key moved to
    ``publish_keys`` (live), not store it a second time."""
    a, b, schema = members
    deleter = await asyncpg.connect(pg_database, server_settings={"search_path": schema})
    try:
        for i in range(6):
            key = f"d{i}"
            (first, _) = await a.append([_event(key, 10 * i), _event(None, 10 * i + 1)])
            tx = deleter.transaction()
            await tx.start()
            await deleter.execute("DELETE FROM events WHERE seq = $1", first.seq)
            appending = asyncio.ensure_future(b.append([_event(key, 10 * i + 2)]))
            await asyncio.sleep(0.3)
            assert not appending.done(), "the append should wait for the delete's commit"
            await tx.commit()
            with pytest.raises(KeyTaken):
                await appending
            held = (await b.find_keys([(NS, key)], 0))[(NS, key)]
            assert (held.event_id, held.fingerprint) == (first.id, b"f%d" % (10 * i))
            assert await _rows_of(pg_database, schema, key) == 0
    finally:
        await deleter.close()


async def test_a_key_past_its_window_is_taken_again_though_its_row_still_holds_it(
    members: tuple[PostgresStore, PostgresStore, str], pg_database: str
) -> None:
    """The reclaimer has not cleared the expired key yet: the append clears it and stores."""
    a, b, schema = members
    (old,) = await a.append([_event("w", 1, at=1_000, expires=2_000)])
    (new,) = await b.append([_event("w", 2, at=3_000, expires=9_000)])
    assert new.id == old.id + 1 and await _rows_of(pg_database, schema, "w") == 1
    assert (await a.find_keys([(NS, "w")], 3_000))[(NS, "w")].event_id == new.id
    # The old row's span has nothing left to clear; the new key expires at 9,000.
    assert await a.expire_keys(5_000) == 0
    assert await a.expire_keys(9_000) == 1
    assert await _rows_of(pg_database, schema, "w") == 0


async def test_keys_written_by_schema_version_7_stay_live_after_the_upgrade(
    members: tuple[PostgresStore, PostgresStore, str], pg_database: str
) -> None:
    """Version 7 kept keys in ``publish_keys``: they are found, refuse their key, and expire."""
    a, _, schema = members
    (e,) = await a.append([_event(None, 1)])
    await _sql(pg_database, schema, "INSERT INTO publish_keys(namespace, key, fingerprint, source, event_id, "
               "expires_at) VALUES ($1, 'v7', 'fp'::bytea, 'alice', $2, 5000)", NS, e.id)
    assert (await a.find_keys([(NS, "v7")], 2_000))[(NS, "v7")].event_id == e.id
    with pytest.raises(KeyTaken):
        await a.append([_event("v7", 2, at=2_000)])
    assert await a.expire_keys(5_000) == 1
    assert await a.find_keys([(NS, "v7")], 0) == {}
    (again,) = await a.append([_event("v7", 3, at=6_000)])
    assert (await a.find_keys([(NS, "v7")], 6_000))[(NS, "v7")].event_id == again.id


async def test_a_member_stopped_after_taking_back_an_expired_key_holds_nothing(
    members: tuple[PostgresStore, PostgresStore, str], pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taking back an expired key is one statement, like every append: a member stopped
    (SIGSTOP, a lost network) right after it was answered holds no transaction open, where
    one around it would hold ``log_head`` and stop every member's appends."""
    a, b, schema = members
    await a.append([_event("x", 1, at=1_000, expires=2_000)])
    paused, resume = asyncio.Event(), asyncio.Event()
    fetch = asyncpg.connection.Connection.fetch

    async def stopping_after(self: asyncpg.Connection, query: str, *args: object, **kw: object) -> object:
        rows = await fetch(self, query, *args, **kw)
        if "tidings_append" in query and not paused.is_set():  # the append that took the key back
            paused.set()
            await resume.wait()
        return rows

    monkeypatch.setattr(asyncpg.connection.Connection, "fetch", stopping_after)
    taking = asyncio.ensure_future(a.append([_event("x", 2, at=3_000, expires=9_000)]))
    try:
        await asyncio.wait_for(paused.wait(), 10)
        monkeypatch.setattr(asyncpg.connection.Connection, "fetch", fetch)  # the others run as usual
        open_tx = await _sql(pg_database, schema, "SELECT count(*) FROM pg_stat_activity "
                             "WHERE datname = current_database() AND state LIKE 'idle in transaction%'")
        assert open_tx == 0
        (other,) = await asyncio.wait_for(b.append([_event(None, 3, at=3_000)]), 10)  # no wait on log_head
    finally:
        resume.set()
    (taken,) = await taking
    assert {taken.id, other.id} == {2, 3}
