"""Stopping gracefully (docs/operations.md, "Stopping and rolling restarts"): on SIGTERM
``/readyz`` turns unready first while ``/healthz`` stays alive, the push in flight
finishes and is recorded, the leases go at once, and the process exits 0; restarting the
members of a cluster one by one under load loses nothing, answers no client with a 5xx
and pushes nothing twice."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tidings.client import Publisher

from .conftest import ServerProcess, admin_api, eventually, read_body, respond
from .test_cluster import NS, nodes, setup

pytestmark = pytest.mark.e2e


class Held:
    """An endpoint that holds each push ``hold_s`` before answering 200."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.got: list[int] = []
        self.arrived = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await read_body(receive)
        self.got += [n["eventId"] for n in json.loads(body)]
        self.arrived.set()
        await asyncio.sleep(self.hold_s)
        await respond(send)


async def test_sigterm_turns_unready_first_finishes_the_push_in_flight_records_it_and_exits_0(
    server_factory: Callable[..., ServerProcess], endpoints: Any,
) -> None:
    server = server_factory(workers="1", drain_s="10")
    held = Held(2.0)
    ep = await endpoints(held)
    async with aiohttp.ClientSession() as http:
        async with Publisher(server.url, server.admin_token) as pub:
            await pub.register_publication("com.example.stop")
        await admin_api(http, server, "icrc72_register_subscription",
                        [{"namespace": "com.example.stop", "endpoint": ep.url}])
        async with http.get(f"{server.url}/readyz") as r:
            assert r.status == 200 and (await r.json())["status"] == "ready"
        async with Publisher(server.url, server.admin_token) as pub:
            await pub.publish("com.example.stop", {"n": 1})
        await asyncio.wait_for(held.arrived.wait(), 10)  # the push is in flight now

        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        async with http.get(f"{server.url}/readyz") as r:
            assert r.status == 503
            answer = await r.json()
            assert answer["status"] == "unready" and "stopping" in answer["problems"]
            assert r.headers["retry-after"] == "1"
        async with http.get(f"{server.url}/healthz") as r:
            assert r.status == 200  # alive, still

        started = time.monotonic()
        await asyncio.to_thread(server.stop)
        assert server.exit_code == 0
        assert time.monotonic() - started < 9  # the push finished; nothing waited for the bound

        # The push it finished while stopping was recorded: a restart sends only what is new.
        server.start()
        held.hold_s = 0
        async with Publisher(server.url, server.admin_token) as pub:
            await pub.publish("com.example.stop", {"n": 2})
        await eventually(lambda: held.got == [1, 2], timeout=10)
        await asyncio.sleep(1.0)
        assert held.got == [1, 2]


class Watch:
    """Every push per subscription, with repeats and pushes that overlap counted."""

    def __init__(self) -> None:
        self.got: dict[int, list[int]] = defaultdict(list)
        self.inflight: dict[int, int] = defaultdict(int)
        self.overlaps = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        sub = int(dict(scope["headers"])[b"x-tidings-subscription"])
        if self.inflight[sub]:
            self.overlaps += 1
        self.inflight[sub] += 1
        try:
            body = await read_body(receive)
            self.got[sub] += [n["eventId"] for n in json.loads(body)]
            await asyncio.sleep(0.005)
        finally:
            self.inflight[sub] -= 1
        await respond(send)


async def test_a_rolling_restart_under_load_loses_nothing_and_pushes_nothing_twice(
    server_factory: Callable[..., ServerProcess], pg_database: str, endpoints: Any,
) -> None:
    with nodes(server_factory, pg_database, drain_s="10") as servers:
        watch = Watch()
        ep = await endpoints(watch)
        sub_ids = await setup(servers, ep.url, 9)
        acked: list[int] = []
        statuses: dict[int, int] = defaultdict(int)
        stop = asyncio.Event()

        async def publish() -> None:
            k = 0
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
                for s in itertools.cycle(servers):
                    if stop.is_set():
                        return
                    if s.proc is None:
                        continue
                    try:
                        async with http.post(
                            f"{s.url}/v1/icrc72_publish", json=[{"namespace": NS, "data": {"Nat": k}}],
                            headers={"authorization": f"Bearer {s.admin_token}"},
                        ) as r:
                            statuses[r.status] += 1
                            if r.status == 200:
                                (item,) = await r.json()
                                if item and "Ok" in item:
                                    acked.extend(item["Ok"])
                    except (aiohttp.ClientConnectionError, TimeoutError):
                        pass  # a member stopping or starting: the client tries the next one
                    k += 1
                    await asyncio.sleep(0.01)

        task = asyncio.create_task(publish())
        try:
            await asyncio.sleep(1.0)
            for s in servers:
                await asyncio.to_thread(s.stop)
                assert s.exit_code == 0, f"{s.url} exited {s.exit_code}"
                await asyncio.to_thread(s.start)
                await asyncio.sleep(1.5)
        finally:
            stop.set()
            await task

        assert len(acked) > 100
        assert not [c for c in statuses if c >= 500], dict(statuses)
        await eventually(lambda: all(set(acked) <= set(watch.got[i]) for i in sub_ids), timeout=30)
        await asyncio.sleep(1.0)
        for i in sub_ids:
            repeats = len(watch.got[i]) - len(set(watch.got[i]))
            assert repeats == 0, f"subscription {i} got {repeats} event(s) twice"
        assert watch.overlaps == 0
