"""A front process's own refusals and holdings reach ``/metrics`` (docs/operations.md,
"Overload and a stalling store"): the fronts report them to their broker every second,
and a scrape, whichever process answers it, shows them beside the broker's."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from bench.stall import gauges

from .conftest import ServerProcess, eventually

pytestmark = pytest.mark.e2e

NS = "front.metrics"
CAP = 2
SLOW = 20
"""Publishes whose body never comes, each on a connection of its own: the kernel spreads
them over the broker and its front, and each holds its process's cap (2) full."""


@pytest.fixture
def two_processes(tmp_path: Path) -> Iterator[ServerProcess]:
    data = tmp_path / "data"
    data.mkdir()
    s = ServerProcess(data, env={"TIDINGS_WORKERS": "2", "TIDINGS_MAX_WAITING_REQUESTS": str(CAP)})
    s.start(new_port_if_taken=True)
    try:
        yield s
    finally:
        s.stop()


async def _held(s: ServerProcess) -> asyncio.StreamWriter:
    """A publish whose headers declare a body that never comes."""
    _, w = await asyncio.open_connection("127.0.0.1", s.port)
    w.write((f"POST /v1/icrc72_publish HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {s.admin_token}\r\n"
             "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode())
    await w.drain()
    return w


async def test_a_front_s_own_refusals_and_holdings_are_in_metrics(two_processes: ServerProcess) -> None:
    s = two_processes
    assert s.children(), "a front process runs beside the broker"
    held = [await _held(s) for _ in range(SLOW)]
    try:
        refused = 0
        body = json.dumps([{"namespace": NS, "data": {"Nat": 1}}])

        async def probe() -> None:  # on a new connection: to the broker or to the front
            nonlocal refused
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
                async with http.post(f"{s.url}/v1/icrc72_publish", data=body,
                                     headers={"authorization": f"Bearer {s.admin_token}"}) as r:
                    answer = await r.json()
                    assert r.status == 503 and answer["error"]["code"] == "overloaded" and r.headers["Retry-After"]
                    refused += 1

        async def shown() -> dict[str, float] | None:
            await asyncio.gather(*(probe() for _ in range(5)))
            async with aiohttp.ClientSession() as http, http.get(f"{s.url}/metrics") as r:
                m = gauges(await r.text())
            front = m.get('tidings_front_refused_total{reason="requests"}', 0)
            broker = m.get('tidings_publish_refused_total{reason="requests"}', 0)
            # Every refusal of the run is counted once, by the process that made it.
            if front >= 1 and front + broker >= refused and m.get("tidings_front_waiting_requests") == CAP:
                return m
            return None

        m = await eventually(shown, timeout=10, interval=0.25)
        assert m['tidings_front_refused_total{reason="broker_unreachable"}'] == 0
        assert m["tidings_front_waiting_bytes"] == CAP * 100
    finally:
        for w in held:
            w.close()
        for w in held:
            with contextlib.suppress(OSError):
                await w.wait_closed()
    # Let go: the front's gauges come back to nothing with its next report.
    async def let_go() -> bool:
        async with aiohttp.ClientSession() as http, http.get(f"{s.url}/metrics") as r:
            return gauges(await r.text()).get("tidings_front_waiting_requests") == 0

    await eventually(let_go, timeout=10)
