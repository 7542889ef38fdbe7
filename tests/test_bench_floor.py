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
    got = {(r["system"], r["details"]["floor"]) for r in rows if r["figures"]}
    want = {(k, f) for k in SERVERS for f in ("http-latency", "http-one-event", "ws-latency")}
    assert got == want | {("uvicorn", "http-relay-cpu")}


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
