"""The database round trips a publish waits for on PostgreSQL (issue 47, point 5): one per
group commit, shared by the publishes that wait together, and nothing else.

Counted by the chaos suite's proxy between the store and the database: a round trip is a
chunk a client sends after its connection last carried an answer (``Proxy.turns``), so
pipelined statements count once. The counts are exact, not timed.
"""

from __future__ import annotations

import asyncio
import time

from bench.chaos._proxy import Proxy

from tidings.store import NewEvent, PostgresStore, Stat, StoredEvent
from tidings.store._pg_order import Sequencer

from .pg_support import fresh_schema


def _event(i: int) -> NewEvent:
    return NewEvent(namespace="n", source="s", timestamp=time.time_ns(), data=b"%d" % i)


def _stats() -> list[Stat]:
    # What a publish counts along with its events (``Broadcaster._append``).
    return [Stat("publication", "n", "icrc72:publication:stats:events", 1),
            Stat("publisher", "s", "icrc72:publisher:stats:events", 1)]


async def _store(pg_database: str, schema: str, proxy: Proxy, delay_s: float = 0.0, size: int = 2) -> PostgresStore:
    proxy.delay_s = delay_s
    via = pg_database.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    store = PostgresStore(via, server_settings={"search_path": schema}, min_size=size, max_size=size)
    await store.open()
    # Every pooled connection prepares the append once (round trips of its own): done here,
    # with two groups in flight at once, so both connections are used.
    for _ in range(4):
        await _one_then_seven(store)
    return store


async def _one_then_seven(store: PostgresStore) -> list[list[StoredEvent]]:
    """One append, then seven more before its answer came."""
    first = asyncio.create_task(store.append([_event(0)], _stats()))
    await asyncio.sleep(0.005)
    return [*await asyncio.gather(*(store.append([_event(i)], _stats()) for i in range(1, 8))), await first]


async def test_a_lone_publish_waits_for_one_round_trip(pg_database: str) -> None:
    """No round trip after the commit (asyncpg's reset of a released connection was one)."""
    proxy = await Proxy(5432).start()
    try:
        async with fresh_schema(pg_database) as schema:
            store = await _store(pg_database, schema, proxy)
            try:
                before = proxy.turns
                for i in range(10):
                    await store.append([_event(i)], _stats())
                assert proxy.turns - before == 10
            finally:
                await store.close()
    finally:
        await proxy.close()


async def test_concurrent_publishes_share_their_commits(pg_database: str) -> None:
    """Eight at once are one commit. One, then seven while its answer is on its way: the
    seven go in the next group, sent at once, not after that answer (two round trips in
    all, overlapping)."""
    proxy = await Proxy(5432).start()
    try:
        async with fresh_schema(pg_database) as schema:
            store = await _store(pg_database, schema, proxy, delay_s=0.02)
            try:
                before, proxy.most_waiting = proxy.turns, 0
                # Queued together, eight go in one group.
                await asyncio.gather(*(store.append([_event(i)], _stats()) for i in range(8)))
                assert proxy.turns - before == 1
                before, proxy.most_waiting = proxy.turns, 0
                answers = await _one_then_seven(store)  # the first's answer is 40 ms away
                assert proxy.turns - before == 2
                assert proxy.most_waiting == 2  # the second group was sent before the first's answer came
                seqs = [e.seq for a in answers for e in a]
                assert len(set(seqs)) == 8 and max(seqs) - min(seqs) == 7
            finally:
                await store.close()
    finally:
        await proxy.close()


async def test_a_slow_database_gets_more_groups_in_flight_a_quick_one_two(pg_database: str) -> None:
    """Appends arriving one by one, 3 ms apart, while each round trip takes 100 ms: once a
    group has been out 5 ms, one more may start, up to four at once, so an append
    waits for its own round trip and not for a slot first. The rule is the group's age:
    while no group has been out that long (here: a threshold no group reaches), two."""
    proxy = await Proxy(5432).start()
    try:
        async with fresh_schema(pg_database) as schema:
            store = await _store(pg_database, schema, proxy, delay_s=0.05, size=6)
            try:
                async def staggered() -> list[int]:
                    tasks = []
                    for i in range(7):
                        tasks.append(asyncio.create_task(store.append([_event(i)], _stats())))
                        await asyncio.sleep(0.003)
                    return [e.seq for t in tasks for e in await t]

                proxy.most_waiting = 0
                seqs = await staggered()
                assert proxy.most_waiting == 4  # PgEventStore._max_in_flight
                assert len(set(seqs)) == 7

                store._slow_s = 3600.0  # type: ignore[attr-defined]
                proxy.most_waiting = 0
                await staggered()
                assert proxy.most_waiting == 2
            finally:
                await store.close()
    finally:
        await proxy.close()


async def test_groups_in_flight_are_answered_in_the_order_they_were_sent(pg_database: str) -> None:
    """Pipelined groups still hand the broker their events in seq order."""
    proxy = await Proxy(5432).start()
    try:
        async with fresh_schema(pg_database) as schema:
            store = await _store(pg_database, schema, proxy, delay_s=0.005)
            try:
                heard: list[int] = []

                async def one(i: int) -> None:
                    (e,) = await store.append([_event(i)], _stats())
                    heard.append(e.seq)

                for _ in range(5):
                    await asyncio.gather(*(one(i) for i in range(12)))
                assert heard == sorted(heard)
            finally:
                await store.close()
    finally:
        await proxy.close()


def test_the_sequencer_answers_in_sending_order() -> None:
    order = Sequencer()
    got: list[str] = []
    a, b, c = order.start(), order.start(), order.start()
    order.finish(b, lambda: got.append("b"))
    order.finish(c, lambda: got.append("c"))
    assert got == []
    order.finish(a, lambda: got.append("a"))
    assert got == ["a", "b", "c"]
    d = order.start()
    order.finish(d, lambda: got.append("d"))
    assert got == ["a", "b", "c", "d"]
    order.start()
    f = order.start()
    order.finish(f, lambda: got.append("f"))
    assert got[-1] == "d"
    for settle in order.abandon():  # the appender stops: what finished is answered
        settle()
    assert got[-1] == "f"
