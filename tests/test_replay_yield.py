"""Live work first (issue 39, point 4; docs/replay.md "Live work first"): replays and
redrives of dead letters wait for live pushes, within ``replay_yield_ms`` a batch, and
are paced by ``replay_max_rate``.

The policy's rules on its own (no I/O), then through a real server: a live push held
open by its endpoint holds a replay's next batches back, checked by what arrived where.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from tidings.broker.delivery import LiveFirst
from tidings.errors import ConfigError
from tidings.settings import Settings

from .conftest import ServerProcess, eventually, read_body, respond
from .test_e2e_replay import api, done, register, replay_id, setup


async def test_a_batch_waits_while_another_subscription_has_live_work_then_goes_once_it_is_idle() -> None:
    gate = LiveFirst(10_000, 0)
    gate.arrived(7)
    turn = asyncio.create_task(gate.turn(500))
    await asyncio.sleep(0.05)
    assert not turn.done()  # live work under way: the batch waits
    gate.arrived(8)
    gate.idle(7)
    await asyncio.sleep(0.02)
    assert not turn.done()  # 8 still busy
    gate.idle(8)
    await asyncio.wait_for(turn, 1)
    assert gate.waits == 1


async def test_own_subscription_and_no_live_work_do_not_wait() -> None:
    gate = LiveFirst(10_000, 0)
    await asyncio.wait_for(gate.turn(10), 1)  # nothing under way
    gate.arrived(3)
    await asyncio.wait_for(gate.turn(10, own=3), 1)  # a redrive's own worker is the one busy
    assert gate.waits == 0


async def test_yield_ms_bounds_each_wait_and_zero_turns_the_wait_off() -> None:
    gate = LiveFirst(30, 0)
    gate.arrived(1)  # a worker that never goes idle
    await asyncio.wait_for(gate.turn(10), 2)
    assert gate.waits == 1 and 0.02 <= gate.waited_s < 1.5
    off = LiveFirst(0, 0)
    off.arrived(1)
    await asyncio.wait_for(off.turn(10), 1)
    assert off.waits == 0 and not off.live_under_way()


async def test_a_worker_that_ended_without_going_idle_is_forgotten_after_yield_ms() -> None:
    clock = [100.0]
    gate = LiveFirst(50, 0, monotonic=lambda: clock[0])
    gate.arrived(1)
    assert gate.live_under_way()
    clock[0] += 0.051
    assert not gate.live_under_way()


async def test_max_rate_paces_background_batches() -> None:
    clock = [0.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    gate = LiveFirst(0, 1000, monotonic=lambda: clock[0], sleep=sleep)
    await gate.turn(500)
    await gate.turn(500)
    await gate.turn(250)
    assert slept == [0.5, 1.0]  # 1,000 a second: the second batch at 0.5 s, the third at 1.0 s
    clock[0] = 10.0  # idle for long: no burst saved up, the next goes now and the one after waits
    await gate.turn(100)
    await gate.turn(100)
    assert slept == [0.5, 1.0, pytest.approx(0.1)]


def test_the_settings_are_read_and_bounded() -> None:
    s = Settings.from_env({"TIDINGS_REPLAY_YIELD_MS": "5", "TIDINGS_REPLAY_MAX_RATE": "200000"})
    assert (s.replay_yield_ms, s.replay_max_rate) == (5.0, 200000.0)
    assert (Settings().replay_yield_ms, Settings().replay_max_rate) == (20.0, 0.0)
    with pytest.raises(ConfigError, match="REPLAY_YIELD_MS"):
        Settings.from_env({"TIDINGS_REPLAY_YIELD_MS": "10001"})
    with pytest.raises(ConfigError, match="REPLAY_MAX_RATE"):
        Settings.from_env({"TIDINGS_REPLAY_MAX_RATE": "-1"})


class Both:
    """Two subscribers' endpoints in one: ``/`` takes the replay, ``/live`` the live
    pushes, and holds the first live push open for ``hold_s``, noting how many replay
    pushes had arrived when it came and when it was answered."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.replay_pushes = 0
        self.replayed = 0
        self.live: list[int] = []
        self.at_live: tuple[int, int] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        batch = json.loads(await read_body(receive))
        if scope["path"] == "/live":
            if self.at_live is None:
                came = self.replay_pushes
                await asyncio.sleep(self.hold_s)
                self.at_live = (came, self.replay_pushes)
            self.live += [n["eventId"] for n in batch]
        else:
            assert all(replay_id(n) is not None for n in batch)
            await asyncio.sleep(0.005)  # a replay of 200 pushes lasts a second at least
            self.replay_pushes += 1
            self.replayed += len(batch)
        await respond(send, 200)


@pytest.mark.e2e
@pytest.mark.parametrize("yield_ms", ["10000", "0"])
async def test_a_live_push_under_way_holds_back_a_replays_batches(
    server_factory: Callable[..., ServerProcess], endpoints: Any, yield_ms: str
) -> None:
    """While the live push to another subscription is open (its endpoint holds it 1 s),
    the replay, which has batches ready, starts none (at most the one already in flight
    lands); with ``replay_yield_ms=0`` (no priority) it keeps pushing meanwhile."""
    server = server_factory(replay_batch_size="20", replay_read_size="100", replay_yield_ms=yield_ms)
    ep = await endpoints(Both(hold_s=1.0))
    app: Both = ep.app
    await setup(server, ep.url, 4000)
    (r,) = await api(server, "icrc72_register_publication", [{"namespace": "com.example.live"}])
    assert "Ok" in r, r
    (s,) = await api(server, "icrc72_register_subscription", [
        {"namespace": "com.example.live", "endpoint": f"{ep.url}live", "mode": "trusted"}])
    assert "Ok" in s, s
    rid = (await register(server, 1, 4001))["Ok"]
    await eventually(lambda: app.replay_pushes >= 3, interval=0.005)  # under way, with batches read ahead
    (p,) = await api(server, "icrc72_publish", [{"namespace": "com.example.live", "data": {"Nat": 1}}])
    assert "Ok" in p, p
    await eventually(lambda: app.at_live is not None, timeout=10)
    assert app.at_live is not None
    came, answered = app.at_live
    assert came < 200  # the replay was still going when the live push came
    if yield_ms == "0":
        assert answered - came > 3  # the replay went on beside the live push
    else:
        assert answered - came <= 1  # only the push already in flight when the live one came
    assert (await done(server, rid, timeout=60))["status"] == {"completed": 4000}
    assert app.replayed == 4000 and len(app.live) == 1


class DeadThenLive:
    """``/dead`` answers 500 while ``failing``, then takes each push in 20 ms (a redrive of
    120 batches lasts 2.4 s at least: a live publish on a loaded host comes within it); ``/live``
    holds its first push open ``hold_s``, noting how many ``/dead`` pushes had arrived
    when it came and when it was answered."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.failing = True
        self.dead_pushes = 0
        self.redriven = 0
        self.at_live: tuple[int, int] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        batch = json.loads(await read_body(receive))
        if scope["path"] == "/live":
            if self.at_live is None:
                came = self.dead_pushes
                await asyncio.sleep(self.hold_s)
                self.at_live = (came, self.dead_pushes)
        elif self.failing:
            await respond(send, 500)
            return
        else:
            await asyncio.sleep(0.02)
            self.dead_pushes += 1
            self.redriven += len(batch)
        await respond(send, 200)


@pytest.mark.e2e
@pytest.mark.parametrize("yield_ms", ["10000", "0"])
async def test_a_redrive_of_dead_letters_waits_for_another_subscriptions_live_push(
    server_factory: Callable[..., ServerProcess], endpoints: Any, yield_ms: str
) -> None:
    """600 dead letters redriven in batches of 5: while the live push to another
    subscription is held open, no redriven batch starts (but the one in flight); with
    ``replay_yield_ms=0`` they keep going."""
    server = server_factory(max_attempts="1", retry_initial_s="0.02", delivery_batch_size="5",
                            replay_yield_ms=yield_ms)
    ep = await endpoints(DeadThenLive(hold_s=1.0))
    app: DeadThenLive = ep.app
    subs = {}
    for ns, path in (("com.example.dead", "dead"), ("com.example.live", "live")):
        (r,) = await api(server, "icrc72_register_publication", [{"namespace": ns}])
        assert "Ok" in r, r
        (s,) = await api(server, "icrc72_register_subscription", [{"namespace": ns, "endpoint": f"{ep.url}{path}"}])
        subs[ns] = int(s["Ok"])
    events = [{"namespace": "com.example.dead", "data": {"Nat": i}} for i in range(600)]
    assert all("Ok" in r for r in await api(server, "icrc72_publish", events))

    async def dead() -> list[int] | None:
        got = await api(server, "tidings_get_dead_letters", {"subscription": subs["com.example.dead"], "take": 1000})
        return [d["id"] for d in got] if len(got) == 600 else None

    ids = await eventually(dead, timeout=30, interval=0.1)
    app.failing = False
    assert all(r is not None and "Ok" in r for r in await api(server, "tidings_redrive_dead_letters", ids))
    await eventually(lambda: app.dead_pushes >= 3, interval=0.005)
    (p,) = await api(server, "icrc72_publish", [{"namespace": "com.example.live", "data": {"Nat": 1}}])
    assert "Ok" in p, p
    await eventually(lambda: app.at_live is not None, timeout=10)
    assert app.at_live is not None
    came, answered = app.at_live
    assert came < 120  # the redrive was still going when the live push came
    if yield_ms == "0":
        assert answered - came > 3
    else:
        assert answered - came <= 1
    await eventually(lambda: app.redriven == 600, timeout=30)
