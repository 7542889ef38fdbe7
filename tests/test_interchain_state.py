"""One contract for the distributor's state, run against real Redis and against SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import redis.asyncio as aioredis
import redis.exceptions

from tidings.core.interchain import DltPublish
from tidings.interchain import Distributor, NetworkContext
from tidings.interchain.adapters import RedisStreamNetwork
from tidings.interchain.state import Mark, RedisState, SQLiteState, State

from .conftest import eventually, free_port
from .interchain_support import event


@pytest.fixture(params=["redis", "sqlite"])
async def state(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[State]:
    s: State
    if request.param == "redis":
        s = RedisState("redis://127.0.0.1:6379/0", f"test:ied:{uuid.uuid4().hex}:")
    else:
        s = SQLiteState(tmp_path / "state.db")
    await s.open()
    yield s
    if isinstance(s, RedisState):
        keys = [k async for k in s._r.scan_iter(match=s.prefix + "*")]
        if keys:
            await s._r.delete(*keys)
    await s.close()


async def test_mark_enqueues_only_when_newly_added(state: State) -> None:
    assert await state.mark([Mark("publishedEvents:A", "g1", "net:A", b"p1"), Mark("publishedEvents:B", "g1")]) == [
        True, True]
    assert await state.mark([Mark("publishedEvents:A", "g1", "net:A", b"again")]) == [False]
    assert await state.mark([Mark("publishedEvents:A", "g2", "net:A", b"p2")]) == [True]
    assert await state.members("publishedEvents:A") == {"g1", "g2"}
    assert await state.peek("net:A", 10) == [b"p1", b"p2"]
    assert await state.outbox_size("net:A") == 2
    assert await state.pop("net:A", [b"p1"]) == 1
    assert await state.peek("net:A", 10) == [b"p2"]
    assert await state.peek("net:B", 10) == []


async def test_pop_removes_only_what_was_sent_and_records_it_atomically(state: State) -> None:
    await state.mark([Mark("notifiedEvents:s", f"g{k}", "sub:s", f"p{k}".encode()) for k in range(4)])
    # Another sender already removed p0: nothing of ours is the head, nothing is removed.
    assert await state.pop("sub:s", [b"x"], record="deliveredEvents:s", gids=["gx"]) == 0
    assert await state.members("deliveredEvents:s") == set()
    assert await state.pop("sub:s", [b"p0", b"p1", b"zz"], record="deliveredEvents:s",
                           gids=["g0", "g1", "gz"]) == 2
    assert await state.peek("sub:s", 10) == [b"p2", b"p3"]
    assert await state.members("deliveredEvents:s") == {"g0", "g1"}
    assert await state.pop("sub:s", [b"p2"]) == 1
    assert await state.members("deliveredEvents:s") == {"g0", "g1"}
    assert await state.outbox_size("sub:s") == 1


async def test_concurrent_marks_of_one_id_enqueue_once(state: State) -> None:
    async def one(i: int) -> list[bool]:
        return await state.mark([Mark("notifiedEvents:s", f"g{k}", "sub:s", f"{i}:{k}".encode()) for k in range(50)])

    results = await asyncio.gather(*(one(i) for i in range(8)))
    assert [sum(r[k] for r in results) for k in range(50)] == [1] * 50
    assert await state.outbox_size("sub:s") == 50


async def test_subscriptions_and_cursors(state: State) -> None:
    assert await state.save_subscription("s1", b"{}")
    assert not await state.save_subscription("s1", b"{}")
    await state.save_subscription("s0", b"[]")
    assert await state.subscriptions() == [("s0", b"[]"), ("s1", b"{}")]
    assert await state.get_cursor("redis:A") is None
    await state.set_cursor("redis:A", "1-0")
    await state.set_cursor("redis:A", "2-0")
    assert await state.get_cursor("redis:A") == "2-0"


async def test_one_batch_with_repeats_many_sets_and_more_than_one_script_call(state: State) -> None:
    """Within one call the first of repeated (set, id) pairs is the one added, outboxes keep
    the marks' order, and a batch longer than one script call (2,000 marks) is exact too."""
    marks = [Mark(f"notifiedEvents:s{k % 3}", f"g{k // 6}", f"sub:s{k % 3}", f"p{k}".encode()) for k in range(4500)]
    marks += [Mark("publishedEvents:N", "dup"), Mark("publishedEvents:N", "dup", "net:N", b"late")]
    got = await state.mark(marks)
    first: set[tuple[str, str]] = set()
    want = []
    for m in marks:
        want.append((m.set_name, m.gid) not in first)
        first.add((m.set_name, m.gid))
    assert got == want and want.count(False) == 4500 // 2 + 1
    for s in range(3):
        expected = [m.payload for m, new in zip(marks, want, strict=True) if new and m.outbox == f"sub:s{s}"]
        assert await state.peek(f"sub:s{s}", 5000) == expected
    assert await state.peek("net:N", 10) == []
    assert await state.mark([Mark("notifiedEvents:s0", "g0", "sub:s0", b"again")]) == [False]
    assert await state.mark([]) == []


async def test_a_state_that_goes_away_is_told_once_and_outboxes_go_on(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """The state's own Redis (a throwaway redis-server) stops for a while: every outbox
    waits, one line says so (not one per outbox per try), one line says it is back, and
    what is published then reaches its network."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = free_port()

    def redis_server() -> subprocess.Popen[bytes]:
        return subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(tmp_path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    server = redis_server()
    stream = f"test:away:{uuid.uuid4().hex[:8]}"
    state = RedisState(f"redis://127.0.0.1:{port}/0", "test:away:", connect_timeout_s=1)
    await eventually(lambda: _answers(port), timeout=10)
    await state.open()
    ctx = NetworkContext(public_url="http://127.0.0.1:1", state=state)
    nets = [RedisStreamNetwork(n, {"stream": f"{stream}:{n}"}, ctx) for n in ("A", "B")]
    for n in nets:
        await n.open()
    d = Distributor(nets, state)
    run = asyncio.create_task(d.run(follow=False))
    shared = aioredis.Redis()
    try:
        with caplog.at_level(logging.INFO, logger="tidings.interchain"):
            server.terminate()
            server.wait(10)
            await asyncio.sleep(3)  # several tries of each outbox
            server = redis_server()
            await eventually(lambda: _answers(port), timeout=10)
            await eventually(lambda: any("answers again" in r.getMessage() for r in caplog.records), timeout=15)
            await d.publish(msgspec.convert(event("after"), DltPublish))
            await eventually(lambda: _len(shared, f"{stream}:A"), timeout=15)
        away = [r for r in caplog.records if "cannot be read" in r.getMessage()]
        back = [r for r in caplog.records if "answers again" in r.getMessage()]
        assert (len(away), len(back)) == (1, 1), [r.getMessage() for r in caplog.records]
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        for n in nets:
            await n.close()
        await state.close()
        await shared.delete(f"{stream}:A", f"{stream}:B")
        await shared.aclose()
        server.terminate()
        server.wait(10)


async def _answers(port: int) -> bool:
    r = aioredis.Redis(port=port, socket_connect_timeout=0.5)
    try:
        return bool(await r.ping())
    except Exception:
        return False
    finally:
        await r.aclose()


async def _len(r: aioredis.Redis, key: str) -> bool:
    return bool(await r.xlen(key))


async def test_a_state_that_stops_answering_fails_its_commands_in_bounded_time(tmp_path: Path) -> None:
    """A Redis that holds its connections and answers nothing (SIGSTOP: as a network that
    drops packets without a reset) fails each command after ``command_timeout_s``,
    instead of holding the outbox's read forever; once it answers again, so does the state."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = RedisState(f"redis://127.0.0.1:{port}/0", "test:stopped:", connect_timeout_s=1, command_timeout_s=1)
    try:
        await eventually(lambda: _answers(port), timeout=10)
        await state.open()
        assert await state.peek("net:A", 10) == []
        server.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(redis.exceptions.TimeoutError):  # without the bound: never (asyncio's instead)
            async with asyncio.timeout(10):
                await state.peek("net:A", 10)
        assert time.monotonic() - started < 5
        server.send_signal(signal.SIGCONT)
        assert await eventually(lambda: _peeks(state), timeout=10)
    finally:
        server.send_signal(signal.SIGCONT)
        await state.close()
        server.terminate()
        server.wait(10)


async def _peeks(state: RedisState) -> bool:
    try:
        return await state.peek("net:A", 10) == []
    except Exception:
        return False
