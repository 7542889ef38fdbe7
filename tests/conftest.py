"""Fixtures that start real servers: the tidings process and subscriber endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvicorn

from ._hang_dump import pytest_runtest_call
from ._speed import mark_slow
from .pg_support import pg_database, schema_address

__all__ = ["pg_database", "pytest_runtest_call"]


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects by the marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``slow`` marker, from the one table of slow tests and why (tests/_speed.py)."""
    mark_slow(items)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _PortTaken(RuntimeError):
    pass


@dataclass
class ServerProcess:
    """The real ``tidings serve`` process on a free port, restartable."""

    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    """How the last stop ended (the process's exit status; negative: a signal)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()

    def start(self, *, new_port_if_taken: bool = False) -> None:
        """Start and wait until it answers. With ``new_port_if_taken`` (a first start), a
        port that another process took since ``free_port`` chose it is traded for
        another; a restart keeps its port, as the tests' clients expect."""
        for _ in range(3 if new_port_if_taken else 1):
            try:
                return self._start()
            except _PortTaken:
                if not new_port_if_taken:
                    raise
                self.port = free_port()
        raise RuntimeError("no free port after three tries")

    def _start(self) -> None:
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        path = self.data_dir / "server.log"
        offset = path.stat().st_size if path.exists() else 0  # a restart appends to it
        log = open(path, "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidings", "serve", "--port", str(self.port), "--data-dir", str(self.data_dir)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
        self._log = log
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                log.close()
                text = path.read_bytes()[offset:].decode(errors="replace")
                if f"could not listen on 127.0.0.1:{self.port}" in text:
                    raise _PortTaken(text)
                raise RuntimeError(f"server exited: {text}")
            # Its own "listening" line, not merely an answer on the port: that could come
            # from whatever else holds it.
            if f"listening on http://127.0.0.1:{self.port}".encode() in path.read_bytes()[offset:]:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                    if (self.data_dir / "admin.token").exists():
                        return
            time.sleep(0.05)
        raise RuntimeError("server did not start in 20 s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        kids = self.children()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode
        # Its front processes die with it (PR_SET_PDEATHSIG), a moment later: until they
        # have, they hold the port, and a restart's readiness check could reach one.
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{k}").exists() for k in kids) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.proc = None
        self._log.close()
        assert_no_credentials(self.data_dir / "server.log", self.env)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def children(self) -> list[int]:
        """The server's child processes (its front processes, docs/scaling.md)."""
        if self.proc is None:
            return []
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                # The command may hold spaces and parentheses: the fields follow the last ")".
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid:
                    out.append(int(stat.parent.name))
        return out

    def restart(self, sig: int = signal.SIGTERM) -> None:
        self.stop(sig)
        self.start()

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "tidings", *args, "--data-dir", str(self.data_dir)],
            capture_output=True, check=True, text=True, timeout=30, env={**os.environ, **self.env},
        )
        return out.stdout.strip()


_CREDENTIAL_SHAPES = re.compile(
    r"\btid_[A-Za-z0-9_\-]{8,}|\bwhsec_[A-Za-z0-9+/=]{8,}|(?i:\bbearer\s+[A-Za-z0-9._~+/=\-]{8,})"
    r"|[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]*:(?!\*\*\*@)[^\s@/]+@"
)


def assert_no_credentials(log: Path, env: dict[str, str]) -> None:
    """No line of a server's log carries a token, a signing secret, an Authorization
    value or a password (docs/operations.md, "Logs"): checked on every stop of every
    server the tests start, so over every end-to-end test's logs."""
    text = log.read_text(errors="replace") if log.exists() else ""
    found = _CREDENTIAL_SHAPES.findall(text)
    token = log.parent / "admin.token"
    known = [token.read_text().strip()] if token.exists() else []
    known += [v for k, v in env.items() if k in ("TIDINGS_XMPP_SECRET",) and v]
    known += [p for v in env.values() for p in re.findall(r"://[^\s/:@]*:([^\s@/]+)@", v)]
    found += [k for k in known if k and k in text]
    assert not found, f"{log} carries credentials: {sorted(set(found))[:5]}"


@pytest.fixture
def server_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []
    on_postgresql = os.environ.get("TIDINGS_TEST_STORE") == "postgresql"

    def make(**env: str) -> ServerProcess:
        d = tmp_path / f"server{len(started)}"
        d.mkdir()
        if on_postgresql and "store" not in env:
            env["store"] = schema_address(request.getfixturevalue("pg_database"))
        s = ServerProcess(d, env={f"TIDINGS_{k.upper()}": v for k, v in env.items()})
        s.start(new_port_if_taken=True)
        started.append(s)
        return s

    yield make
    leaks = []
    for s in started:
        try:
            s.stop()
        except AssertionError as e:  # its log carried a credential: stop the others first
            leaks.append(e)
    if leaks:
        raise leaks[0]


@pytest.fixture
def server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    return server_factory(retry_initial_s="0.05", retry_max_s="0.2", ack_deadline_s="1")


class Endpoint:
    """A real HTTP server (uvicorn, in the test's loop) running an ASGI app on a free port."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.port = free_port()
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def start(self) -> None:
        # A handler a test holds (a slow subscriber) is cancelled at stop after a second:
        # uvicorn would otherwise wait for it, and a test that failed before releasing it
        # would hang in its teardown.
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                await self._task
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None


async def read_body(receive: Any) -> bytes:
    """The whole body of a raw ASGI HTTP request."""
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            return body


def _raw(s: str | bytes) -> bytes:
    return s if isinstance(s, bytes) else s.encode()


async def respond(
    send: Any,
    status: int = 200,
    body: bytes = b"null",
    headers: Iterable[tuple[str | bytes, str | bytes]] = (),
    content_type: str | None = "application/json",
) -> None:
    """Answer a raw ASGI HTTP request: ``content_type`` (none if None), then ``headers``."""
    raw = [] if content_type is None else [(b"content-type", content_type.encode())]
    raw += [(_raw(k), _raw(v)) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def admin_api(http: aiohttp.ClientSession, server: ServerProcess, method: str, arg: Any) -> Any:
    """A raw ``/v1/{method}`` call as the admin; asserts 200 and returns the decoded JSON answer."""
    async with http.post(
        f"{server.url}/v1/{method}", data=json.dumps(arg),
        headers={"authorization": f"Bearer {server.admin_token}"},
    ) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        return body


@pytest.fixture
async def endpoints() -> AsyncIterator[Callable[[Any], Any]]:
    made: list[Endpoint] = []

    async def make(app: Any, start: bool = True) -> Endpoint:
        ep = Endpoint(app)
        made.append(ep)
        if start:
            await ep.start()
        return ep

    yield make
    for ep in made:
        await ep.stop()


async def eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``check`` (sync or async) until it returns a truthy value."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole test session (it takes seconds to start)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tidings-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """One client session for a test's raw HTTP calls."""
    async with aiohttp.ClientSession() as s:
        yield s
