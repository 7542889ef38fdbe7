"""The floor row of ``python -m bench`` (issue 39, point 1): an empty ASGI app under
tidings' own server and under granian, answering the latency and one-event scenarios'
requests and one WebSocket message, and every tidings latency figure set against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.__main__ import main, table
from bench.floor import SERVERS, floor_server, http_latency, http_one_event, with_floor_ratios, ws_latency
from bench.suite import Row


@pytest.mark.parametrize("kind", sorted(SERVERS))
async def test_each_floor_server_answers_the_scenarios_requests(kind: str) -> None:
    async with floor_server(kind) as url:
        lat = await http_latency(url, 200.0, 0.3, 0.05)
        assert lat["received"] == lat["sent"] - 10  # the warm-up's 10 are not counted
        assert 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["p999_ms"]
        one = await http_one_event(url, 4, 0.3)
        assert one["events"] > 0
        ws = await ws_latency(url, 200.0, 0.3, 0.05)
        assert ws["received"] == ws["sent"] - 10


def test_tidings_figures_are_set_against_the_floor_of_their_transport() -> None:
    rows = [
        Row("floor", "uvicorn", "", "ms", {"p50": 0.5, "p99": 2.0, "p99.9": 4.0}, details={"floor": "http-latency"}),
        Row("floor", "uvicorn", "", "events/s", {"events/s": 8000.0}, details={"floor": "http-one-event"}),
        Row("floor", "uvicorn", "", "ms", {"p50": 0.25, "p99": 1.0, "p99.9": 2.0}, details={"floor": "ws-latency"}),
        Row("floor", "granian", "", "ms", {"p50": 9.0, "p99": 9.0, "p99.9": 9.0}, details={"floor": "http-latency"}),
        Row("latency", "tidings", "", "ms", {"p50": 2.0, "p99": 9.0, "p99.9": 12.0}),
        Row("latency", "NATS JetStream", "", "ms", {"p50": 0.3, "p99": 0.6, "p99.9": 1.0}),
        Row("stream-latency", "tidings", "", "ms", {"p50": 1.0, "p99": 3.0, "p99.9": 4.0}),
        Row("publish-1", "tidings", "", "events/s", {"events/s": 2000.0}),
        Row("publish-100", "tidings", "", "events/s", {"events/s": 90000.0}),
    ]
    with_floor_ratios(rows)
    assert rows[4].details["x_floor"] == {"p50": 4.0, "p99": 4.5, "p99.9": 3.0}  # against uvicorn's, not granian's
    assert rows[6].details["x_floor"] == {"p50": 4.0, "p99": 3.0, "p99.9": 2.0}  # the WebSocket floor
    assert rows[7].details["x_floor"] == {"events/s": 0.25}
    assert rows[5].details["x_floor"] == {"p50": 0.6, "p99": 0.3, "p99.9": 0.25}  # a peer's, for scale
    assert "x_floor" not in rows[8].details and "x_floor" not in rows[0].details
    assert "| 4.00 / 4.50 / 3.00 |" in table(rows)


def test_python_m_bench_only_floor_reports_both_servers(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(["--only", "floor", "--quick", "--seconds", "0.3", "--rate", "200", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    got = {(r["system"], r["details"].get("floor") or r["details"]["durable_floor"]) for r in rows if r["figures"]}
    want = {(k, f) for k in SERVERS for f in ("http-latency", "http-one-event", "ws-latency")}
    durable = {("durable", f) for f in ("http-one-event", "http-latency", "http-push-latency", "http-relay-cpu",
                                        "ws-push-latency")}
    assert got == want | {("uvicorn", "http-relay-cpu")} | durable


async def test_the_relay_floor_pushes_every_publish_and_counts_its_cpu() -> None:
    from bench.floor_cpu import relay_cpu

    d = await relay_cpu(200.0, 0.5)
    assert d["events"] >= 100 and d["cpu_s"] > 0 and d["server_ms"] > 0


def test_the_cpu_row_is_set_against_the_relay_floor() -> None:
    rows = [
        Row("floor", "uvicorn", "", "ms CPU per event", {"server": 0.3}, details={"floor": "http-relay-cpu"}),
        Row("cpu", "tidings", "", "ms CPU per event", {"server": 0.9}),
        Row("stream-cpu", "tidings", "", "ms CPU per event", {"server": 0.9}),
    ]
    with_floor_ratios(rows)
    assert rows[1].details["x_floor"] == {"server": 3.0}
    assert "x_floor" not in rows[2].details  # a WebSocket's floor is not HTTP's


async def test_the_durable_floor_answers_each_publish_only_once_it_is_committed(tmp_path: Path) -> None:
    """The durable floor pays for what a tidings publish pays for: a commit with
    ``synchronous=FULL`` before the answer. Every answer read finds its row on disk."""
    import asyncio
    import sqlite3
    import sys

    import aiohttp
    from bench._harness import free_port
    from bench.floor import serving

    db, port = tmp_path / "floor.db", free_port()
    answered = 0
    async with serving([sys.executable, "-m", "bench.floor_durable", "serve", str(port), str(db)], port,
                       "durable") as (url, _), aiohttp.ClientSession() as s:
        async def client() -> None:
            nonlocal answered
            for _ in range(40):
                async with s.post(f"{url}/v1/icrc72_publish", data=b'[{"namespace":"a","data":{"Nat":1}}]') as r:
                    assert await r.read() == b'[{"Ok":1}]'
                answered += 1
                at_least = answered
                with sqlite3.connect(db) as c:
                    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                    assert c.execute("SELECT COUNT(*) FROM events").fetchone()[0] >= at_least

        await asyncio.gather(*(client() for _ in range(4)))
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 160


async def test_the_durable_floor_over_websockets_pushes_each_committed_event_to_the_other_connection() -> None:
    from bench.floor_durable import _durable_server, ws_push_latency

    async with _durable_server() as (url, _):
        d = await ws_push_latency(url, 200.0, 0.5, 0.1)
    assert d["sent"] == 120 and d["received"] >= 95  # the warm-up's 20 are not counted
    assert 0 < d["p50_ms"] <= d["p99_ms"] <= d["p999_ms"]


async def test_the_durable_relay_measures_publish_to_push_and_its_cpu() -> None:
    from bench.floor_durable import durable_relay

    d = await durable_relay(200.0, 0.5)
    assert d["events"] >= 95 and d["cpu_s"] > 0 and d["server_ms"] > 0
    assert 0 < d["p50_ms"] <= d["p99_ms"] <= d["p999_ms"]


def test_figures_that_wait_for_a_commit_are_set_against_the_durable_floor() -> None:
    rows = [
        Row("floor", "uvicorn", "", "events/s", {"events/s": 10000.0}, details={"floor": "http-one-event"}),
        Row("floor", "durable", "", "events/s", {"events/s": 8000.0}, details={"durable_floor": "http-one-event"}),
        Row("floor", "durable", "", "ms", {"p50": 0.5, "p99": 1.0, "p99.9": 2.0},
            details={"durable_floor": "http-latency"}),
        Row("floor", "durable", "", "ms", {"p50": 1.0, "p99": 2.0, "p99.9": 4.0},
            details={"durable_floor": "http-push-latency"}),
        Row("floor", "durable", "", "ms CPU per event", {"server": 0.4}, details={"durable_floor": "http-relay-cpu"}),
        Row("publish-1", "tidings", "", "events/s", {"events/s": 4000.0}),
        Row("latency", "tidings", "", "ms", {"p50": 2.0, "p99": 5.0, "p99.9": 8.0}),
        Row("cpu", "tidings", "", "ms CPU per event", {"server": 0.8}),
        Row("stream-latency", "tidings", "", "ms", {"p50": 1.0, "p99": 3.0, "p99.9": 4.0}),
        Row("xmpp-latency", "tidings", "", "ms", {"p50": 1.0, "p99": 3.0, "p99.9": 4.0}),
    ]
    with_floor_ratios(rows)
    assert rows[5].details["x_floor"] == {"events/s": 0.4}  # the empty app's floor stays as it was
    assert rows[5].details["x_durable"] == {"events/s": 0.5}
    assert rows[6].details["x_durable"] == {"p50": 2.0, "p99": 2.5, "p99.9": 2.0}  # publish -> push, not the round trip
    assert rows[7].details["x_durable"] == {"server": 2.0}
    assert "x_durable" not in rows[8].details  # no WebSocket durable floor in this run
    assert "x_durable" not in rows[9].details and "x_floor" not in rows[1].details
    rows.insert(5, Row("floor", "durable", "", "ms", {"p50": 0.5, "p99": 1.5, "p99.9": 2.0},
                       details={"durable_floor": "ws-push-latency"}))
    with_floor_ratios(rows)
    assert rows[9].details["x_durable"] == {"p50": 2.0, "p99": 2.0, "p99.9": 2.0}
    line = next(x for x in table(rows).splitlines() if x.startswith("| publish-1"))
    assert [c.strip() for c in line.split("|")[-3:-1]] == ["0.40", "0.50"]
