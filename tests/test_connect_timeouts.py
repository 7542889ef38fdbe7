"""Waits end, and say why: the CLI and the service pointed at a dependency that is not
there (a closed port) or does not answer (a port that takes the connection and says
nothing) end, or log once, with a message naming the address without its password and
the setting that changes the timeout (TIDINGS_CONNECT_TIMEOUT_S)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings.core.addresses import CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT_S, connect_timeout_s, unreachable
from tidings.settings import Settings

from .conftest import free_port
from .test_pipeline_source import make_store

SETTING = "TIDINGS_CONNECT_TIMEOUT_S"
PASSWORD = "s3cret-pw"


@pytest.fixture
def closed() -> int:
    """A port nothing listens on."""
    return free_port()


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that takes connections (the kernel completes them) and never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


def run(args: list[str], *, timeout_s: float = 1.0, cwd: Path | None = None) -> tuple[int, str, float]:
    """The CLI, its exit status, its output and how long it took."""
    env = {**os.environ, CONNECT_TIMEOUT_ENV: str(timeout_s), "TIDINGS_STORE_TIMEOUT_S": str(max(timeout_s, 0.5)),
           "TIDINGS_WORKERS": "1"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tidings", *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=cwd)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def told(out: str, address: str) -> None:
    assert "cannot connect to" in out and address in out and SETTING in out, out
    assert PASSWORD not in out and "Traceback" not in out, out


def until_logged(args: list[str], log: Path, needle: str, *, timeout_s: float = 1.0, within_s: float = 20) -> str:
    """A long-running command (a server), until ``needle`` is in its output; then stopped."""
    env = {**os.environ, CONNECT_TIMEOUT_ENV: str(timeout_s), "TIDINGS_WORKERS": "1", "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tidings", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
        try:
            deadline = time.monotonic() + within_s
            while time.monotonic() < deadline and needle not in log.read_text():
                time.sleep(0.1)
            time.sleep(3 * timeout_s)  # more tries: still told once
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return log.read_text()


def test_the_setting_has_one_default_and_one_bound() -> None:
    assert Settings().connect_timeout_s == DEFAULT_CONNECT_TIMEOUT_S == connect_timeout_s({})
    assert connect_timeout_s({CONNECT_TIMEOUT_ENV: "2.5"}) == Settings.from_env({SETTING: "2.5"}).connect_timeout_s
    for bad in ("0", "nan", "1e9", "soon"):
        with pytest.raises(ValueError, match=SETTING):
            connect_timeout_s({CONNECT_TIMEOUT_ENV: bad})
    text = unreachable("PostgreSQL", f"postgresql://u:{PASSWORD}@h:1/d", 3, f"auth {PASSWORD} failed")
    assert PASSWORD not in text and "postgresql://u@h:1/d" in text and "3 s" in text and SETTING in text


@pytest.mark.parametrize("which", ["closed", "silent"])
def test_spark_connect(tmp_path: Path, which: str, request: pytest.FixtureRequest) -> None:
    port = request.getfixturevalue(which)
    make_store(tmp_path / "var", {"a": 1})
    code, out, took = run(["pipeline", "stats", "--master", f"sc://127.0.0.1:{port}/;token={PASSWORD}",
                           "--data-dir", str(tmp_path / "var"), "--quiet"])
    assert code == 2 and took < 20, (code, took, out)
    told(out, f"Spark Connect at sc://127.0.0.1:{port}")
    assert out.startswith("connect_unreachable: ")


@pytest.mark.parametrize("which", ["closed", "silent"])
def test_postgresql_store_of_the_server(tmp_path: Path, which: str, request: pytest.FixtureRequest) -> None:
    """The server's store has its own bound on every wait, connecting included:
    TIDINGS_STORE_TIMEOUT_S (docs/operations.md, "PostgreSQL: timeouts")."""
    pytest.importorskip("asyncpg")
    port = request.getfixturevalue(which)
    code, out, took = run(["serve", "--port", "0", "--data-dir", str(tmp_path),
                           "--store", f"postgresql://tidings:{PASSWORD}@127.0.0.1:{port}/db"])
    assert code == 2 and took < 20, (code, took, out)
    assert f"PostgreSQL at postgresql://tidings@127.0.0.1:{port}/db" in out and "TIDINGS_STORE_TIMEOUT_S" in out, out
    assert PASSWORD not in out and "Traceback" not in out, out


@pytest.mark.parametrize("which", ["closed", "silent"])
def test_postgresql_store_of_the_pipeline(which: str, request: pytest.FixtureRequest) -> None:
    pytest.importorskip("adbc_driver_postgresql")
    port = request.getfixturevalue(which)
    code, out, took = run(["pipeline", "stats", "--data-dir", f"postgresql://tidings:{PASSWORD}@127.0.0.1:{port}/db",
                           "--quiet"])
    assert code == 2 and took < 20, (code, took, out)
    told(out, f"PostgreSQL at postgresql://tidings@127.0.0.1:{port}/db")


def _distributor_config(tmp_path: Path, networks: list[dict[str, object]]) -> Path:
    path = tmp_path / "ied.json"
    path.write_text(json.dumps({"port": free_port(), "sqlite": str(tmp_path / "ied.db"), "networks": networks}))
    return path


@pytest.mark.parametrize("which", ["closed", "silent"])
def test_redis_state_of_the_distributor(tmp_path: Path, which: str, request: pytest.FixtureRequest) -> None:
    port = request.getfixturevalue(which)
    config = _distributor_config(tmp_path, [{"name": "R", "kind": "redis", "stream": "unused"}])
    code, out, took = run(["distributor", "serve", "--config", str(config),
                           "--redis", f"redis://:{PASSWORD}@127.0.0.1:{port}/0"])
    assert code == 2 and took < 20, (code, took, out)
    told(out, f"Redis (the distributor's state) at redis://@127.0.0.1:{port}/0")


@pytest.mark.parametrize("kind", ["jetstream", "redis"])
@pytest.mark.parametrize("which", ["closed", "silent"])
def test_network_of_the_distributor(tmp_path: Path, which: str, kind: str, request: pytest.FixtureRequest) -> None:
    """A network that is away is no reason to stop serving: the distributor logs once why
    following it failed, and keeps trying with back-off."""
    port = request.getfixturevalue(which)
    scheme, what = ("nats", "NATS") if kind == "jetstream" else ("redis", "Redis")
    config = _distributor_config(tmp_path, [{"name": "N", "kind": kind,
                                              "url": f"{scheme}://tidings:{PASSWORD}@127.0.0.1:{port}"}])
    out = until_logged(["distributor", "serve", "--config", str(config)], tmp_path / "log", "following N failed")
    assert out.count("following N failed") == 1, out
    told(out, f"{what} at {scheme}://tidings@127.0.0.1:{port}")


@pytest.mark.parametrize("which", ["closed", "silent"])
def test_xmpp_server_of_the_service(tmp_path: Path, which: str, request: pytest.FixtureRequest) -> None:
    pytest.importorskip("slixmpp")
    port = request.getfixturevalue(which)
    env_before = dict(os.environ)
    os.environ.update({"TIDINGS_XMPP_COMPONENT": "t.localhost", "TIDINGS_XMPP_PORT": str(port),
                       "TIDINGS_XMPP_SECRET": PASSWORD})
    try:
        out = until_logged(["serve", "--port", "0", "--data-dir", str(tmp_path)], tmp_path / "log",
                           "cannot connect to the XMPP server")
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    assert out.count("cannot connect to the XMPP server") == 1, out
    told(out, f"the XMPP server at 127.0.0.1:{port}")


def test_webhook_endpoints_wait_the_setting(tmp_path: Path) -> None:
    """The broker's outbound calls (subscribers' endpoints, authorisation URLs) take
    their connect timeout from the same setting (it was a fixed 5 s)."""
    from tidings.broker import Broker
    from tidings.store import MemoryStore

    broker = Broker(Settings(connect_timeout_s=2.5, data_dir=tmp_path), MemoryStore())
    assert broker.outbound._connect_timeout_s == 2.5


def test_the_service_from_the_api_commands(closed: int, silent: int) -> None:
    """``tidings dead-letters|schema|replay ...`` call the service's API."""
    code, out, took = run(["dead-letters", "list", "--url", f"http://127.0.0.1:{closed}", "--token", PASSWORD])
    assert code == 2 and took < 20, (code, took, out)
    told(out, f"the tidings service at http://127.0.0.1:{closed}")


def test_dlt_network_of_the_distributor(tmp_path: Path, closed: int) -> None:
    config = _distributor_config(tmp_path, [{"name": "A", "kind": "dlt", "url": f"http://127.0.0.1:{closed}"}])
    out = until_logged(["distributor", "serve", "--config", str(config)], tmp_path / "log", "following A failed")
    assert out.count("following A failed") == 1, out
    told(out, f"the DLT adapter at http://127.0.0.1:{closed}")
