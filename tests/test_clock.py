"""One clock per broadcaster (``core.clock``, docs/semantics.md "Time"): a wall clock that
steps or is off moves nothing it stamps or compares.

The rules run on fake clocks; the broker runs in this process with the wall clock
(``time.time_ns``/``time.time``) replaced by one the test steps, the monotonic clock
left true, as libfaketime does to a whole process (``test_clock_e2e.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.broker import Broker
from tidings.broker.cluster import ClockWatch
from tidings.core.clock import DRIFT_PPM, Clock, later
from tidings.core.wire import Event, PublicationRegistration, SubscriptionRegistration
from tidings.core.wire_schemas import SchemaRegistration, SchemaRetentionUpdate
from tidings.settings import Settings
from tidings.store import NewEvent, PostgresStore, PrincipalRecord, SQLiteStore

from .conftest import eventually, read_body, respond
from .pg_support import fresh_schema

ADMIN = PrincipalRecord(name="admin", admin=True)
HOUR = 3_600 * 10**9
S = 10**9


class Fake:
    def __init__(self) -> None:
        self.wall = 1_800_000_000 * S
        self.mono = 50 * S

    def tick(self, ns: int) -> None:
        self.wall += ns
        self.mono += ns


# -- the rules --------------------------------------------------------------------------


@given(st.lists(st.tuples(st.sampled_from(["tick", "step", "read"]), st.integers(-2 * HOUR, 2 * HOUR),
                          st.integers(0, 3 * S), st.integers(-2 * HOUR, 2 * HOUR)), max_size=40))
def test_time_never_goes_back_and_no_wall_step_moves_it(script: list[tuple[str, int, int, int]]) -> None:
    f = Fake()
    c = Clock(lambda: f.wall, lambda: f.mono)
    start_wall, start_mono = f.wall, f.mono
    last = c.now_ns()
    shared = False
    for what, ns, rtt, off in script:
        if what == "tick":
            f.tick(abs(ns) // 1000)
        elif what == "step":
            f.wall += ns  # the wall clock alone
        else:  # a reading of the shared clock, ``off`` from the wall, taking ``rtt``
            sent_wall, sent = f.wall, f.mono
            f.tick(rtt // 2)
            shared_now = f.wall + off
            f.tick(rtt - rtt // 2)
            c.observe(shared_now, sent_wall, sent, f.mono)
            assert c.offset_ns == off
            shared = True
        now = c.now_ns()
        if shared and not what == "read":
            assert now >= last
        if not shared:  # alone: the start's wall clock, carried on by the monotonic one
            assert now == start_wall + (f.mono - start_mono)
        last = now


def test_a_reading_of_the_shared_clock_anchors_the_clock_with_half_the_round_trip_as_error() -> None:
    f = Fake()
    c = Clock(lambda: f.wall, lambda: f.mono)
    f.wall += HOUR  # this host's wall clock stepped an hour ahead
    sent_wall, sent = f.wall, f.mono
    f.tick(S // 10)
    db = f.wall - HOUR  # the database answers mid-way
    f.tick(S // 10)
    assert c.observe(db, sent_wall, sent, f.mono)
    assert c.offset_ns == -HOUR
    assert c.now_ns() == db + S // 10  # the reading was taken mid-way
    assert c.skew_ns() == HOUR
    assert c.uncertainty_ns() == S // 10 + (S // 10) * DRIFT_PPM // 1_000_000
    # A slower reading that says the same is less certain: it is kept as a measure only.
    sent_wall, sent = f.wall, f.mono
    f.tick(S)
    assert not c.observe(f.wall - HOUR + 5 * S, sent_wall, sent, f.mono + S)
    assert abs(c.now_ns() - (f.wall - HOUR)) < S // 1000 * 2
    # Re-anchoring a little behind never makes time go back.
    before = c.now_ns()
    sent_wall, sent = f.wall, f.mono
    assert c.observe(f.wall - HOUR - S // 1000, sent_wall, sent, sent)
    assert c.now_ns() == before


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=50))
def test_later_never_goes_back(stamps: list[int]) -> None:
    prev = None
    out = []
    for t in stamps:
        prev = later(t, prev)
        out.append(prev)
    assert out == sorted(out) and out[-1] == max(stamps)


# -- the store: retention by the database's clock --------------------------------------


async def test_a_member_whose_clock_is_ahead_trims_nothing_young(pg_database: str) -> None:
    """Its cut-off is measured again on the database's clock when the delete runs."""
    ahead = Clock(lambda: time.time_ns() + HOUR, time.monotonic_ns)  # never read the database's
    async with fresh_schema(pg_database) as schema:
        store = PostgresStore(pg_database, server_settings={"search_path": schema}, clock=ahead)
        await store.open()
        try:
            now = time.time_ns()
            await store.append([NewEvent(namespace="n", source="s", timestamp=now - i * S, data=b"1")
                                for i in (90, 60, 30, 0)])
            kept_for = 75 * S  # its retention: 75 s; by its own clock every event is an hour old
            assert await store.trim_events("n", store.clock.now_ns() - kept_for) == 1  # only the 90 s old one
            assert await store.trim_events("n", store.clock.now_ns() - kept_for) == 0  # again: idempotent
            assert await store.count_events("n") == 3
        finally:
            await store.close()


# -- one broadcaster whose wall clock steps ---------------------------------------------


class WallClock:
    """``time.time_ns``/``time.time`` of this process, steppable; monotonic left true."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.shift = 0
        real = time.time_ns
        self.true_ns = real
        monkeypatch.setattr(time, "time_ns", lambda: real() + self.shift)
        monkeypatch.setattr(time, "time", lambda: (real() + self.shift) / 1e9)


class Failing:
    """An endpoint that answers 500 (its notifications stay pending), noting the
    ``webhook-timestamp`` of each push against the true time."""

    def __init__(self, true_ns: Any) -> None:
        self.true_ns = true_ns
        self.skews: list[float] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read_body(receive)
        stamp = dict(scope["headers"]).get(b"webhook-timestamp")
        if stamp is not None:
            self.skews.append(int(stamp) - self.true_ns() / 1e9)
        await respond(send, 500, b"")


@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> Iterator[WallClock]:
    yield WallClock(monkeypatch)


@pytest.fixture
async def broker(tmp_path: Path, wall: WallClock) -> AsyncIterator[Broker]:
    settings = Settings(data_dir=tmp_path, retry_initial_s=0.05, retry_max_s=0.2, max_attempts=1_000,
                        heartbeat_s=0.05, retention_interval_s=0)
    async with Broker(settings, SQLiteStore(tmp_path / "t.db")) as b:
        yield b


async def test_one_broadcaster_whose_wall_clock_steps_stamps_expires_and_trims_nothing_by_it(
    broker: Broker, wall: WallClock, endpoints: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    b = broker
    ep = await endpoints(Failing(wall.true_ns))
    (schema,) = await b.schemas.register(ADMIN, [SchemaRegistration(model='{"type": "object"}')])
    sid = schema.Ok.id  # type: ignore[union-attr]
    await b.schemas.update_retention(ADMIN, [SchemaRetentionUpdate(id=sid, retention_s=3600)])  # one hour
    await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(
        namespace="t.x", config=[["tidings:publication:schema", {"Nat": sid}]])])
    (r,) = await b.orchestrator.register_subscriptions(ADMIN, [SubscriptionRegistration(
        namespace="t.x", endpoint=ep.url, config=[["tidings:subscription:maxAgeMs", {"Nat": 1_800_000}]],
    )])
    sub_id = int(r.Ok)
    caplog.set_level(logging.INFO, "tidings.clock")
    stop = asyncio.Event()

    async def publish() -> None:  # under load: a publisher that never pauses
        while not stop.is_set():
            await b.broadcaster.publish(ADMIN, [Event(namespace="t.x", data={"Map": []})] * 5)
            await asyncio.sleep(0.005)

    loader = asyncio.create_task(publish())
    try:
        for step in (HOUR, -HOUR, 90 * S, -90 * S, -HOUR):
            wall.shift = step
            await asyncio.sleep(0.3)
            run = await b.retention.apply()  # kept for an hour: none is a minute old
            assert [t.trimmed for t in run.namespaces] == [0]
            if abs(step) >= HOUR:
                await eventually(lambda: abs(b.metrics.clock_offset_s * S - wall.shift) < S)
                assert "tidings_clock_offset_seconds " + str(b.metrics.clock_offset_s) in b.metrics.render(
                    workers_running=1, pending={}, cluster=None)
    finally:
        stop.set()
        await loader
    events = await b.store.read_after(0, ["t.x"], -1)
    assert len(events) > 50
    stamps = [e.timestamp for e in sorted(events, key=lambda e: e.id)]
    assert stamps == sorted(stamps)  # never back, whatever the wall clock did
    true = wall.true_ns()
    assert all(true - 10 * S < t <= true for t in stamps)  # and true to within the bound
    # A notification recorded an hour "ago" by the stepped wall clock is still pending:
    # nothing was dead-lettered for max_age (30 min).
    assert await b.store.list_dead_letters() == []
    assert (await b.store.stats("subscription", str(sub_id))).get("tidings:subscription:stats:deadLetters", 0) == 0
    assert ep.app.skews and all(abs(s) <= 2 for s in ep.app.skews)  # webhook-timestamp: the true time
    steps = [r for r in caplog.records if r.name == "tidings.clock" and "off by" in r.getMessage()]
    assert len(steps) == 1  # once, when it went off: not at each check, nor at each further step
    assert await b.readiness() == []  # alone: logged and counted, and it keeps serving


async def test_creation_times_are_the_broadcaster_s_clock_not_a_stepped_wall_clock(
    broker: Broker, wall: WallClock, endpoints: Any,
) -> None:
    """What users compare across members: when a publication, a subscription and a
    principal were made, read from the clock that a wall-clock step does not move."""
    b = broker
    ep = await endpoints(Failing(wall.true_ns))
    await asyncio.sleep(0.1)
    for step in (HOUR, -HOUR):
        wall.shift = step
        ns = f"t.made{'ahead' if step > 0 else 'behind'}"
        await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(namespace=ns)])
        (r,) = await b.orchestrator.register_subscriptions(ADMIN, [SubscriptionRegistration(
            namespace=ns, endpoint=ep.url)])
        await b.auth.create(f"p{step > 0}")
        true = wall.true_ns()
        (pub,) = [p for p in await b.store.list_publications() if p.namespace == ns]
        (sub,) = [x for x in await b.store.list_subscriptions() if x.id == int(r.Ok)]  # type: ignore[arg-type]
        (made,) = [x for x in await b.store.list_principals() if x.name == f"p{step > 0}"]
        for at in (pub.created_at, sub.created_at, made.created_at):
            assert true - 10 * S < at <= true + S, (step, at - true)


# -- several broadcasters: the database's clock, read with the heartbeat ------------------


async def test_a_member_an_hour_ahead_reads_the_database_s_clock_and_says_so(
    pg_database: str, caplog: pytest.LogCaptureFixture,
) -> None:
    ahead = Clock(lambda: time.time_ns() + HOUR, time.monotonic_ns)
    async with fresh_schema(pg_database) as schema:
        store = PostgresStore(pg_database, server_settings={"search_path": schema}, clock=ahead)
        await store.open()
        try:
            watch = ClockWatch(ahead, max_offset_s=0.5, shared=True, me="b7")
            assert abs(ahead.now_ns() - time.time_ns() - HOUR) < S  # its own wall clock, until it has read
            await store.heartbeat("b7", "http://b7", forget_after_s=10)
            assert abs(ahead.offset_ns + HOUR) < S and ahead.shared
            assert abs(ahead.now_ns() - time.time_ns()) < S // 10  # the database's clock, not its own
            assert ahead.uncertainty_ns() < S // 10
            with caplog.at_level(logging.WARNING, "tidings.clock"):
                watch.check()
                watch.check()
            (line,) = [r.getMessage() for r in caplog.records if r.name == "tidings.clock"]
            assert "b7" in line and "the database's clock" in line
            found = re.search(r"off by \+(\S+) s", line)
            assert found is not None and abs(float(found.group(1)) - 3600) < 1, line
            assert watch.problems() and "b7" in watch.problems()[0]
            assert abs(watch.offset_s - 3600) < 1
            # Stamped by the database's clock: the event is not an hour ahead.
            (e,) = await store.append([NewEvent(namespace="n", source="s", timestamp=ahead.now_ns(), data=b"1")])
            assert abs(e.timestamp - time.time_ns()) < S
        finally:
            await store.close()


async def test_a_reading_within_the_clock_s_error_bar_is_the_event_s_time(broker: Broker) -> None:
    """A front's (or a forwarding member's) reading is the event's time, the same as its
    ``icrc72:broadcaster:received`` header, unless it disagrees with the owner's clock:
    more than ``max_clock_offset_s`` behind, or ahead by more than the clock's error bar
    (a cluster clock read over a slow round trip may lag a true wall clock by half of it)."""
    from tidings.core import ingest

    b = broker
    mono = time.monotonic_ns()
    b.clock.observe(b.clock.now_ns(), time.time_ns(), mono - 40_000_000, mono)  # error bar: 20 ms
    bar = b.clock.uncertainty_ns()
    assert 20_000_000 <= bar < 30_000_000
    cases = {"ahead within": 15_000_000, "ahead past": 200_000_000, "behind within": -400_000_000,
             "behind past": -700_000_000}
    for k, (name, off) in enumerate(cases.items()):
        ns = f"t.bar{k}"  # one each: the store keeps a namespace's timestamps from going back
        await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(namespace=ns)])
        now = b.clock.now_ns() + off
        rows, refused = ingest.prepare([Event(namespace=ns, data={"Text": name})], now)
        before = b.clock.now_ns()
        (r,) = await b.broadcaster.commit(ADMIN, 1, rows, refused, now)
        after = b.clock.now_ns()
        (e,) = [e for e in await b.store.read_after(0, [ns], -1) if e.id == r.Ok[0]]  # type: ignore[union-attr]
        received = dict(json.loads(e.headers))["icrc72:broadcaster:received"]["Nat"]
        assert received == now
        if name.endswith("within"):
            assert e.timestamp == now, name
        else:  # the owner's clock at the commit (and never earlier than the one before)
            assert before <= e.timestamp <= after, name


async def test_the_broker_and_its_fronts_state_their_time_by_one_clock(broker: Broker) -> None:
    """A publish the broker takes itself and the next one a front hands over, in one
    namespace: both are read off this host's wall clock, so the later is not behind the
    earlier and each keeps its reading (the ``received`` header) as its time, even while
    the cluster's clock runs a little ahead of the wall (within its error bar)."""
    from tidings.core import ingest

    b = broker
    await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(namespace="t.one")])
    mono = time.monotonic_ns()
    b.clock.observe(time.time_ns() + 10_000_000, time.time_ns(), mono - 40_000_000, mono)  # 10 ms ahead
    (r1,) = await b.broadcaster.publish(ADMIN, [Event(namespace="t.one", data={"Text": "broker"})])
    now = time.time_ns()  # a front's reading, a moment later
    rows, refused = ingest.prepare([Event(namespace="t.one", data={"Text": "front"})], now)
    (r2,) = await b.broadcaster.commit(ADMIN, 1, rows, refused, now)
    events = sorted(await b.store.read_after(0, ["t.one"], -1), key=lambda e: e.id)
    assert [e.id for e in events] == [r1.Ok[0], r2.Ok[0]]  # type: ignore[union-attr]
    for e in events:
        assert e.timestamp == dict(json.loads(e.headers))["icrc72:broadcaster:received"]["Nat"]
    assert events[1].timestamp == now
