"""Several broadcasters on one PostgreSQL database (docs/scaling.md): publish and fan-out
with 1, 2 and 3 broadcasters, and how long a killed broadcaster's subscriptions wait.

Each broadcaster is one process (``TIDINGS_WORKERS=1``): on this 2-core machine three
broadcasters and PostgreSQL already share two cores, so the rows show what the design
costs and where the bound is, not what more machines would add (docs/scaling.md models
that from these figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from bench._harness import Server, free_port, post
from bench._scenario import Row, Settings, _guard, _pg_store
from bench.live_plane import throughput
from bench.payloads import EVENT, FANOUT_SUBS

_ENV = {"TIDINGS_WORKERS": "1", "TIDINGS_HEARTBEAT_S": "0.5", "TIDINGS_LEASE_S": "2"}
_DEFAULTS = {"TIDINGS_WORKERS": "1"}  # the failover row: the default lease (5 s) and heartbeat (1 s)


@contextlib.contextmanager
def _broadcasters(n: int, store: dict[str, str], env: dict[str, str] = _ENV) -> Iterator[list[Server]]:
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as d, contextlib.ExitStack() as stack:
        first_dir = Path(d) / "b0"
        first = stack.enter_context(Server(first_dir, {**store, **env, "TIDINGS_BROADCASTER_ID": "b0"}))
        out = [first]
        for i in range(1, n):
            di = Path(d) / f"b{i}"
            di.mkdir()
            shutil.copy(first_dir / "admin.token", di / "admin.token")
            out.append(stack.enter_context(Server(di, {**store, **env, "TIDINGS_BROADCASTER_ID": f"b{i}"})))
        yield out


class _Sink:
    """One endpoint for every subscription: counts pushes per subscription and answers 200."""

    def __init__(self) -> None:
        self.received = 0
        self.by_sub: dict[int, list[tuple[int, float]]] = {}

    async def handle(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.read()
        sub = int(request.headers["x-tidings-subscription"])
        now = time.monotonic()
        ids = [n["eventId"] for n in json.loads(body)]
        self.received += len(ids)
        self.by_sub.setdefault(sub, []).extend((i, now) for i in ids)
        return web.Response(text="null", content_type="application/json")

    async def start(self) -> tuple[Any, str]:
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/", self.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
        return runner, f"http://127.0.0.1:{port}/"


async def _subscribe(servers: list[Server], n: int, endpoint: str) -> list[int]:
    headers = {"Authorization": f"Bearer {servers[0].token}", "Content-Type": "application/json"}
    ids: list[int] = []
    async with aiohttp.ClientSession(headers=headers) as s:
        await post(s, servers[0].url, "icrc72_register_publication", b'[{"namespace":"bench.fan"}]')
        for i in range(n):
            url = servers[i % len(servers)].url
            reg = [{"namespace": "bench.fan", "endpoint": endpoint}]
            (r,) = json.loads(await post(s, url, "icrc72_register_subscription", json.dumps(reg).encode()))
            ids.append(r["Ok"])
        # Wait until every subscription is delivered by someone (leases settle in a heartbeat or two).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            held = 0
            for srv in servers:
                held += len(json.loads(await post(s, srv.url, "icrc72_get_broadcaster_subscriptions",
                                                  b'{"take": 1000}')))
            if held == n:
                break
            await asyncio.sleep(0.2)
    return ids


async def _fanout(servers: list[Server], events: int, timeout: float) -> dict[str, Any]:
    sink = _Sink()
    runner, endpoint = await sink.start()
    try:
        await _subscribe(servers, FANOUT_SUBS, endpoint)
        headers = {"Authorization": f"Bearer {servers[0].token}", "Content-Type": "application/json"}
        expected = events * FANOUT_SUBS
        async with aiohttp.ClientSession(headers=headers) as s:
            t0 = time.monotonic()
            urls = itertools.cycle(srv.url for srv in servers)
            for i in range(0, events, 100):
                body = json.dumps([{"namespace": "bench.fan", "data": EVENT["data"]}] * min(100, events - i))
                await post(s, next(urls), "icrc72_publish", body.encode())
            deadline = time.monotonic() + timeout
            while sink.received < expected and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            elapsed = time.monotonic() - t0
    finally:
        await runner.cleanup()
    return {"expected": expected, "delivered": sink.received, "seconds": round(elapsed, 2),
            "notifications_per_s": round(sink.received / elapsed), "broadcasters": len(servers)}


async def _failover(servers: list[Server], kills: int) -> dict[str, Any]:
    """Kill broadcasters in turn while one event per 20 ms is published through a live
    one; the failover time is from the kill to the first push of a later event to each
    of the killed one's subscriptions."""
    sink = _Sink()
    runner, endpoint = await sink.start()
    times: list[float] = []
    try:
        await _subscribe(servers, 12, endpoint)
        headers = {"Authorization": f"Bearer {servers[0].token}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession(headers=headers) as s:
            for k in range(kills):
                victim, live = servers[-1 - k], servers[: len(servers) - 1 - k]
                theirs = [i["id"] for i in json.loads(await post(
                    s, victim.url, "icrc72_get_broadcaster_subscriptions", b'{"take": 1000}'))]
                assert victim.proc is not None
                victim.proc.kill()
                victim.proc.wait()
                killed = time.monotonic()
                waiting = set(theirs)
                while waiting and time.monotonic() < killed + 30:
                    one = json.dumps([EVENT | {"namespace": "bench.fan"}]).encode()
                    await post(s, live[0].url, "icrc72_publish", one)
                    await asyncio.sleep(0.02)
                    waiting = {i for i in waiting if not any(t > killed for _, t in sink.by_sub.get(i, []))}
                if waiting:
                    raise RuntimeError(f"subscriptions {sorted(waiting)} were not delivered again within 30 s")
                if theirs:
                    times.append(max(min(t for _, t in sink.by_sub[i] if t > killed) for i in theirs) - killed)
    finally:
        await runner.cleanup()
    return {"failover_s": round(max(times), 2) if times else 0.0, "each_s": [round(t, 2) for t in times]}


async def scenario(s: Settings) -> list[Row]:
    rows: list[Row] = []
    peer = s.peers["postgres"]
    timeout = s.seconds + 90
    for n in (1, 2, 3):
        async def run_publish(n: int = n) -> dict[str, Any]:
            async with _pg_store() as store:
                with _broadcasters(n, store) as servers:
                    return await throughput(servers[0], s.clients, 100, s.seconds, event=EVENT, others=servers[1:])

        rows.append(await _guard("cluster-publish-100", f"tidings, {n} broadcaster{'s' * (n > 1)}",
                                 "HTTP, 100 events/request spread over the broadcasters, one PostgreSQL",
                                 "events/s", timeout, run_publish, lambda d: {"events/s": d["events_per_s"]}, peer))
    deadline = max(20.0, 6 * s.seconds)
    for n in (1, 2, 3):
        async def run_fanout(n: int = n) -> dict[str, Any]:
            async with _pg_store() as store:
                with _broadcasters(n, store) as servers:
                    return await _fanout(servers, s.fanout_events, deadline)

        rows.append(await _guard("cluster-fanout", f"tidings, {n} broadcaster{'s' * (n > 1)}",
                                 f"{FANOUT_SUBS} trusted HTTP endpoints spread over the broadcasters",
                                 "notifications/s", deadline + 90, run_fanout,
                                 lambda d: {"notifications/s": d["notifications_per_s"]}, peer))

    async def run_failover() -> dict[str, Any]:
        async with _pg_store() as store:
            with _broadcasters(3, store, _DEFAULTS) as servers:
                return await _failover(servers, 2)

    rows.append(await _guard("cluster-failover", "tidings, 3 broadcasters",
                             "SIGKILL one, then another; default lease (5 s) and heartbeat (1 s)", "s", 120,
                             run_failover,
                             lambda d: {"failover s": d["failover_s"]}, peer))
    return rows
