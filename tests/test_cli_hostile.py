"""``tidings publish`` on hostile input: a 100 MB line, invalid UTF-8, a million lines on
stdin, each in bounded memory (the command's peak RSS, measured in the process itself)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings.client import SyncAdmin, SyncPublisher

from .cli_support import _MEASURED, Done, cli_env, tidings
from .conftest import ServerProcess

NS = "com.example.hostile"
HEADROOM_MIB = 60
"""Above the peak of a one-event publish: far below a 100 MB line held whole."""


@pytest.fixture
def env(server: ServerProcess, tmp_path: Path) -> dict[str, str]:
    with SyncPublisher(server.url, server.admin_token) as pub:
        pub.register_publication(NS)
    return cli_env(server.url, server.admin_token, tmp_path / "config")


def fed(args: list[str], env: dict[str, str], chunks: Iterator[bytes], out: Path) -> Done:
    """The command with ``chunks`` written to its stdin as they are made (never held whole here)."""
    with open(out, "wb") as sink:
        p = subprocess.Popen([sys.executable, "-c", _MEASURED, *args], stdin=subprocess.PIPE, stdout=sink,
                             stderr=subprocess.PIPE, env=env)
        assert p.stdin is not None and p.stderr is not None

        def feed() -> None:
            assert p.stdin is not None
            try:
                for c in chunks:
                    p.stdin.write(c)
            finally:
                p.stdin.close()

        writer = threading.Thread(target=feed)
        writer.start()
        err = p.stderr.read()
        p.wait(timeout=600)
        p.stderr.close()
        writer.join()
    return Done(p.returncode, out.read_text(), err.decode(errors="replace"))


def baseline(env: dict[str, str]) -> float:
    one = tidings("publish", NS, '{"n": 0}', env=env, measured=True)
    assert one.code == 0, one
    return one.maxrss_mib


def test_a_100_mb_line_is_refused_by_its_number_in_bounded_memory(
    server: ServerProcess, env: dict[str, str], tmp_path: Path
) -> None:
    base = baseline(env)

    def chunks() -> Iterator[bytes]:
        yield b'{"n": 1}\n{"big": "'
        for _ in range(100):
            yield b"a" * (1 << 20)
        yield b'"}\n{"n": 3}\n'

    done = fed(["publish", NS], env, chunks(), tmp_path / "out")
    assert done.code == 1, done.err
    assert len(done.out.split()) == 2
    (line,) = done.err_lines
    assert line.startswith("line 2: longer than") and "--max-line-bytes" in line
    assert done.maxrss_mib < base + HEADROOM_MIB, (done.maxrss_mib, base)


def test_invalid_utf8_is_refused_by_its_line(server: ServerProcess, env: dict[str, str]) -> None:
    done = tidings("publish", NS, env=env, stdin=b'{"a": "ok"}\n{"a": "\xff\xfe"}\n\xc3\n{"a": "\xc3\xa9"}\n')
    assert done.code == 1 and len(done.out.split()) == 2, done
    assert [x.split(":")[0] for x in done.err_lines] == ["line 2", "line 3"]
    assert "not UTF-8" in done.err_lines[0]
    argv = tidings("publish", NS, '{"a": "\udcff"}', env=env)  # an argument that was not UTF-8
    assert argv.code == 2 and "not UTF-8" in argv.err


def test_a_million_lines_on_stdin_in_bounded_memory(server: ServerProcess, env: dict[str, str], tmp_path: Path) -> None:
    base = baseline(env)
    n = 1_000_000

    def chunks() -> Iterator[bytes]:
        for start in range(0, n, 10_000):
            yield b"".join(b'{"n": %d}\n' % i for i in range(start, start + 10_000))

    done = fed(["publish", NS], env, chunks(), tmp_path / "ids")
    assert (done.code, done.err_lines) == (0, []), done.err[-2000:]
    ids = [int(x) for x in done.out.split()]
    assert ids == list(range(2, n + 2))  # the baseline's event was 1
    assert done.maxrss_mib < base + HEADROOM_MIB, (done.maxrss_mib, base)
    with SyncAdmin(server.url, server.admin_token) as admin:
        (pub,) = [p for p in admin.get_publications() if p.namespace == NS]
    assert dict(pub.stats)["icrc72:publication:stats:events"] == {"Nat": n + 1}
    print(f"a million lines: peak {done.maxrss_mib:.0f} MiB (one event: {base:.0f} MiB)")
