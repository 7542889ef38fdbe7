"""Idempotency keys live in their events' rows, on SQLite and on PostgreSQL. On SQLite they
are found through the writer's in-memory index (``store/_sqlite_keys``); on PostgreSQL
through a unique partial index, with spans for the reclaimer (``store/_pg_keyed_events``).
Against a model, through every path that can make what a store finds disagree with the
rows: keys whose hashes collide (SQLite's index is given a bad hash), the same key taken
again after its window, events deleted while their keys live (retention, and the
archive through its own connection), the reclaimer, and a restart (which rebuilds
SQLite's index from the rows)."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tidings.errors import KeyTaken
from tidings.store import NewEvent, PostgresStore, SQLiteStore, Store, _sqlite_keys

from .pg_support import fresh_schema

NS = "keys.idx"
_KEYS = ["a", "b", "c", "dd", "eee"]

_op = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(st.sampled_from([*_KEYS, None]), st.integers(1, 4)),
                                          min_size=1, max_size=3)),
    st.tuples(st.just("wait"), st.integers(1, 3)),
    st.tuples(st.just("expire"), st.just(0)),
    st.tuples(st.just("trim"), st.sampled_from(["retention", "archive"])),
    st.tuples(st.just("reopen"), st.just(0)),
)


async def _check(
    ops: list[tuple[str, Any]], make: Callable[[], Store], delete_behind: Callable[[], Awaitable[None]]
) -> None:
    """``make``: a store on the same database each time; ``delete_behind``: delete every
    event of the namespace but the log's last through a connection of its own."""
    store = make()
    await store.open()
    now = 1_000
    rows: dict[str, tuple[int, int, bytes]] = {}  # key -> (event id, expires, fingerprint): its row, live or not
    last_id = 0
    try:
        for what, arg in ops:
            if what == "append":
                events = [NewEvent(namespace=NS, source="alice", timestamp=now, data=b'{"Nat":%d}' % i,
                                   key=k, fingerprint=b"%d-%d" % (now, i), key_expires=now + w)
                          for i, (k, w) in enumerate(arg)]
                keys = [k for k, _ in arg if k is not None]
                refused = len(set(keys)) < len(keys) or any(k in rows and rows[k][1] > now for k in keys)
                if refused:
                    with pytest.raises(KeyTaken):
                        await store.append(events)
                else:
                    stored = await store.append(events)
                    assert [s.id for s in stored] == list(range(last_id + 1, last_id + 1 + len(events)))
                    last_id += len(events)
                    for e, s in zip(events, stored, strict=True):
                        if e.key is not None:
                            rows[e.key] = (s.id, e.key_expires, e.fingerprint)
            elif what == "wait":
                now += arg
            elif what == "expire":
                assert await store.expire_keys(now) == sum(1 for _, exp, _ in rows.values() if exp <= now)
                rows = {k: r for k, r in rows.items() if r[1] > now}
            elif what == "trim" and arg == "retention":
                await store.trim_events(NS, now + 1)
            elif what == "trim":  # the archive deletes through a connection of its own
                await delete_behind()
            else:
                await store.close()
                store = make()
                await store.open()
            held = await store.find_keys([(NS, k) for k in _KEYS], now)
            live = {k: r for k, r in rows.items() if r[1] > now}
            assert {k for (_, k) in held} == set(live)
            for (_, k), rec in held.items():
                assert (rec.event_id, rec.expires_at, rec.fingerprint) == live[k]
    finally:
        await store.close()


@pytest.mark.parametrize("bad_hash", [False, True], ids=["hash", "colliding"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, min_size=1, max_size=14))
# "a" and "c" share a hash when it is bad: "c" is spilled, then "a" is reclaimed, and "c"
# (still live) must not look free because its hash does.
@example(ops=[("append", [("a", 1)]), ("append", [("c", 4)]), ("wait", 2), ("expire", 0), ("append", [("c", 1)])])
# A key whose event retention deleted is taken again after its window: its kept row goes.
@example(ops=[("append", [("a", 1), ("b", 1)]), ("wait", 1), ("trim", "retention"), ("append", [("a", 1)]),
              ("expire", 0)])
# Kept keys share no location that another key's clearing could drop ("c" after "a").
@example(ops=[("append", [("a", 1), ("b", 1)]), ("trim", "retention"), ("reopen", 0), ("append", [("a", 1)]),
              ("append", [("c", 1)]), ("append", [("a", 1)])])
def test_the_key_index_answers_as_the_rows_do(ops: list[tuple[str, Any]], bad_hash: bool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if bad_hash:  # two hashes for five keys: every lookup meets another key's entry
        monkeypatch.setattr(_sqlite_keys, "_hash", lambda k: len(k[1]) % 2)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.db"

        async def delete_behind() -> None:
            conn = sqlite3.connect(path)
            with conn:
                conn.execute("DELETE FROM events WHERE namespace = ? AND seq < (SELECT MAX(seq) FROM events)", (NS,))
            conn.close()

        asyncio.run(_check(ops, lambda: SQLiteStore(path), delete_behind))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, min_size=1, max_size=14))
@example(ops=[("append", [("a", 1), ("b", 1)]), ("wait", 1), ("trim", "retention"), ("append", [("a", 1)]),
              ("expire", 0)])
@example(ops=[("append", [("a", 1), ("b", 4)]), ("trim", "archive"), ("wait", 2), ("append", [("a", 3)]),
              ("append", [("b", 1)]), ("wait", 3), ("expire", 0)])
# Past its window a key whose row the reclaimer has not cleared yet names a new event.
@example(ops=[("append", [("a", 1)]), ("wait", 2), ("append", [("a", 2), ("c", 1)]), ("expire", 0)])
# An append refused (its key twice) after giving up an expired key leaves it to the reclaimer.
@example(ops=[("append", [("a", 1)]), ("wait", 1), ("append", [("a", 1), ("a", 1)]), ("expire", 0)])
def test_postgresql_keys_in_their_rows_answer_as_the_rows_do(ops: list[tuple[str, Any]], pg_database: str) -> None:
    import asyncpg

    async def run() -> None:
        async with fresh_schema(pg_database) as schema:
            settings_ = {"search_path": schema}

            async def delete_behind() -> None:
                conn = await asyncpg.connect(pg_database, server_settings=settings_)
                try:
                    await conn.execute(
                        "DELETE FROM events WHERE namespace = $1 AND seq < (SELECT MAX(seq) FROM events)", NS)
                finally:
                    await conn.close()

            await _check(ops, lambda: PostgresStore(pg_database, server_settings=settings_), delete_behind)

    asyncio.run(run())


async def test_a_store_of_version_2_keeps_its_live_keys(tmp_path: Path) -> None:
    """Keys written before version 3 stay in ``publish_keys``; the index finds them there."""
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    await store.open()
    await store.append([NewEvent(namespace=NS, source="alice", timestamp=1_000, data=b'{"Nat":1}',
                                 key="old", fingerprint=b"fp", key_expires=5_000)])
    await store.close()
    conn = sqlite3.connect(path)
    with conn:  # as version 2 wrote it: the key in its own table, none in the row
        conn.execute("INSERT INTO publish_keys(namespace, key, fingerprint, source, event_id, expires_at) "
                     "VALUES (?, 'old', x'6670', 'alice', 1, 5000)", (NS,))
        conn.execute("UPDATE events SET idem_key = NULL, idem_fp = NULL, idem_expires = NULL")
    conn.close()
    store = SQLiteStore(path)
    await store.open()
    try:
        assert (await store.find_keys([(NS, "old")], 2_000))[(NS, "old")].event_id == 1
        with pytest.raises(KeyTaken):
            await store.append([NewEvent(namespace=NS, source="alice", timestamp=2_000, data=b'{"Nat":2}',
                                         key="old", fingerprint=b"fp", key_expires=6_000)])
        assert await store.expire_keys(5_000) == 1
        assert await store.find_keys([(NS, "old")], 0) == {}
    finally:
        await store.close()
