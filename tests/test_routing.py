"""Routing at append: a caught-up subscription's notifications are opened in the commit
of their events, and every event still reaches every subscription exactly once.

The broker runs in this process on the real SQLite store (the store that routes); the
subscribers are real HTTP endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tidings.broker import Broker
from tidings.broker.delivery import RoutedTo
from tidings.core import config as cfg
from tidings.core.wire import Event, PublicationRegistration, SubscriptionRegistration, SubscriptionUpdate
from tidings.settings import Settings
from tidings.store import PrincipalRecord, SQLiteStore

from .conftest import eventually, read_body, respond

ADMIN = PrincipalRecord(name="admin", admin=True)


class Recorder:
    """Records every notification pushed, per path, and answers 200 (trusted: confirmed)."""

    def __init__(self) -> None:
        self.got: dict[str, list[tuple[str, int]]] = {}
        self.hold = asyncio.Event()
        """Cleared: answers wait until it is set again."""
        self.hold.set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        for n in json.loads(await read_body(receive)):
            self.got.setdefault(scope["path"], []).append((n["namespace"], n["eventId"]))
        if scope["path"].startswith("/slow"):
            await asyncio.sleep(0.02)  # falls behind: the router must leave it to its worker
        await self.hold.wait()
        await respond(send)

    def count(self) -> int:
        return sum(map(len, self.got.values()))


@pytest.fixture(params=[False, True], ids=["record-first", "push-first"])
async def broker(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Broker]:
    """Both ways a live batch is delivered: recorded as pending first, or pushed first
    (``push_before_record``, a trusted subscription's default: tidings.broker.delivery._direct)."""
    b = Broker(Settings(data_dir=tmp_path, push_before_record=request.param), SQLiteStore(tmp_path / "tidings.db"))
    async with b:
        yield b


@pytest.fixture
async def recording(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker that records every live batch as pending before pushing it."""
    b = Broker(Settings(data_dir=tmp_path, push_before_record=False), SQLiteStore(tmp_path / "tidings.db"))
    async with b:
        yield b


def _event(ns: str, n: int) -> Event:
    return Event(namespace=ns, data={"Map": [["n", {"Nat": n}], ["even", {"Bool": n % 2 == 0}]]})


async def _one_subscription(broker: Broker, namespace: str, endpoint: str) -> int:
    orch = broker.orchestrator
    await orch.register_publications(ADMIN, [PublicationRegistration(namespace=namespace)])
    (r,) = await orch.register_subscriptions(ADMIN, [SubscriptionRegistration(namespace=namespace, endpoint=endpoint)])
    return int(r.Ok)


def _pending_seqs(db: Path, sub_id: int) -> list[int]:
    """What is pending for the subscription, read straight from the file (no await)."""
    with contextlib.closing(sqlite3.connect(db)) as c:
        return [r[0] for r in c.execute("SELECT seq FROM notifications WHERE subscription_id = ?", (sub_id,))]


async def test_a_caught_up_subscriptions_notification_is_stored_with_its_event(
    recording: Broker, endpoints: Any, tmp_path: Path
) -> None:
    broker = recording
    rec = Recorder()
    sub_id = await _one_subscription(broker, "r.one", (await endpoints(rec)).url)

    # The first event of a namespace since start is opened by the worker (the router has
    # not seen the namespace yet); once it is delivered, the subscription is caught up.
    await broker.broadcaster.publish(ADMIN, [_event("r.one", 1)])
    await eventually(lambda: rec.count() == 1 and not _pending_seqs(tmp_path / "tidings.db", sub_id))

    rec.hold.clear()  # the push of event 2 is not answered yet: it stays pending
    try:
        (out,) = await broker.broadcaster.publish(ADMIN, [_event("r.one", 2)])
        assert out is not None and out.Ok == [2]
        # No await since publish returned, so the worker cannot have recorded it on its
        # own: it is durable already because it was committed together with the event.
        stored = broker.tail.read_after(0, ["r.one"], 10)
        assert stored is not None
        assert _pending_seqs(tmp_path / "tidings.db", sub_id) == [stored[-1].seq]
    finally:
        rec.hold.set()

    await eventually(lambda: rec.count() == 2 and not _pending_seqs(tmp_path / "tidings.db", sub_id))
    assert rec.got["/"] == [("r.one", 1), ("r.one", 2)]


async def test_every_event_reaches_every_subscription_once_under_concurrent_publishes(
    broker: Broker, endpoints: Any, tmp_path: Path
) -> None:
    """Routed and unrouted paths side by side: exact, slow (behind), pattern, filtered, and
    a subscription stopped and started while eight publishers write to three namespaces."""
    rec = Recorder()
    ep = await endpoints(rec)
    orch = broker.orchestrator
    names = ["c.a", "c.b", "c.c"]
    await orch.register_publications(ADMIN, [PublicationRegistration(namespace=ns) for ns in names])
    regs = [
        SubscriptionRegistration(namespace="c.a", endpoint=ep.url + "a"),
        SubscriptionRegistration(namespace="c.a", endpoint=ep.url + "slow"),
        SubscriptionRegistration(namespace="c.b", endpoint=ep.url + "b"),
        SubscriptionRegistration(namespace="c.*", endpoint=ep.url + "all"),
        SubscriptionRegistration(namespace="c.c", endpoint=ep.url + "even", filter="even == true"),
        SubscriptionRegistration(namespace="c.c", endpoint=ep.url + "toggled"),
    ]
    ids = [int(r.Ok) for r in await orch.register_subscriptions(ADMIN, regs)]
    toggled = ids[-1]

    rng = random.Random(7)
    sent: list[tuple[str, int]] = []  # (namespace, n) in no particular order
    counter = iter(range(1, 1_000_000))

    async def publisher() -> None:
        for _ in range(25):
            batch = [_event(rng.choice(names), next(counter)) for _ in range(rng.randint(1, 12))]
            results = await broker.broadcaster.publish(ADMIN, batch)
            assert all(r is not None and r.Ok for r in results)
            sent.extend((e.namespace, e.data["Map"][0][1]["Nat"]) for e in batch)
            await asyncio.sleep(rng.random() * 0.003)

    async def toggler() -> None:
        for i in range(10):
            await asyncio.sleep(0.01)
            await orch.update_subscriptions(ADMIN, [SubscriptionUpdate(
                id=toggled, config=[("icrc72:subscription:stopped", {"Bool": i % 2 == 0})]
            )])
        await orch.update_subscriptions(ADMIN, [SubscriptionUpdate(
            id=toggled, config=[("icrc72:subscription:stopped", {"Bool": False})]
        )])

    await asyncio.gather(*(publisher() for _ in range(8)), toggler())
    per_ns = Counter(ns for ns, _ in sent)
    evens = sum(1 for ns, n in sent if ns == "c.c" and n % 2 == 0)
    want = {"/a": per_ns["c.a"], "/slow": per_ns["c.a"], "/b": per_ns["c.b"], "/all": len(sent), "/even": evens}
    db = tmp_path / "tidings.db"
    await eventually(
        lambda: all(len(rec.got.get(p, [])) >= n for p, n in want.items())
        and not any(_pending_seqs(db, i) for i in ids),
        timeout=30,
    )
    await asyncio.sleep(0.2)  # anything extra would show now
    for path, n in want.items():
        got = rec.got[path]
        assert len(got) == n, path
        assert len(set(got)) == n, f"{path}: a notification came twice"
        for ns in names:  # in order within each namespace
            seen = [eid for g_ns, eid in got if g_ns == ns]
            assert seen == sorted(seen), path
    assert set(rec.got["/all"]) == {(ns, eid) for ns in names for eid in range(1, per_ns[ns] + 1)}
    toggled_got = rec.got.get("/toggled", [])
    assert len(set(toggled_got)) == len(toggled_got), "the toggled subscription got a notification twice"


async def test_a_publish_never_visits_stopped_subscriptions(broker: Broker, endpoints: Any) -> None:
    """Thousands of stopped subscriptions on a namespace must cost a publish nothing: only
    running ones are among those a publish wakes (and the router considers)."""
    ep = await endpoints(Recorder())
    orch = broker.orchestrator
    await orch.register_publications(ADMIN, [PublicationRegistration(namespace="s.x")])
    regs = [SubscriptionRegistration(namespace="s.x", endpoint=ep.url, stopped=i > 0) for i in range(50)]
    ids = [int(r.Ok) for r in await orch.register_subscriptions(ADMIN, regs)]

    def wakeable() -> set[int]:
        return {w.sub.id for w in broker.delivery.wakeable("s.x")}

    await eventually(lambda: wakeable() == {ids[0]})
    await orch.set_stopped(ADMIN, ids[1:3], False)
    assert wakeable() == set(ids[:3])
    await orch.set_stopped(ADMIN, ids[:1], True)
    assert wakeable() == set(ids[1:3])
    await orch.delete_subscriptions(ADMIN, [ids[1]])
    await eventually(lambda: wakeable() == {ids[2]})


async def test_a_stopped_subscription_holds_no_task_and_starts_where_it_should(
    broker: Broker, endpoints: Any
) -> None:
    """A stopped subscription keeps its worker's state but no running task (10,000 of them:
    ``python -m bench --only memory``). Started, it gets a task again and what is published
    from then on, not what came while it was stopped; deleted while stopped, it is gone."""
    rec = Recorder()
    ep = await endpoints(rec)
    orch = broker.orchestrator
    await orch.register_publications(ADMIN, [PublicationRegistration(namespace="d.x")])
    regs = [SubscriptionRegistration(namespace="d.x", endpoint=f"{ep.url}s{i}", stopped=i > 0) for i in range(20)]
    ids = [int(r.Ok) for r in await orch.register_subscriptions(ADMIN, regs)]

    def running() -> set[int]:
        return set(broker.delivery._tasks) & set(ids)

    await eventually(lambda: running() == {ids[0]})
    assert set(ids) <= set(broker.delivery._workers)
    await broker.broadcaster.publish(ADMIN, [_event("d.x", 1)])
    await eventually(lambda: rec.got.get("/s0") == [("d.x", 1)])

    await orch.set_stopped(ADMIN, ids[1:2], False)
    assert ids[1] in running()
    await broker.broadcaster.publish(ADMIN, [_event("d.x", 2)])
    await eventually(lambda: rec.got.get("/s1") == [("d.x", 2)])

    await orch.set_stopped(ADMIN, ids[1:2], True)
    await eventually(lambda: ids[1] not in running())
    await broker.broadcaster.publish(ADMIN, [_event("d.x", 3)])  # while stopped: not sent
    await orch.set_stopped(ADMIN, ids[1:2], False)
    await broker.broadcaster.publish(ADMIN, [_event("d.x", 4)])
    await eventually(lambda: rec.got.get("/s1") == [("d.x", 2), ("d.x", 4)])
    await eventually(lambda: rec.got.get("/s0") == [("d.x", 1), ("d.x", 2), ("d.x", 3), ("d.x", 4)])
    assert all(f"/s{i}" not in rec.got for i in range(2, 20))

    await orch.delete_subscriptions(ADMIN, [ids[5]])
    assert ids[5] not in broker.delivery._workers


async def test_a_start_between_the_end_of_a_stopped_run_and_its_callback_keeps_the_new_run(
    broker: Broker, endpoints: Any
) -> None:
    """A stopped worker's run ends, and its task's done callback runs one loop step
    later. A start in between spawns the next run; the old run's callback must leave that
    run the subscription's worker, or the worker is forgotten: publishes no longer wake
    it and routing no longer reaches it, so its notifications stay pending (the toggled
    subscription of the concurrent test above, now and then)."""
    rec = Recorder()
    sub_id = await _one_subscription(broker, "t.x", (await endpoints(rec)).url)
    d, orch = broker.delivery, broker.orchestrator
    for n in range(1, 4):
        await orch.set_stopped(ADMIN, [sub_id], True)
        w = d._workers[sub_id]
        while not w.dormant:  # one step at a time: stop polling in the very step it ends
            await asyncio.sleep(0)
        old = d._tasks[sub_id]
        assert old.done()
        # What ``set_stopped(False)`` does once its write is stored, without the await.
        orch.registry.sub_configs[sub_id] = cfg.SubscriptionConfig()
        d.subscription_changed(orch.subscriptions[sub_id], started=True)
        await asyncio.sleep(0.01)  # the old run's callback has run by now
        assert d.delivers(sub_id) and d._tasks.get(sub_id) not in (None, old)
        assert {x.sub.id for x in d.wakeable("t.x")} == {sub_id}
        await orch.set_stopped(ADMIN, [sub_id], False)  # the store agrees again
        await broker.broadcaster.publish(ADMIN, [_event("t.x", n)])
        await eventually(lambda n=n: rec.count() == n)
    assert [eid for _, eid in rec.got["/"]] == [1, 2, 3]
    assert d.workers_running == 1


async def test_a_route_planned_before_a_worker_restarted_does_not_move_it_past_unread_events(
    broker: Broker, endpoints: Any
) -> None:
    """A worker that restarts after a failure goes back to its stored cursor, to read again
    what it had read but not recorded. A route planned before that restart still hands
    over its notifications, but must not move the worker past those events."""
    rec = Recorder()
    sub_id = await _one_subscription(broker, "g.x", (await endpoints(rec)).url)
    w = broker.delivery._workers[sub_id]
    await broker.broadcaster.publish(ADMIN, [_event("g.x", 1)])
    await eventually(lambda: rec.count() == 1)
    (event,) = broker.tail.read_after(0, ["g.x"], 10) or []
    scan = w.scan

    stale = RoutedTo(subscription_id=sub_id, events=[event], cursor=scan + 1_000, stats=[], ids=[10_001],
                     generation=w.generation - 1)
    broker.delivery.routed([stale])
    assert w.scan == scan
    await eventually(lambda: rec.count() == 2)  # its notification is still pushed

    current = RoutedTo(subscription_id=sub_id, events=[event], cursor=scan + 1_000, stats=[], ids=[10_002],
                       generation=w.generation)
    broker.delivery.routed([current])
    assert w.scan == scan + 1_000


async def test_a_worker_whose_own_open_is_in_the_store_is_routed_again(recording: Broker, endpoints: Any) -> None:
    """A worker that fell behind reads the log itself; once the store has its open of
    everything so far (committed, or in the very transaction of the next append) while it
    waits for it, the next events are routed at append again, rather than the worker
    staying one commit behind for as long as events keep coming. An open that is not the
    one this worker (this generation) awaits never counts."""
    broker = recording
    rec = Recorder()
    sub_id = await _one_subscription(broker, "o.x", (await endpoints(rec)).url)
    await broker.broadcaster.publish(ADMIN, [_event("o.x", 1), _event("o.x", 2)])
    await eventually(lambda: rec.count() == 2)
    router = broker.delivery._router
    assert router is not None
    w = broker.delivery._workers[sub_id]
    old = broker.tail.read_after(0, ["o.x"], 10) or []
    last = old[-1]
    new = msgspec.structs.replace(last, seq=last.seq + 1, id=last.id + 1, prev_id=last.id)
    # The worker is behind: it has not yet taken in what it opened (its scan is older).
    router.forget(sub_id)
    w.scan = last.seq - 1

    def routed(opened: dict[int, int]) -> bool:
        return any(r.subscription_id == sub_id and r.events for r in router.plan([new], opened))

    assert not routed({})
    w.opening = (last.seq, w.generation)
    assert not routed({})  # awaited, but the store does not have it yet
    assert routed({sub_id: last.seq})
    assert not routed({sub_id: last.seq - 1})  # an older open of the subscription
    w.opening = (last.seq, w.generation - 1)
    assert not routed({sub_id: last.seq})  # awaited by the worker before its restart
    w.opening = None
    assert not routed({sub_id: last.seq})  # left by a worker no longer waiting for it
    w.scan = last.seq
    assert routed({})

