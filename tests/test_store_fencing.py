"""What keeps several broadcasters on one PostgreSQL safe from each other's slow failures
(docs/scaling.md, "Failure model"): leases with epochs that the store checks on every
write for leased work, writes that hold no lock across a round trip, relay tokens, and
which errors say "the database is unavailable"."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from tidings.broker.cluster import Membership
from tidings.errors import LeaseLost, StoreError, StoreUnavailable
from tidings.store import DeadLetter, Fence, NewEvent, PostgresStore, Stat, SubscriptionRecord
from tidings.store._pg_db import store_error

from .pg_support import two_members


def ev(ns: str, n: int) -> NewEvent:
    return NewEvent(namespace=ns, source="src", timestamp=n, data=b'{"Nat":%d}' % n)


@pytest.fixture
async def two(pg_database: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore, str]]:
    """Two stores on one schema: two broadcasters."""
    async with two_members(pg_database) as members:
        yield members


async def test_a_lease_passing_to_another_owner_takes_a_higher_epoch_and_a_renewal_keeps_it(
    two: tuple[PostgresStore, PostgresStore, str],
) -> None:
    a, b, _ = two
    first = await a.claim_leases("a", ["sub:1", "sub:2"], 0.3)
    assert set(first) == {"sub:1", "sub:2"}
    assert await b.claim_leases("b", ["sub:1"], 5) == {}  # held by a
    renewed = await a.claim_leases("a", ["sub:1", "sub:2"], 0.3)
    assert renewed == first
    await asyncio.sleep(0.4)  # lapsed
    taken = await b.claim_leases("b", ["sub:1"], 5)
    assert taken["sub:1"] > first["sub:1"]
    assert {r.key: r.epoch for r in await a.leases("sub:")}["sub:1"] == taken["sub:1"]
    # Released and taken back by the first owner: a new epoch again.
    await b.release_leases("b", ["sub:1"])
    back = await a.claim_leases("a", ["sub:1"], 5)
    assert back["sub:1"] > taken["sub:1"]


async def test_every_write_under_a_lost_lease_is_refused_and_changes_nothing(
    two: tuple[PostgresStore, PostgresStore, str],
) -> None:
    """The stale holder's writes of every kind are refused with LeaseLost, the new
    holder's go through, and nothing the stale one tried is in the store."""
    a, b, _ = two
    sub = await a.create_subscription(SubscriptionRecord(id=0, subscriber="s", namespace="n", endpoint=None))
    key = f"sub:{sub.id}"
    old = Fence(key, "a", (await a.claim_leases("a", [key], 0.2))[key])
    stored = await a.append([ev("n", i) for i in range(6)])
    pending = await a.open_notifications(sub.id, stored[:2], stored[1].seq, fence=old)  # while it holds it
    await asyncio.sleep(0.3)
    new = Fence(key, "b", (await b.claim_leases("b", [key], 5))[key])

    stat = [Stat("publication", "n", "x", 1)]
    writes: list[Callable[[], Awaitable[Any]]] = [
        lambda: a.open_notifications(sub.id, stored[2:3], stored[2].seq, stat, fence=old),
        lambda: a.record_confirmed(sub.id, "s", [(900, stored[3])], stored[3].seq, stat, created_at=1, now=2,
                                   fence=old),
        lambda: a.settle_notifications(pending, {i: stat for i in pending}, fence=old),
        lambda: a.mark_sent(pending, {i: stat for i in pending}, fence=old),
        lambda: a.count_attempt(pending, stat, fence=old),
        lambda: a.dead_letter([DeadLetter(id=pending[0], subscription_id=sub.id, subscriber="s", seq=stored[0].seq,
                                          namespace="n", event_id=1, attempts=1, reason="r", dead_at=3)], stat,
                              fence=old),
        lambda: a.move_cursor(sub.id, stored[-1].seq, fence=old),
    ]
    for write in writes:
        with pytest.raises(LeaseLost, match="no longer held"):
            await write()
    assert [p.id for p in await a.pending(sub.id)] == pending
    assert [p.attempts for p in await a.pending(sub.id)] == [0, 0]
    assert await a.deliveries() == []
    assert await a.list_dead_letters() == []
    assert await a.stats("publication", "n") == {}
    (kept,) = await a.list_subscriptions("n")
    assert kept.cursor == stored[1].seq

    # The new holder's writes go through.
    assert await b.settle_notifications(pending, fence=new) == pending
    await b.move_cursor(sub.id, stored[-1].seq, fence=new)
    (moved,) = await b.list_subscriptions("n")
    assert moved.cursor == stored[-1].seq


_STALLER = textwrap.dedent("""
    import asyncio, sys
    from tidings.store import NewEvent, PostgresStore

    async def main():
        s = PostgresStore(sys.argv[1], server_settings={"search_path": sys.argv[2],
                                                        "application_name": "staller"})
        await s.open()
        print("ready", flush=True)
        n = 0
        while True:
            n += 1
            await s.append([NewEvent(namespace=f"n{n % 3}", source="x", timestamp=n, data=b'{"Nat":1}')] * 20)
            await s.heartbeat("staller", "", forget_after_s=30)
            await s.claim_leases("staller", [f"sub:{n % 5}"], 30)
            await s.take_notification_ids(10)

    asyncio.run(main())
""")


async def test_a_process_stopped_while_its_session_holds_locks_holds_nobody(
    two: tuple[PostgresStore, PostgresStore, str], pg_database: str,
) -> None:
    """A process appending, beating and claiming in a loop is stopped (SIGSTOP) at the
    moment its database session holds row or transaction locks, over and over: each time,
    another process's append, heartbeat, claim and id block go through at once. With a
    client transaction around the append, the stopped one would hold ``log_head`` for
    as long as it is stopped."""
    _, b, schema = two
    proc = subprocess.Popen([sys.executable, "-c", _STALLER, pg_database, schema], stdout=subprocess.PIPE)
    watcher = await asyncpg.connect(pg_database)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        aimed = 0
        for _ in range(6):
            end = time.monotonic() + 3
            while time.monotonic() < end:
                if await watcher.fetchval(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE a.application_name = 'staller' AND l.granted AND l.locktype IN ('tuple', 'transactionid')"
                ):
                    aimed += 1
                    break
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                await asyncio.wait_for(b.append([ev("n0", 1), ev("n1", 2), ev("n2", 3)]), 5)
                await asyncio.wait_for(b.heartbeat("b", "", forget_after_s=30), 5)
                await asyncio.wait_for(b.claim_leases("b", ["sub:9"], 30), 5)
                await asyncio.wait_for(b.take_notification_ids(5), 5)
                took = time.monotonic() - started
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            assert took < 1.0, f"the others waited {took:.2f} s for a stopped process"
            await asyncio.sleep(0.2)
        assert aimed >= 1, "the stop never landed while the process held a lock"
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        await watcher.close()


async def test_a_forwarded_publish_is_stored_once_whoever_decides(
    two: tuple[PostgresStore, PostgresStore, str],
) -> None:
    """The owner stores a relay with its token; the sender, having no answer, withdraws
    the token: it learns the ids if the owner stored them, and otherwise the owner can no
    longer store them."""
    owner, sender, _ = two
    stored = await owner.append_relayed([ev("n", 1), ev("n", 2)], [], "t1")
    back = await sender.withdraw_relay("t1")
    assert back is not None and [(e.seq, e.id) for e in back] == [(e.seq, e.id) for e in stored]

    assert await sender.withdraw_relay("t2") is None  # not stored: withdrawn
    head = await owner.head()
    with pytest.raises(StoreError):
        await owner.append_relayed([ev("n", 3)], [], "t2")
    assert await owner.head() == head
    # In a group of appends, the withdrawn one fails alone.
    results = await asyncio.gather(
        owner.append_relayed([ev("n", 4)], [], "t2"), owner.append([ev("n", 5)]),
        owner.append_relayed([ev("m", 6)], [], "t3"),
        return_exceptions=True,
    )
    assert isinstance(results[0], StoreError)
    assert isinstance(results[1], list) and isinstance(results[2], list)
    assert await sender.withdraw_relay("t3") == results[2]


def test_what_says_the_database_is_unavailable() -> None:
    """Driver failures and the server's "cannot serve now" classes are StoreUnavailable
    (a 503 with Retry-After); a fence refusal is LeaseLost; anything else a StoreError."""
    class Pg(Exception):
        def __init__(self, sqlstate: str) -> None:
            super().__init__(sqlstate)
            self.sqlstate = sqlstate

    for e in (ConnectionResetError(), TimeoutError(), asyncpg.exceptions.InternalClientError("state"),
              asyncpg.exceptions.ConnectionDoesNotExistError("gone"), Pg("57P01"), Pg("57P03"), Pg("08006"),
              Pg("53300"), Pg("25006")):
        assert isinstance(store_error(e, "x"), StoreUnavailable), e
    assert isinstance(store_error(Pg("TDF01"), "x"), LeaseLost)
    refused = store_error(Pg("23505"), "x")
    assert type(refused) is StoreError


def test_a_lease_is_acted_on_only_while_this_process_s_clock_says_it_is_surely_held() -> None:
    now = [100.0]
    m = Membership("a", "", shared=True, monotonic=lambda: now[0])
    m.held = {1}
    m.epochs = {1: 7}
    m.valid_until = 104.5  # asked at 100.0 for 5 s, less a 0.5 s margin
    assert m.may_act(1) and not m.may_act(2)
    assert m.fence(1) == Fence("sub:1", "a", 7)
    now[0] = 104.4
    assert m.may_act(1)
    now[0] = 104.5  # however long this process was stopped, it looks at its clock first
    assert not m.may_act(1)
    m.lost(1)
    assert 1 not in m.held and m.reassess.is_set()
    alone = Membership.alone("a")
    assert alone.may_act(1) and alone.fence(1) is None
