"""The configuration file (``tidings serve --config FILE``), ``tidings config show``, and
the log formats (docs/operations.md, "Settings", "Logs")."""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings._cli_ops import toml_string
from tidings.errors import ConfigError
from tidings.logs import FIELDS, JsonFormatter, scrub
from tidings.settings import Settings

FIELD_TYPES = {f.name: (f.type if isinstance(f.type, str) else f.type.__name__) for f in fields(Settings)}


def tidings(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TIDINGS_")}
    return subprocess.run([sys.executable, "-m", "tidings", *args], capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})})


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value == math.inf else "-inf" if value == -math.inf
                                                else repr(value))
    if isinstance(value, int):
        return str(value)
    return toml_string(value)


def env_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def values_for(kind: str) -> st.SearchStrategy[Any]:
    if kind == "int":
        # Around the bounds, and past 2^63 (TOML's own integers stop there; tomllib does not).
        return st.one_of(st.integers(-10, 70_000), st.integers(-(2**70), 2**70))
    if kind == "float":
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-10, 1e4))
    if kind == "bool":
        return st.booleans()
    return st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)


@st.composite
def one_setting(draw: st.DrawFn) -> tuple[str, Any]:
    name = draw(st.sampled_from(sorted(FIELD_TYPES)))
    return name, draw(values_for(FIELD_TYPES[name]))


def outcome(load: Any) -> Any:
    try:
        return load()
    except ConfigError:
        return "refused"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(setting=one_setting())
def test_every_setting_takes_the_same_values_and_bounds_in_the_file_as_in_the_environment(
    setting: tuple[str, Any], tmp_path: Path
) -> None:
    name, value = setting
    path = tmp_path / "tidings.toml"
    path.write_text(f"{name} = {toml_value(value)}\n", encoding="utf-8")
    from_file = outcome(lambda: Settings.load(path, env={})[0])
    from_env = outcome(lambda: Settings.load(None, env={f"TIDINGS_{name.upper()}": env_value(value)})[0])
    if isinstance(from_file, Settings) and isinstance(from_env, Settings):
        a, b = getattr(from_file, name), getattr(from_env, name)
        assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
    else:
        assert from_file == from_env == "refused", (from_file, from_env)


def test_the_environment_overrides_the_file_and_flags_override_both(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('port = 9000\nhost = "0.0.0.0"\nmax_attempts = 3\n')
    s, sources = Settings.load(path, env={"TIDINGS_PORT": "9001", "TIDINGS_HOST": "127.0.0.2"}, host="127.0.0.3")
    assert (s.port, s.host, s.max_attempts) == (9001, "127.0.0.3", 3)
    assert sources == {"port": "env TIDINGS_PORT", "host": "command line", "max_attempts": f"file {path}"}


def test_config_show_prints_every_setting_with_its_source_and_masks_secrets(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('store = "postgresql://tid:hunter2pw@db.example/tidings"\nxmpp_secret = "componentpw"\n'
                    "max_attempts = 7\n")
    out = tidings("config", "show", "--config", str(path), env={"TIDINGS_PORT": "9100"})
    assert out.returncode == 0, out.stderr
    assert "hunter2pw" not in out.stdout and "componentpw" not in out.stdout
    lines = {line.split(" = ")[0]: line for line in out.stdout.splitlines() if " = " in line}
    assert set(lines) == set(FIELD_TYPES)  # every setting
    assert lines["port"] == "port = 9100  # env TIDINGS_PORT"
    assert lines["max_attempts"] == f"max_attempts = 7  # file {path}"
    assert lines["store"] == f'store = "postgresql://tid@db.example/tidings"  # file {path}, masked'
    assert lines["xmpp_secret"] == f'xmpp_secret = "***"  # file {path}, masked'
    assert lines["workers"] == "workers = 0  # default"
    # What it prints is a config file that gives the same settings back (secrets aside).
    again = tmp_path / "again.toml"
    again.write_text("\n".join(v for k, v in lines.items() if k not in Settings.secret_fields()) + "\n")
    assert Settings.load(again, env={})[0] == Settings.load(path, env={"TIDINGS_PORT": "9100"})[0].replace(
        store="", xmpp_secret="")


@pytest.mark.parametrize(("content", "words"), [
    (b'port = 80\nhost = "127.0', "not valid TOML"),  # truncated
    (b"port = \xff\xfe\n", "not UTF-8"),
    (b"prot = 8080\n", "unknown setting 'prot'; did you mean 'port'"),
    (b"TIDINGS_PORT = 8080\n", "did you mean 'port'"),
    (b'port = "8080"\n', "port must be an integer"),
    (b"port = 80000\n", "out of range"),
    (b"max_attempts = 100000000000000000000000\n", "out of range"),
    (b"lease_s = 1e400\n", "out of range"),
    (b"[tidings]\nport = 1\n", "unknown setting 'tidings'"),
    (b'log_format = "xml"\n', "use text, json"),
    (b"port = 1\n" + b"#" * (1 << 20), "larger than"),
])
def test_a_bad_config_file_is_refused_at_start_with_one_line_and_nothing_made(
    tmp_path: Path, content: bytes, words: str
) -> None:
    path = tmp_path / "t.toml"
    path.write_bytes(content)
    data = tmp_path / "data"
    out = tidings("serve", "--config", str(path), "--data-dir", str(data))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert words in out.stderr
    assert not data.exists()  # the store is as it was: not even made


def test_config_paths_that_are_not_a_plain_file_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text("port = 1\n")
    (tmp_path / "link.toml").symlink_to(real)
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "dir.toml").mkdir()
    cases = {"link.toml": "symbolic link", "fifo.toml": "not a regular file", "dir.toml": "not a regular file",
             "none.toml": "no config file"}
    for name, words in cases.items():
        out = tidings("config", "show", "--config", str(tmp_path / name))
        assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, (name, out.stderr)


def test_the_scrub_removes_credentials_of_every_shape() -> None:
    lines = {
        "token tid_AbCdEfGh12345678_-xyz refused": "token tid_*** refused",
        "secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw= set": "secret whsec_*** set",
        "authorization: Bearer abcdefgh.ijklmnop": "authorization: Bearer ***",
        "cannot open postgresql://tidings:hunter2@db:5432/x": "cannot open postgresql://tidings:***@db:5432/x",
        "dsn host=db password=hunter2 user=x": "dsn host=db password=*** user=x",
        "nothing secret here, tid_ short": "nothing secret here, tid_ short",
    }
    for line, want in lines.items():
        assert scrub(line) == want


def test_a_json_log_line_has_the_stable_fields_and_no_credential() -> None:
    try:
        raise ValueError("bad token tid_AbCdEfGh12345678")
    except ValueError:
        record = logging.LogRecord("tidings.x", logging.ERROR, __file__, 1, "failed for %s", ("tid_ZyXwVuT987654",),
                                   sys.exc_info())
    line = JsonFormatter("broker").format(record)
    doc = json.loads(line)
    assert set(doc) == set(FIELDS)
    assert doc["level"] == "error" and doc["logger"] == "tidings.x" and doc["process"] == "broker"
    assert doc["message"] == "failed for tid_***"
    assert "ValueError: bad token tid_***" in doc["exception"]
    assert "AbCdEfGh" not in line and "ZyXwVuT" not in line
    time.strptime(doc["time"][:19], "%Y-%m-%dT%H:%M:%S")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_with_a_config_file_in_json_logs_writes_only_json_lines(tmp_path: Path) -> None:
    """The broker and a front process, configured from the file alone, log JSON lines."""
    port = _free_port()
    path = tmp_path / "t.toml"
    path.write_text(f'port = {port}\ndata_dir = "{tmp_path / "data"}"\nworkers = 2\nlog_format = "json"\n'
                    'log_level = "debug"\n')
    log = tmp_path / "out.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith("TIDINGS_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tidings", "serve", "--config", str(path)],
                                stdout=out, stderr=subprocess.STDOUT, env=base)
    try:
        deadline = time.monotonic() + 30
        while f"listening on http://127.0.0.1:{port}" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        # Requests HTTP cannot parse make the server's HTTP layer (uvicorn's protocol,
        # tidings.http1) log a line at debug, in whichever process took the connection:
        # its lines are JSON too.
        for _ in range(6):
            with socket.create_connection(("127.0.0.1", port)) as c:
                c.sendall(b"NOT HTTP AT ALL tid_LeakedTokenValue1234\r\n\r\n")
                c.recv(1024)
        deadline = time.monotonic() + 10
        while "refused before the app" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(20)
    lines = log.read_text().splitlines()
    assert len(lines) >= 5
    for line in lines:
        doc = json.loads(line)
        assert {"time", "level", "logger", "message", "process", "pid"} <= set(doc) <= set(FIELDS), doc
    assert any(json.loads(line)["message"].startswith("tidings ") for line in lines)
    assert any("refused before the app" in json.loads(line)["message"] for line in lines)
    assert (tmp_path / "data" / "tidings.db").exists()  # the data folder came from the file


def test_a_start_that_fails_says_why_in_a_json_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # With front processes tidings binds the port itself; alone, uvicorn does.
        for workers in ("2", "1"):
            out = tidings("serve", "--port", str(port), "--data-dir", str(tmp_path / "d"),
                          env={"TIDINGS_LOG_FORMAT": "json", "TIDINGS_WORKERS": workers})
            assert out.returncode != 0, out.stderr
            docs = [json.loads(line) for line in (out.stdout + out.stderr).splitlines()]
            assert any(d["level"] == "error" and str(port) in d["message"] for d in docs), docs
