"""Replays run off the live interpreter: a replay to a ``trusted`` subscription with no
price is read, filtered and pushed by the replay process (``broker.replay._pusher``),
recorded by the broker; the process failing loses nothing (issue 47, point 4).

What every replay guarantees (order, filter and skip, cancel, Err items, 410, a kill of
the server) is tested through the server in test_e2e_replay.py, on this path by default.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tidings.broker.replay._pusher import Pusher
from tidings.broker.replay._pusher_wire import Step
from tidings.core.netpolicy import AddressPolicy
from tidings.outbound import Outbound
from tidings.settings import Settings
from tidings.store.range_reader import open_range_reader

from .conftest import ServerProcess, eventually
from .test_e2e_replay import Recorder, done, register, setup

pytestmark = pytest.mark.e2e


def pushers(server: ServerProcess) -> list[psutil.Process]:
    assert server.proc is not None
    return [
        p for p in psutil.Process(server.proc.pid).children(recursive=True)
        if "tidings.broker.replay._pusher" in " ".join(p.cmdline())
    ]


class TrapProcessPush(Recorder):
    """A Recorder that answers each push after ``delay_s`` (a replay of a few thousand
    events then outlasts the process's start, which the broker does not wait for), counts
    the pushes the replay process made (found by the TCP port it pushes from), and, once
    ``armed``, holds the first of them until ``release`` is set."""

    def __init__(self, server: ServerProcess, delay_s: float = 0.05) -> None:
        super().__init__()
        self._server = server
        self.delay_s = delay_s
        self.armed = False
        self.trapped = asyncio.Event()
        self.release = asyncio.Event()
        self.by_process = 0

    def _from_process(self, port: int) -> bool:
        return any(c.laddr and c.laddr.port == port for p in pushers(self._server) for c in p.net_connections("tcp"))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self.trapped.is_set():
            await asyncio.sleep(self.delay_s)
            if self._from_process(scope["client"][1]):
                self.by_process += 1
                if self.armed:
                    self.trapped.set()
                    await self.release.wait()
        await super().__call__(scope, receive, send)


async def trapped_replay(
    server_factory: Callable[..., ServerProcess], endpoints: Any, n: int, **settings: str
) -> tuple[ServerProcess, TrapProcessPush, int, psutil.Process]:
    """A server replaying ``n`` events to a trapping endpoint, once a push of the replay
    process is held there: the server, the endpoint, the replay id and the process."""
    server = server_factory(replay_batch_size="100", replay_read_size="200", **settings)
    rec = TrapProcessPush(server)
    ep = await endpoints(rec)
    await setup(server, ep.url, n)
    rec.armed = True
    rid = (await register(server, 1, None))["Ok"]
    await asyncio.wait_for(rec.trapped.wait(), 20)
    (p,) = pushers(server)
    return server, rec, rid, p


def each_once(rec: Recorder, rid: int, n: int) -> None:
    """Every event of 1..n reached the endpoint, each under one notification id."""
    ids_of: dict[int, set[int]] = {}
    for note in rec.replayed(rid):
        ids_of.setdefault(note["eventId"], set()).add(note["id"])
    assert sorted(ids_of) == list(range(1, n + 1))
    assert all(len(ids) == 1 for ids in ids_of.values())  # a repeat carries the same notification id


@pytest.mark.parametrize("own_process", [True, False])
async def test_a_replay_is_pushed_by_a_process_of_its_own(
    server_factory: Callable[..., ServerProcess], endpoints: Any, own_process: bool
) -> None:
    server = server_factory(replay_batch_size="100", replay_read_size="200", replay_process=str(own_process).lower())
    rec = TrapProcessPush(server)
    ep = await endpoints(rec)
    await setup(server, ep.url, 2_000)
    rid = (await register(server, 1, None, [["icrc72:subscription:skip", {"Array": [{"Nat": 3}, {"Nat": 1}]}]]))["Ok"]
    s = await done(server, rid)
    want = [i for i in range(1, 2_001) if i % 3 == 1]
    assert s["status"] == {"completed": len(want)}
    got = rec.replayed(rid)
    assert [n["eventId"] for n in got] == want  # in order, once, skip applied
    assert len({n["id"] for n in got}) == len(want)
    assert s["stats"]["icrc77:replay:stats:confirmed"] == len(want)
    assert len(pushers(server)) == (1 if own_process else 0)
    # The replay waited for the process to start: every push is the process's.
    assert rec.by_process == (rec.replay_pushes if own_process else 0) and rec.replay_pushes == 10


async def test_a_replay_process_killed_mid_replay_loses_nothing(
    server_factory: Callable[..., ServerProcess], endpoints: Any
) -> None:
    server, rec, rid, p = await trapped_replay(server_factory, endpoints, 3_000)
    p.kill()  # a push of it is held at the endpoint: its answer never reaches the broker
    rec.release.set()
    s = await done(server, rid)
    assert s["status"]["completed"] >= 3_000
    got = rec.replayed(rid)
    each_once(rec, rid, 3_000)
    assert len(got) - 3_000 <= 200  # what was in flight at the kill, pushed again, at most
    log = (server.data_dir / "server.log").read_text()
    assert "going on in the broker" in log
    assert "Traceback" not in log


async def test_a_stopped_replay_process_pushes_nothing_once_the_lease_may_have_passed(
    tmp_path: Path, endpoints: Any
) -> None:
    """The lease's sure end travels with each step and is looked at last, right before
    the push: a step that waited in the pipe (a stopped process) past it pushes nothing
    and hands its batch back to the broker."""
    from bench.archive import generate

    await asyncio.to_thread(generate, tmp_path, 300, 1)
    rec = Recorder()
    ep = await endpoints(rec)
    reader = await open_range_reader(f"sqlite://{tmp_path / 'tidings.db'}")
    step = dict(
        replay=1, namespace="bench.ns0", after=0, before=301, from_id=1, base=1000, pairs=b"", filter=None,
        skip=None, batch=100, sub=7, endpoint=ep.url, mode="trusted", echo_filter=None, cloudevents=None,
        deadline_s=5.0, epoch=3, secrets=[], clock_offset_ns=0,
    )
    try:
        async with Outbound(AddressPolicy(restricted=False)) as outbound:
            pusher = Pusher(Settings(), reader, outbound)
            late = await pusher.step(Step(req=1, act_until=time.monotonic() - 0.001, **step))  # type: ignore[arg-type]
            assert (late.whole, late.outcome) == (False, None)
            assert [e.id for e in late.events] == list(range(1, 101))
            assert rec.got == []
            on_time = await pusher.step(Step(req=2, act_until=time.monotonic() + 5, **step))  # type: ignore[arg-type]
            assert on_time.whole and on_time.ids == list(range(1, 101)) and on_time.position == 100
            assert [n["id"] for n in rec.got] == list(range(1000, 1100))
    finally:
        await reader.close()


async def test_a_replay_process_stopped_in_a_step_is_replaced(
    server_factory: Callable[..., ServerProcess], endpoints: Any
) -> None:
    """SIGSTOP aimed at the replay process mid-replay: past the push's deadline and its
    slack, the broker stops waiting, kills it, and finishes the replay itself."""
    server, rec, rid, p = await trapped_replay(
        server_factory, endpoints, 3_000, push_timeout_s="1", replay_step_slack_s="1"
    )
    os.kill(p.pid, signal.SIGSTOP)  # in the middle of a step: its push is out, unanswered
    rec.release.set()
    try:
        s = await done(server, rid, timeout=30)
    finally:
        if p.is_running():
            os.kill(p.pid, signal.SIGCONT)
    assert s["status"]["completed"] >= 3_000
    assert sorted({n["eventId"] for n in rec.replayed(rid)}) == list(range(1, 3_001))
    assert "did not answer a step" in (server.data_dir / "server.log").read_text()


async def test_an_idle_replay_process_ends_and_the_next_replay_starts_another(
    tmp_path: Path, endpoints: Any
) -> None:
    from bench.archive import generate

    from tidings.broker.replay import RemotePusher

    await asyncio.to_thread(generate, tmp_path, 300, 1)
    rec = Recorder()
    ep = await endpoints(rec)
    remote = RemotePusher(Settings(), f"sqlite://{tmp_path / 'tidings.db'}", idle_s=0.5)
    step = dict(
        namespace="bench.ns0", before=301, from_id=1, base=1, pairs=b"", filter=None, skip=None, batch=100,
        sub=7, endpoint=ep.url, mode="trusted", echo_filter=None, cloudevents=None, deadline_s=5.0, epoch=None,
        secrets=["whsec_" + "A" * 32], act_until=None, clock_offset_ns=0,
    )
    try:
        first = await remote.step(replay=1, after=0, **step)
        assert first.whole and first.position == 100
        pid = remote.pid
        assert pid is not None
        await eventually(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", timeout=5)
        assert remote.pid is None and remote.available()  # ended by itself: no failure
        second = await remote.step(replay=1, after=100, **step)
        assert second.whole and second.ids == list(range(101, 201))
        assert remote.pid not in (None, pid)
        assert [n["eventId"] for n in rec.got] == list(range(1, 201))
    finally:
        await remote.close()


@pytest.mark.parametrize("how", ["drain", "kill"])
async def test_a_server_stopped_while_its_replay_process_pushes_resumes_the_replay(
    server_factory: Callable[..., ServerProcess], endpoints: Any, how: str
) -> None:
    """The server stopped (SIGTERM: a drain; SIGKILL) while a push of the replay process
    is out: the process dies with it, and after the restart the replay goes on from its
    recorded position. Every event arrives, each under one notification id, and the
    replay counts each once."""
    server, rec, rid, p = await trapped_replay(server_factory, endpoints, 2_000)
    stopping = asyncio.create_task(asyncio.to_thread(server.stop, signal.SIGTERM if how == "drain" else signal.SIGKILL))
    await eventually(lambda: not p.is_running() or p.status() == psutil.STATUS_ZOMBIE, timeout=15)
    rec.release.set()  # its answer reaches nobody
    await stopping
    server.start()
    s = await done(server, rid)
    assert s["status"] == {"completed": 2_000}
    each_once(rec, rid, 2_000)
    assert len(rec.replayed(rid)) - 2_000 <= 200


async def test_the_replay_process_keeps_the_outbound_policy(tmp_path: Path, endpoints: Any) -> None:
    """A hostile endpoint (a private address on a restricted server) is refused by the
    replay process as by the broker: nothing leaves, and the batch comes back whole for
    the broker's own retries and dead letters."""
    from bench.archive import generate

    await asyncio.to_thread(generate, tmp_path, 50, 1)
    rec = Recorder()
    ep = await endpoints(rec)
    reader = await open_range_reader(f"sqlite://{tmp_path / 'tidings.db'}")
    try:
        async with Outbound(AddressPolicy(restricted=True)) as outbound:
            got = await Pusher(Settings(), reader, outbound).step(Step(
                req=1, replay=1, namespace="bench.ns0", after=0, before=51, from_id=1, base=1, pairs=b"",
                filter=None, skip=None, batch=100, sub=7, endpoint=ep.url, mode="trusted", echo_filter=None,
                cloudevents=None, deadline_s=5.0, epoch=None, secrets=[], act_until=None, clock_offset_ns=0,
            ))
        assert (got.whole, got.outcome, got.code) == (False, "no_answer", "blocked_address")
        assert [e.id for e in got.events] == list(range(1, 51))
        assert rec.got == []
    finally:
        await reader.close()


async def test_the_next_batch_made_during_a_push_is_the_batch_asked_for(tmp_path: Path, endpoints: Any) -> None:
    """While a batch is pushed, the process makes the next one (read, and its body but
    the time it is sent); the next step uses it only if it asks for that very batch, and
    otherwise the events go back unsent: whatever the steps ask, each push holds the
    events after the step's position, under the step's ids and filter echo, stamped when
    it is sent."""
    from bench.archive import generate

    await asyncio.to_thread(generate, tmp_path, 700, 1)
    rec = Recorder()
    ep = await endpoints(rec)
    reader = await open_range_reader(f"sqlite://{tmp_path / 'tidings.db'}")
    common = dict(replay=1, namespace="bench.ns0", before=701, from_id=1, pairs=b"", filter=None, skip=None,
                  sub=7, endpoint=ep.url, mode="trusted", cloudevents=None, deadline_s=5.0, epoch=None,
                  secrets=[], act_until=None, clock_offset_ns=0)
    # (after, batch, base, filter echo): the same shape as the step before (the prepared
    # batch is used), another echo, another size, other ids, a step from elsewhere (back).
    steps = [(0, 100, 1000, None), (100, 100, 1000, None), (200, 100, 1000, "x"), (300, 50, 1000, "x"),
             (350, 100, 5000, "x"), (450, 100, 5000, "x"), (100, 100, 1000, None), (200, 100, 1000, None)]
    try:
        async with Outbound(AddressPolicy(restricted=False)) as outbound:
            pusher = Pusher(Settings(), reader, outbound)
            for req, (after, batch, base, echo) in enumerate(steps, 1):
                rec.got.clear()
                before_ns = time.time_ns()
                got = await pusher.step(Step(req=req, after=after, batch=batch, base=base, echo_filter=echo,
                                             **common))  # type: ignore[arg-type]
                want = list(range(after + 1, after + batch + 1))
                assert got.whole and got.ids == want and got.position == want[-1]
                assert [n["eventId"] for n in rec.got] == want
                assert [n["id"] for n in rec.got] == [base + i - 1 for i in want]
                assert {n["filter"] for n in rec.got} == {echo}
                for n in rec.got:
                    sent = [v for k, v in n["headers"] if k == "icrc72:broadcaster:sent"]
                    assert len(sent) == 1 and sent[0]["Nat"] >= before_ns  # stamped at the push, not before
    finally:
        await reader.close()


@pytest.mark.parametrize("idle_class", [True, False])
async def test_the_replay_process_gives_way_to_any_other_process(
    server_factory: Callable[..., ServerProcess], endpoints: Any, idle_class: bool
) -> None:
    """By default the replay process is in the kernel's idle scheduling class (any other
    process that wants a core preempts it) and niced; with the setting off, niced only."""
    server = server_factory(replay_batch_size="100", replay_idle_class=str(idle_class).lower())
    rec = TrapProcessPush(server)
    ep = await endpoints(rec)
    await setup(server, ep.url, 300)
    rid = (await register(server, 1, None, []))["Ok"]
    assert (await done(server, rid))["status"] == {"completed": 300}
    [p] = pushers(server)
    assert os.sched_getscheduler(p.pid) == (os.SCHED_IDLE if idle_class else os.SCHED_OTHER)
    assert p.nice() == Settings().replay_nice


async def test_a_prepared_batch_past_the_lease_is_handed_back_unsent(tmp_path: Path, endpoints: Any) -> None:
    """The next batch made during a push is still looked at against the lease as it is
    sent: a step that comes after the lease's sure end (a stopped process) pushes
    nothing and hands the prepared events back; the next step reads them again."""
    from bench.archive import generate

    await asyncio.to_thread(generate, tmp_path, 300, 1)
    rec = Recorder()
    ep = await endpoints(rec)
    reader = await open_range_reader(f"sqlite://{tmp_path / 'tidings.db'}")
    common = dict(replay=1, namespace="bench.ns0", before=301, from_id=1, base=1000, pairs=b"", filter=None,
                  skip=None, batch=100, sub=7, endpoint=ep.url, mode="trusted", echo_filter=None, cloudevents=None,
                  deadline_s=5.0, epoch=3, secrets=[], clock_offset_ns=0)
    try:
        async with Outbound(AddressPolicy(restricted=False)) as outbound:
            pusher = Pusher(Settings(), reader, outbound)
            first = await pusher.step(Step(req=1, after=0, act_until=time.monotonic() + 5, **common))  # type: ignore[arg-type]
            assert first.whole and first.position == 100  # and 101-200 are prepared meanwhile
            rec.got.clear()
            late = await pusher.step(Step(req=2, after=100, act_until=time.monotonic() - 0.001,  # type: ignore[arg-type]
                                          **common))
            assert (late.whole, late.outcome) == (False, None)
            assert [e.id for e in late.events] == list(range(101, 201))
            assert rec.got == []
            again = await pusher.step(Step(req=3, after=100, act_until=time.monotonic() + 5, **common))  # type: ignore[arg-type]
            assert again.whole and again.ids == list(range(101, 201))
            assert [n["id"] for n in rec.got] == list(range(1100, 1200))
    finally:
        await reader.close()
