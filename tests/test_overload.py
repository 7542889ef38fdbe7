"""Overload and a stalling store (docs/operations.md, "Overload and a stalling store").

What waits for the store is capped in bytes and requests, and refused past the caps with
503 and ``Retry-After`` before the body is read; a publish waits for its commit at most
``store_timeout_s``; ``/readyz`` is judged by the age of the oldest wait in progress; a
stall is logged when it starts and when it ends. The disk is stalled for real: an
``LD_PRELOAD`` shim on ``fsync``/``fdatasync`` (``tests/fixtures/fsync_stall.c``, built
here with ``cc``) holds every sync of the server's processes while a control file exists.
The bounds are checked on the server's own figures (``/metrics``), never on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from bench.stall import FAIL_FILE_ENV, STALL_FILE_ENV, build_shim, gauges
from hypothesis import given
from hypothesis import strategies as st

from tidings.broker.publish import COMMIT_TIMEOUT, CommitTimeout, Overload, Overloaded
from tidings.core.admission import Admission
from tidings.errors import StoreUnavailable
from tidings.store import disk_cause

from .conftest import ServerProcess, eventually

NS = "overload.test"
CAP = 6


# -- the rule, pure ------------------------------------------------------------------------


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5000)), max_size=60))
def test_admission_refuses_exactly_what_would_pass_a_cap(steps: list[tuple[bool, int]]) -> None:
    a = Admission(max_bytes=10_000, max_requests=5)
    held: list[int] = []
    for take, n in steps:
        if take:
            passes = len(held) >= 5 or (bool(held) and sum(held) + n > 10_000)
            reason = a.take(n)
            assert (reason is not None) == passes
            if reason is None:
                held.append(n)
        elif held:
            a.give_back(held.pop())
        assert a.waiting_requests == len(held) <= 5
        assert a.waiting_bytes == sum(held)
        assert a.waiting_bytes <= 10_000 or len(held) == 1  # one alone is the size limit's to refuse


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_commit_that_outlives_the_timeout_is_answered_and_stays_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    o = Overload(Admission(1000, 2), store="s.db", timeout_s=0.05, stall_s=1.0, clock=clock)
    store: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
    ticket = o.admit(400)
    with pytest.raises(CommitTimeout) as e:
        await o.commit(store)
    assert e.value.code == COMMIT_TIMEOUT and e.value.status == 503 and e.value.retry_after_s >= 1
    o.release(ticket)  # answered; the store still holds the commit
    assert (o.admission.waiting_requests, o.admission.waiting_bytes) == (1, 400)
    o.admit(100)
    with pytest.raises(Overloaded) as refused:
        o.admit(0)
    assert refused.value.code == "overloaded" and refused.value.retry_after_s >= 1
    caplog.set_level(logging.WARNING, "tidings.overload")
    clock.now += 1.5
    assert o.problem() is not None  # the oldest commit has waited 1.5 s: stalled
    assert o.problem() is not None
    assert len([r for r in caplog.records if "has not committed" in r.getMessage()]) == 1  # once per stall
    store.set_result([1])
    await asyncio.sleep(0)
    assert o.problem() is None
    assert len([r for r in caplog.records if "commits again" in r.getMessage()]) == 1
    assert o.admission.waiting_requests == 1  # the timed-out commit's ticket came back with the store's answer
    assert o.admission.refused == {"requests": 1, COMMIT_TIMEOUT: 1}


async def test_a_failed_commit_does_not_end_a_stall() -> None:
    clock = _Clock()
    o = Overload(Admission(1000, 10), store="pg", timeout_s=60, stall_s=1.0, clock=clock)
    loop = asyncio.get_running_loop()
    first: asyncio.Future[None] = loop.create_future()
    second: asyncio.Future[None] = loop.create_future()
    waits = [asyncio.ensure_future(o.commit(first)), asyncio.ensure_future(o.commit(second))]
    await asyncio.sleep(0)
    clock.now += 2
    assert o.stalled()
    first.set_exception(StoreUnavailable("paused"))
    await asyncio.sleep(0)
    assert o.stalled()  # the store's failure is no commit
    second.set_result(None)
    await asyncio.gather(*waits, return_exceptions=True)
    assert not o.stalled()


# -- a real server on a disk that stalls -----------------------------------------------------


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the fsync shim")
    return build_shim(tmp_path_factory.mktemp("shim"))


@pytest.fixture
def stalling(tmp_path: Path, shim: Path, request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, Path]]:
    control = tmp_path / "stall"
    data = tmp_path / "data"
    data.mkdir()
    s = ServerProcess(data, env={
        "LD_PRELOAD": str(shim), STALL_FILE_ENV: str(control),
        "TIDINGS_WORKERS": str(request.param), "TIDINGS_MAX_WAITING_REQUESTS": str(CAP),
        "TIDINGS_STORE_TIMEOUT_S": "2", "TIDINGS_STORE_STALL_S": "0.3",
    })
    s.start(new_port_if_taken=True)
    try:
        yield s, control
    finally:
        control.unlink(missing_ok=True)
        s.stop()


def _client() -> aiohttp.TCPConnector:
    # Idle connections let go before the server's keep-alive (5 s) closes them: a client
    # keeping them longer races that close (REFERENCE.md §16), as a front once did.
    return aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)


async def _publish(http: aiohttp.ClientSession, s: ServerProcess, n: int = 1) -> tuple[int, Any, str | None]:
    body = json.dumps([{"namespace": NS, "data": {"Nat": n}}])
    async with http.post(f"{s.url}/v1/icrc72_publish", data=body,
                         headers={"authorization": f"Bearer {s.admin_token}"}) as r:
        return r.status, await r.json(content_type=None), r.headers.get("Retry-After")


async def _metrics(http: aiohttp.ClientSession, s: ServerProcess) -> dict[str, float]:
    async with http.get(f"{s.url}/metrics") as r:
        return gauges(await r.text())


async def _ready(http: aiohttp.ClientSession, s: ServerProcess) -> int:
    async with http.get(f"{s.url}/readyz") as r:
        return r.status


def _refused_before_body(s: ServerProcess) -> bytes:
    """A publish that declares a body and sends none: its answer, if it comes before the body."""
    with socket.create_connection(("127.0.0.1", s.port), 10) as c:
        c.sendall((f"POST /v1/icrc72_publish HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {s.admin_token}\r\n"
                   "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n").encode())
        c.settimeout(10)
        got = b""
        while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < _length(got):
            chunk = c.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def _length(raw: bytes) -> int:
    for line in raw.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.mark.parametrize("stalling", [1, 2], indirect=True, ids=["broker-alone", "with-a-front"])
async def test_a_stalled_disk_is_shed_told_and_recovered(stalling: tuple[ServerProcess, Path]) -> None:
    s, control = stalling
    async with aiohttp.ClientSession(connector=_client()) as http:
        async with http.post(f"{s.url}/v1/icrc72_register_publication", data=json.dumps([{"namespace": NS}]),
                             headers={"authorization": f"Bearer {s.admin_token}"}) as r:
            assert r.status == 200
        assert (await _publish(http, s))[0] == 200
        assert await _ready(http, s) == 200

        control.touch()  # every fsync waits from now on
        waiting = [asyncio.create_task(_publish(http, s, i)) for i in range(CAP)]
        await eventually(lambda: _ready_is(http, s, 503), timeout=20)
        await eventually(lambda: _waiting_is(http, s, CAP), timeout=20)

        # Past the cap: refused at once, before the body is read, with Retry-After. (Alone:
        # with a front, the kernel may hand this connection to the front, whose own cap
        # counts only what it handed over; the broker then refuses once the body is read.)
        if not s.children():
            head = _refused_before_body(s)
            assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head.lower(), head
            assert b'"overloaded"' in head
        status, body, retry = await _publish(http, s)
        assert (status, body["error"]["code"], retry) == (503, "overloaded", "1"), body

        # The waiting ones are answered within the store's timeout: the outcome unknown.
        for status, body, retry in await asyncio.gather(*waiting):
            assert status == 503 and body["error"]["code"] == COMMIT_TIMEOUT and retry is not None, body
        m = await _metrics(http, s)
        # Still held by the store, still counted: what waits stays within the cap.
        assert m["tidings_publish_waiting_requests"] == CAP
        assert m['tidings_publish_refused_total{reason="commit_timeout"}'] == CAP
        assert m["tidings_store_stalled"] == 1 and m["tidings_store_oldest_commit_age_seconds"] > 0.3
        status, body, retry = await _publish(http, s)
        assert (status, body["error"]["code"], retry) == (503, "overloaded", "1"), body

        # A stream publisher is not refused but given no credit: nothing it sends is read
        # (nor queued) while the caps are full, and all of it is stored once there is room.
        ws = await http.ws_connect(s.url.replace("http://", "ws://") + "/v1/stream",
                                   headers={"authorization": f"Bearer {s.admin_token}"})
        for ref in range(20):
            await ws.send_str(json.dumps({"op": "publish", "ref": ref,
                                          "event": {"namespace": NS, "data": {"Nat": ref}}}))
        with pytest.raises(TimeoutError):
            await ws.receive(timeout=1.0)
        assert (await _metrics(http, s))["tidings_publish_waiting_requests"] == CAP

        control.unlink()
        answered: list[int] = []
        while len(answered) < 20:
            m = json.loads((await ws.receive(timeout=30)).data)
            assert m["op"] == "results" and all("Ok" in r for r in m["results"]), m
            answered += m["refs"]
        assert answered == list(range(20))
        await ws.close()
        await eventually(lambda: _ready_is(http, s, 200), timeout=20)
        assert (await _publish(http, s))[0] == 200
        m = await _metrics(http, s)
        assert m["tidings_publish_waiting_requests"] == 0 and m["tidings_store_stalled"] == 0
        assert m["tidings_store_commit_seconds_count"] >= CAP + 2
    log = (s.data_dir / "server.log").read_text()
    assert log.count("has not committed for") == 1 and log.count("commits again after a stall") == 1, log


async def _ready_is(http: aiohttp.ClientSession, s: ServerProcess, status: int) -> bool:
    return await _ready(http, s) == status


async def _waiting_is(http: aiohttp.ClientSession, s: ServerProcess, n: int) -> bool:
    return (await _metrics(http, s)).get("tidings_publish_waiting_requests") == n


# -- clear causes (the embedded store's folder) -----------------------------------------------


def test_each_cause_is_named_with_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "data" / "tidings.db"
    sqlite_says = sqlite3.OperationalError("unable to open database file")
    assert disk_cause(db, sqlite_says).startswith(f"the folder does not exist: {db.parent} (")
    for number, words in [(errno.EROFS, "the filesystem is read-only"), (errno.ENOSPC, "the disk is full"),
                          (errno.EACCES, "permission denied"), (errno.ENOENT, "the folder does not exist")]:
        said = disk_cause(db, OSError(number, os.strerror(number)))
        assert said.startswith(words) and str(db.parent) in said, said
    assert disk_cause(db, sqlite3.OperationalError("database or disk is full")).startswith("the disk is full")
    (tmp_path / "data").mkdir()
    read_only = os.statvfs(tmp_path)
    monkeypatch.setattr(os, "statvfs", lambda _p: _Statvfs(read_only, os.ST_RDONLY))
    assert disk_cause(db, sqlite_says).startswith(f"the filesystem is read-only: {db.parent}")
    monkeypatch.setattr(os, "statvfs", lambda _p: _Statvfs(read_only, 0, bavail=0))
    assert disk_cause(db, sqlite3.OperationalError("disk I/O error")).startswith("the disk is full")


class _Statvfs:
    def __init__(self, real: os.statvfs_result, flag: int, bavail: int = 1000) -> None:
        self.f_flag = real.f_flag | flag
        self.f_bavail = bavail


def test_a_data_folder_that_cannot_be_made_is_one_line_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = subprocess.run([sys.executable, "-m", "tidings", "serve", "--port", "0", "--data-dir", str(blocker / "x")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "a part of the path is not a folder" in lines[0] and str(blocker / "x") in lines[0]


@pytest.mark.parametrize(("number", "said"), [
    (errno.ENOSPC, "the disk is full"), (errno.EROFS, "the filesystem is read-only"), (errno.EIO, "disk I/O error"),
])
async def test_a_disk_that_fails_while_running_is_one_line_with_its_cause_and_folder(
    tmp_path: Path, shim: Path, number: int, said: str,
) -> None:
    """Commits that start failing while the server runs (the shim's fsync fails with
    ``number``, and statvfs shows what that means) are one log line naming the cause and
    the folder, refusals naming it meanwhile, and one line when commits work again; nothing
    acknowledged is lost, nothing refused is stored."""
    control = tmp_path / "fail"
    data = tmp_path / "data"
    data.mkdir()
    s = ServerProcess(data, env={"LD_PRELOAD": str(shim), FAIL_FILE_ENV: str(control), "TIDINGS_WORKERS": "1"})
    s.start(new_port_if_taken=True)
    try:
        async with aiohttp.ClientSession(connector=_client()) as http:
            async with http.post(f"{s.url}/v1/icrc72_register_publication", data=json.dumps([{"namespace": NS}]),
                                 headers={"authorization": f"Bearer {s.admin_token}"}) as r:
                assert r.status == 200
            assert (await _publish(http, s, 1))[0] == 200
            control.write_text(str(number))
            for i in range(3):
                # Refused item by item as a batch that took no effect, with the cause: the
                # SDK publishes it again (docs/wire-format.md, GenericBatchError).
                status, body, _ = await _publish(http, s, 10 + i)
                (item,) = body
                assert status == 200 and said in item["Err"]["GenericBatchError"], body
            control.unlink()
            status, body, _ = await _publish(http, s, 2)
            assert status == 200 and "Ok" in body[0], body
    finally:
        s.stop()
    log = (s.data_dir / "server.log").read_text()
    lines = [line for line in log.splitlines() if "cannot commit" in line]
    assert len(lines) == 1, log  # once for the episode, not once per commit
    assert said in lines[0] and str(data) in lines[0], lines[0]
    assert log.count("commits again after") == 1, log
    # What was acknowledged is there, and only that (the refused ones were not stored).
    conn = sqlite3.connect(f"file:{data / 'tidings.db'}?mode=ro", uri=True)
    try:
        stored = [r[0] for r in conn.execute("SELECT data FROM events WHERE namespace = ? ORDER BY id", (NS,))]
    finally:
        conn.close()
    assert [json.loads(d) for d in stored] == [{"Nat": 1}, {"Nat": 2}]


# -- a real server on a PostgreSQL that is paused ----------------------------------------------


@pytest.fixture
def paused_pg(tmp_path: Path) -> Iterator[tuple[ServerProcess, Callable[[bool], None]]]:
    """A server on a throwaway PostgreSQL cluster of its own, and a switch that pauses
    (SIGSTOP) or resumes (SIGCONT) every process of that cluster."""
    psutil = pytest.importorskip("psutil")
    from bench.chaos._pg import PgNode, base_dir

    try:
        node = PgNode(base_dir("tidings-overload-pg-") / "primary")
        node.init()
        node.start()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"no throwaway PostgreSQL cluster here: {e}")
    stopped: list[Any] = []

    def pause(on: bool) -> None:
        if on:
            pid = int((node.data / "postmaster.pid").read_text().split()[0])
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                p.send_signal(signal.SIGSTOP)
                stopped.append(p)
        else:
            while stopped:
                with contextlib.suppress(psutil.Error):
                    stopped.pop().send_signal(signal.SIGCONT)

    data = tmp_path / "data"
    data.mkdir()
    s = ServerProcess(data, env={
        "TIDINGS_STORE": node.dsn, "TIDINGS_WORKERS": "1", "TIDINGS_MAX_WAITING_REQUESTS": str(CAP),
        "TIDINGS_STORE_TIMEOUT_S": "4", "TIDINGS_STORE_STALL_S": "0.3",
    })
    try:
        s.start(new_port_if_taken=True)
        yield s, pause
    finally:
        pause(False)
        s.stop()
        node.destroy()


async def test_a_paused_postgresql_is_shed_told_and_recovered(
    paused_pg: tuple[ServerProcess, Callable[[bool], None]],
) -> None:
    s, pause = paused_pg
    async with aiohttp.ClientSession(connector=_client()) as http:
        async with http.post(f"{s.url}/v1/icrc72_register_publication", data=json.dumps([{"namespace": NS}]),
                             headers={"authorization": f"Bearer {s.admin_token}"}) as r:
            assert r.status == 200
        assert (await _publish(http, s))[0] == 200
        pause(True)
        waiting = [asyncio.create_task(_publish(http, s, i)) for i in range(CAP)]
        await eventually(lambda: _waiting_is(http, s, CAP), timeout=20)
        status, body, retry = await _publish(http, s)
        assert (status, body["error"]["code"], retry) == (503, "overloaded", "1"), body
        # Unready once the oldest wait is older than TIDINGS_STORE_STALL_S (0.3 s here).
        await eventually(lambda: _ready_is(http, s, 503), timeout=2)
        async with http.get(f"{s.url}/readyz") as r:
            assert r.status == 503 and r.headers.get("Retry-After")
            assert any("commits are stalled" in p for p in (await r.json())["problems"])
        # /metrics answers while the store does not (it waits for the stored gauges only a
        # moment, 0.25 s): the stall's figures are there when they are wanted.
        async with http.get(f"{s.url}/metrics", timeout=aiohttp.ClientTimeout(total=1.5)) as r:
            m = gauges(await r.text())
        assert m["tidings_store_stalled"] == 1 and m["tidings_publish_waiting_requests"] == CAP
        for status, body, retry in await asyncio.gather(*waiting):
            # The commit's wait or the token's look-up ran out: either says when to retry.
            assert status == 503 and body["error"]["code"] in (COMMIT_TIMEOUT, "unavailable") and retry, body
        await asyncio.sleep(6)  # a pause longer than the background sweeps' period (5 s): they fail too
        pause(False)
        await eventually(lambda: _ready_is(http, s, 200), timeout=30)
        await eventually(lambda: _published(http, s), timeout=30)
    s.stop()
    log = (s.data_dir / "server.log").read_text()
    assert log.count("has not committed for") >= 1 and "commits again after a stall" in log, log
    # Every part of the server lived through the pause (a failed sweep is retried, not the
    # end of the replays' runner), and it stops cleanly.
    # (asyncpg's pool logs its own reconnection failures with a traceback: not ours.)
    assert s.exit_code == 0 and "unhandled errors in a TaskGroup" not in log, log


async def _published(http: aiohttp.ClientSession, s: ServerProcess) -> bool:
    return (await _publish(http, s))[0] == 200


async def test_a_process_that_did_not_run_does_not_blame_the_store() -> None:
    """SIGSTOP (or a paused VM) stops the clock of nothing: a commit that waited while its
    process was not running waited for the process, not the store. The watch sees its own
    check come late and takes that time off; a store that stays stuck afterwards is still
    a stall, a stall_s later."""
    clock = _Clock()
    o = Overload(Admission(1000, 10), store="s.db", timeout_s=60, stall_s=1.0, clock=clock)
    store: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    wait = asyncio.ensure_future(o.commit(store))
    await asyncio.sleep(0)
    clock.now += 15  # stopped for 15 s
    o.paused(15)
    assert not o.stalled() and o.problem() is None
    clock.now += 1.5  # running again, and the store still does not answer
    assert o.stalled()
    store.set_result(None)
    await wait
    assert not o.stalled()


async def test_the_watch_sees_its_own_lateness(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    o = Overload(Admission(1000, 10), store="s.db", timeout_s=60, stall_s=1.0, clock=clock)
    seen: list[float] = []
    monkeypatch.setattr(o, "paused", seen.append)
    real_sleep = asyncio.sleep

    async def sleep(s: float) -> None:  # each check 0.25 s after the last; the third 6 s late
        clock.now += s + (6.0 if len(ticks) == 2 else 0.0)
        ticks.append(s)
        await real_sleep(0)

    ticks: list[float] = []
    monkeypatch.setattr(asyncio, "sleep", sleep)
    task = asyncio.ensure_future(o.watch(0.25))
    while len(ticks) < 5:
        await real_sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert seen == [6.0]


async def test_a_pause_moves_no_commit_into_the_future() -> None:
    """A starved process runs a little before its late check: a commit done in that moment
    is not moved past now by the pause taken off, so a commit still stuck is a stall
    ``stall_s`` later, not ``stall_s`` plus the pause."""
    clock = _Clock()
    o = Overload(Admission(1000, 10), store="s.db", timeout_s=60, stall_s=1.0, clock=clock)
    loop = asyncio.get_running_loop()
    stuck: asyncio.Future[None] = loop.create_future()
    quick: asyncio.Future[None] = loop.create_future()
    waits = [asyncio.ensure_future(o.commit(stuck))]
    await asyncio.sleep(0)
    clock.now += 15  # the process did not run; then, before the watch's check, a commit ends
    waits.append(asyncio.ensure_future(o.commit(quick)))
    await asyncio.sleep(0)
    quick.set_result(None)
    await asyncio.sleep(0)
    o.paused(15)
    assert not o.stalled()
    clock.now += 1.5
    assert o.stalled()  # the stuck commit, 1.5 s after the process ran again
    stuck.set_result(None)
    await asyncio.gather(*waits)
