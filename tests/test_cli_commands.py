"""``tidings publish``, ``tail``, ``ls`` and ``stats`` end to end against a real server,
run as a user runs them (a subprocess), and their one-line errors (docs/cli.md)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tidings.client import SyncAdmin, SyncPublisher

from .cli_support import cli_env, start, tidings
from .conftest import ServerProcess, free_port

NS = "com.example.orders"


@pytest.fixture
def env(server: ServerProcess, tmp_path: Path) -> dict[str, str]:
    with SyncPublisher(server.url, server.admin_token) as pub:
        pub.register_publication(NS)
    return cli_env(server.url, server.admin_token, tmp_path / "config")


def subscriptions(server: ServerProcess) -> list[tuple[int, str]]:
    with SyncAdmin(server.url, server.admin_token) as admin:
        return [(s.id, s.endpoint or "") for s in admin.get_subscriptions()]


def wait_for(check: Callable[[], object], within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.05)


def test_publish_then_tail_sees_it_and_leaves_nothing(server: ServerProcess, env: dict[str, str]) -> None:
    tail = start("tail", NS, "--json", "--count", "2", env=env)
    wait_for(lambda: subscriptions(server))
    (sub,) = subscriptions(server)
    assert sub[1].startswith("stream:tail-")
    first = tidings("publish", NS, '{"total": 17, "items": ["a", "b"]}', "--header", "source=cli", env=env)
    assert (first.code, first.err_lines) == (0, []), first
    more = tidings("publish", NS, env=env, stdin=b'{"total": 18}\n')
    assert more.code == 0, more
    out, err = tail.communicate(timeout=30)
    assert tail.returncode == 0, err
    lines = [json.loads(x) for x in out.decode().splitlines()]
    assert [x["eventId"] for x in lines] == [int(first.out), int(more.out)]
    assert lines[0]["data"] == {"total": 17, "items": ["a", "b"]} and lines[0]["headers"]["source"] == "cli"
    assert lines[1]["data"] == {"total": 18}
    assert subscriptions(server) == []  # its own subscription is removed when it ends


def test_tail_human_lines_filter_skip_and_pattern(server: ServerProcess, env: dict[str, str]) -> None:
    tail = start("tail", "com.example.*", "--filter", "total > 10", "--skip", "2", "--count", "1", env=env)
    wait_for(lambda: subscriptions(server))
    for total in (5, 50, 60):  # ids 1 (filtered out), 2 (shown), 3 (skipped: odd)
        assert tidings("publish", NS, json.dumps({"total": total}), env=env).code == 0
    out, _ = tail.communicate(timeout=30)
    (line,) = out.decode().splitlines()
    assert line.endswith(f' {NS} #2 {{"total":50}}'), line


def test_ctrl_c_ends_tail_cleanly(server: ServerProcess, env: dict[str, str]) -> None:
    tail = start("tail", NS, env=env)
    wait_for(lambda: subscriptions(server))
    tail.send_signal(signal.SIGINT)
    _, err = tail.communicate(timeout=30)
    assert tail.returncode == 0 and b"Traceback" not in err, err
    assert subscriptions(server) == []


def test_killed_tail_subscription_ends_by_its_lease(server: ServerProcess, env: dict[str, str]) -> None:
    tail = start("tail", NS, "--lease", "1", env=env)
    wait_for(lambda: subscriptions(server))
    tail.kill()
    tail.communicate()
    assert subscriptions(server)  # not deleted by the command: it had no chance
    wait_for(lambda: not subscriptions(server))


def test_tail_from_replays_across_a_restart_then_continues_live(server: ServerProcess, env: dict[str, str]) -> None:
    assert tidings("publish", NS, env=env, stdin=b"".join(b'{"n": %d}\n' % i for i in range(1, 6))).code == 0
    server.restart()
    tail = start("tail", NS, "--from", "2", "--count", "7", "--json", env=env)
    wait_for(lambda: subscriptions(server))
    for i in range(6, 9):  # published while the replay may still run: each shown once, in order
        assert tidings("publish", NS, json.dumps({"n": i}), env=env).code == 0
    out, err = tail.communicate(timeout=60)
    assert tail.returncode == 0, err
    assert [json.loads(x)["eventId"] for x in out.decode().splitlines()] == list(range(2, 9))


def test_tail_reconnects_after_a_restart_without_repeats(server: ServerProcess, env: dict[str, str]) -> None:
    tail = start("tail", NS, "--count", "2", "--json", "--lease", "30", env=env)
    wait_for(lambda: subscriptions(server))
    assert tidings("publish", NS, '{"n": 1}', env=env).code == 0
    server.restart()
    assert tidings("publish", NS, '{"n": 2}', env=env).code == 0
    out, err = tail.communicate(timeout=60)
    assert tail.returncode == 0, err
    assert [json.loads(x)["data"]["n"] for x in out.decode().splitlines()] == [1, 2]


def test_ls_and_stats_tables_and_json_paged(server: ServerProcess, env: dict[str, str]) -> None:
    with SyncPublisher(server.url, server.admin_token) as pub:
        for i in range(5):
            pub.register_publication(f"com.example.more{i}")
    assert tidings("publish", NS, '{"x": 1}', env=env).code == 0
    paged = tidings("ls", "publications", "--json", "--page", "2", env=env)
    assert paged.code == 0, paged
    names = [json.loads(x)["namespace"] for x in paged.out.splitlines()]
    assert names == sorted([NS, *(f"com.example.more{i}" for i in range(5))])
    table = tidings("ls", "publications", env=env)
    assert table.out.splitlines()[0].split() == ["NAMESPACE", "STATS"] and "(6 publications)" in table.out
    for kind in ("subscriptions", "broadcasters", "schemas", "replays", "principals"):
        done = tidings("ls", kind, env=env)
        assert done.code == 0 and done.err_lines == [], done
        assert tidings("ls", kind, "--json", env=env).code == 0
    bob = server.cli("principal", "create", "bob")
    people = [json.loads(x) for x in tidings("ls", "principals", "--json", env=env).out.splitlines()]
    assert [(p["principal"], p["admin"]) for p in people] == [("admin", True), ("bob", False)]
    refused = tidings("ls", "principals", "--token", bob, env=env)
    assert refused.code == 1 and len(refused.err_lines) == 1 and "forbidden" in refused.err
    stats = tidings("stats", NS, "--json", env=env)
    assert json.loads(stats.out)["stats"]["icrc72:publication:stats:events"] == 1
    assert "icrc72:publication:stats:events" in tidings("stats", NS, env=env).out


def test_errors_are_one_line_with_the_code(server: ServerProcess, env: dict[str, str]) -> None:
    unknown = tidings("publish", "com.example.nothing", '{"a": 1}', env=env)
    assert unknown.code == 1 and len(unknown.err_lines) == 1 and "namespace_not_found" in unknown.err
    assert "register" in unknown.err  # what to do
    assert tidings("stats", "com.example.nothing", env=env).code == 1

    bob = server.cli("principal", "create", "bob")
    with SyncPublisher(server.url, server.admin_token) as pub:
        pub.register_publication("com.example.closed", {"icrc72:publication:publishers:allowed:list": ["admin"]})
    refused = tidings("publish", "com.example.closed", "--token", bob, env=env, stdin=b'{"a": 1}\n{"a": 2}\n')
    assert refused.code == 1 and refused.out == "", refused
    assert [x.split(":")[0:2] for x in refused.err_lines] == [["line 1", " Unauthorized"], ["line 2", " Unauthorized"]]
    assert bob not in refused.err + refused.out

    bad = tidings("publish", NS, env=env, stdin=b'{"a": 1}\n{"a": \n{"a": 3}\n')
    assert bad.code == 1 and len(bad.out.splitlines()) == 2, bad
    (line,) = bad.err_lines
    assert line.startswith("line 2: bad JSON")

    wrong = tidings("ls", "publications", "--token", "tid_not_a_token_at_all", env=env)
    assert wrong.code == 2 and len(wrong.err_lines) == 1 and "unauthenticated" in wrong.err

    port = free_port()
    for args in (("publish", NS, "{}"), ("tail", NS), ("ls", "publications"), ("stats", NS)):
        started = time.monotonic()
        gone = tidings(*args, "--url", f"http://127.0.0.1:{port}", env={**env, "TIDINGS_CONNECT_TIMEOUT_S": "2"})
        assert gone.code == 2 and len(gone.err_lines) == 1 and "unreachable" in gone.err, (args, gone)
        assert time.monotonic() - started < 30
        assert server.admin_token not in gone.err

    usage = tidings("publish", NS, "{}", "--header", "novalue", env=env)
    assert usage.code == 2 and len(usage.err_lines) == 1
    assert tidings("tail", "com.example.*", "--from", "1", env=env).code == 2


def test_publish_typed_form_and_conversion(server: ServerProcess, env: dict[str, str]) -> None:
    typed = tidings("publish", NS, '{"Map": [["total", {"Int": 17}]]}', "--typed", env=env)
    plain = tidings("publish", NS, '{"total": -3, "ok": true, "none": null, "f": 1.5}', env=env)
    assert typed.code == plain.code == 0
    tail = start("tail", NS, "--from", "1", "--count", "2", "--json", "--typed", env=env)
    out, _ = tail.communicate(timeout=30)
    got = [json.loads(x)["data"] for x in out.decode().splitlines()]
    assert got[0] == {"Map": [["total", {"Int": 17}]]}
    assert got[1] == {"Map": [["total", {"Int": -3}], ["ok", {"Bool": True}], ["none", {"Option": None}],
                              ["f", {"Float": 1.5}]]}


def test_a_terminal_that_does_not_read_holds_one_push_in_flight(server: ServerProcess, env: dict[str, str]) -> None:
    n = 3000
    tail = start("tail", NS, "--count", str(n), env=env)
    wait_for(lambda: subscriptions(server))
    lines = b"".join(b'{"i": %d, "pad": "%s"}\n' % (i, b"x" * 1000) for i in range(n))  # 3 MB: far past a pipe
    assert tidings("publish", NS, env=env, stdin=lines).code == 0

    def counts() -> tuple[int, int]:
        with SyncAdmin(server.url, server.admin_token) as admin:
            (s,) = admin.get_subscriptions()
        stats = dict(s.stats)
        return (stats["icrc72:subscription:stats:notifications"]["Nat"],
                stats["icrc72:subscription:stats:confirmations"]["Nat"])

    seen: list[tuple[int, int]] = []

    def settled() -> bool:  # nothing more is sent while the terminal does not read
        seen.append(counts())
        return len(seen) > 20 and seen[-1] == seen[-20]

    wait_for(settled, within=60)
    sent, confirmed = seen[-1]
    assert sent < n and sent - confirmed <= 100, seen[-1]  # one batch (TIDINGS_DELIVERY_BATCH_SIZE) at most
    out, err = tail.communicate(timeout=120)  # now read: everything follows, in order
    assert tail.returncode == 0, err
    assert [json.loads(x.split(" ", 3)[3])["i"] for x in out.decode().splitlines()] == list(range(n))


def test_tail_into_a_closed_pipe_ends_and_leaves_nothing(server: ServerProcess, env: dict[str, str]) -> None:
    assert tidings("publish", NS, env=env, stdin=b'{"n": 1}\n{"n": 2}\n{"n": 3}\n').code == 0
    p = subprocess.run(f"{sys.executable} -m tidings tail {NS} --from 1 | head -1", shell=True, env=env,
                       capture_output=True, timeout=60)
    assert p.stdout.decode().count("\n") == 1 and b"Traceback" not in p.stderr, p.stderr
    wait_for(lambda: not subscriptions(server))


def test_tail_ends_when_its_reader_leaves_though_no_write_fails(server: ServerProcess, env: dict[str, str]) -> None:
    """The reader of the pipe closes after the last event was written: no later write
    fails, so only the pipe itself can tell the tail its reader is gone."""
    ns = NS + ".reader"
    with SyncPublisher(server.url, server.admin_token) as pub:
        pub.register_publication(ns)
        tail = start("tail", ns, env=env)
        try:
            assert tail.stdout is not None
            wait_for(lambda: subscriptions(server))
            pub.publish(ns, [{"n": 1}])
            assert tail.stdout.readline()  # written and read: nothing more will be written
            tail.stdout.close()
            assert tail.wait(timeout=20) == 0
        finally:
            tail.kill()
            tail.wait()
            assert tail.stderr is not None
            tail.stderr.close()
    wait_for(lambda: not subscriptions(server))


def test_a_lease_ends_a_stream_subscription_nobody_listened_to_and_only_those(server: ServerProcess) -> None:
    import asyncio

    from tidings.client import Subscriber

    async def register(endpoint: str) -> int:
        s = Subscriber(lambda n: None, url=server.url, token=server.admin_token)
        try:
            return await s.subscribe(NS, endpoint, config={"tidings:subscription:leaseMs": 1000})
        finally:
            await s.close()

    with SyncPublisher(server.url, server.admin_token) as pub:
        pub.register_publication(NS)
    kept = asyncio.run(register(f"http://127.0.0.1:{free_port()}/"))  # not a stream: endpoint: the key does nothing
    asyncio.run(register("stream:never-listened"))
    wait_for(lambda: [i for i, _ in subscriptions(server)] == [kept])


def test_publish_run_again_with_the_same_key_stores_nothing_twice(server: ServerProcess, env: dict[str, str]) -> None:
    """A command whose answer was lost is finished safely by running it again with the same
    --key: every event is answered with the id it was first stored under."""
    ns = NS + ".keyed"
    with SyncPublisher(server.url, server.admin_token) as pub:
        pub.register_publication(ns)
    one = tidings("publish", ns, '{"n": 1}', "--key", "order-1", env=env)
    again = tidings("publish", ns, '{"n": 1}', "--key", "order-1", env=env)
    assert (one.code, again.code) == (0, 0) and one.out == again.out, (one, again)
    lines = b'{"n": 2}\n{"n": 3}\n'
    first = tidings("publish", ns, "--key", "run-7", env=env, stdin=lines)
    second = tidings("publish", ns, "--key", "run-7", env=env, stdin=lines)
    assert (first.code, second.code) == (0, 0) and first.out == second.out, (first, second)
    other = tidings("publish", ns, '{"n": 9}', "--key", "order-1", env=env)  # the key names another event
    assert other.code == 1 and "GenericError" in other.err, other
    bad = tidings("publish", ns, '{"n": 1}', "--key", "", env=env)
    assert bad.code == 2, bad
