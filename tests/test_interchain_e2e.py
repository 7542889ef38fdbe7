"""The distributor as a real process, against real networks: two DLT-Adapter-compatible
test networks, a Redis stream, a NATS JetStream stream and a tidings broker."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
import redis.asyncio as aioredis

from tidings.client import Admin, ApiResponseError, Publisher

from .conftest import ServerProcess, eventually
from .interchain_support import Consumer, DistributorProcess, DltTestNetwork, event

pytestmark = pytest.mark.e2e


class Env:
    """Unique names on the shared Redis and NATS, removed afterwards."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.prefix = f"test:ied:{tag}:"
        self.stream = f"test:dlt:{tag}"
        self.js_stream = f"TEST_DLT_{tag}"
        self.js_subject = f"test.dlt.{tag}"
        self.r = aioredis.Redis()
        self.nc: Any = None

    async def js(self) -> Any:
        if self.nc is None:
            self.nc = await nats.connect("nats://127.0.0.1:4222")
        return self.nc.jetstream()

    async def redis_gids(self) -> list[str]:
        return [json.loads(f[b"event"])["dataLocation"].rsplit("hl=", 1)[1]
                for _, f in await self.r.xrange(self.stream)]

    async def js_gids(self) -> list[str]:
        js = await self.js()
        try:
            info = await js.stream_info(self.js_stream)
        except nats.js.errors.NotFoundError:
            return []
        out: list[str] = []
        if not info.state.messages:  # made, nothing in it yet: its first_seq is 0, no message's
            return out
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(self.js_stream, seq)
            out.append(json.loads(msg.data)["dataLocation"].rsplit("hl=", 1)[1])
        return out

    async def close(self) -> None:
        keys = [k async for k in self.r.scan_iter(match=self.prefix + "*")]
        await self.r.delete(self.stream, *keys)
        await self.r.aclose()
        if self.nc is not None:
            js = self.nc.jetstream()
            try:
                await js.delete_stream(self.js_stream)
            except nats.js.errors.NotFoundError:
                pass
            await self.nc.close()


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    e = Env()
    yield e
    await e.close()


@pytest.fixture
async def nets() -> AsyncIterator[list[DltTestNetwork]]:
    made = [DltTestNetwork("A"), DltTestNetwork("B")]
    for n in made:
        await n.start()
    yield made
    for n in made:
        await n.close()


@pytest.fixture
async def consumer() -> AsyncIterator[Consumer]:
    c = Consumer()
    await c.endpoint.start()
    yield c
    await c.endpoint.stop()


@pytest.fixture
def distributors(tmp_path: Path) -> Iterator[list[DistributorProcess]]:
    made: list[DistributorProcess] = []
    yield made
    for d in made:
        d.stop()


def broker_gids(server: ServerProcess) -> list[str]:
    conn = sqlite3.connect(f"file:{server.data_dir / 'tidings.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT data FROM events WHERE namespace = 'dlt.events' ORDER BY id").fetchall()
    finally:
        conn.close()
    out = []
    for (data,) in rows:
        fields = dict(json.loads(data)["Map"])
        out.append(fields["dataLocation"]["Text"].rsplit("hl=", 1)[1])
    return out


def start(tmp_path: Path, distributors: list[DistributorProcess], networks: list[dict[str, Any]],
          **config: Any) -> DistributorProcess:
    d = DistributorProcess(tmp_path, {"networks": networks, **config})
    d.start()
    distributors.append(d)
    return d


async def post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with http.post(url, data=body if isinstance(body, bytes) else json.dumps(body)) as resp:
        text = await resp.read()
        return resp.status, json.loads(text) if text else None


async def settle() -> None:
    # Echoes of republished events come back from every network; give them time to
    # arrive so a duplicate, if the distributor made one, would be seen.
    await asyncio.sleep(1.5)


async def test_direct_publication_reaches_every_network_and_consumers_once(
    tmp_path: Path, env: Env, nets: list[DltTestNetwork], consumer: Consumer, server: ServerProcess,
    distributors: list[DistributorProcess],
) -> None:
    a, _ = nets
    d = start(tmp_path, distributors, [
        {"name": "A", "kind": "dlt", "url": a.url, "health_interval": 0.2},
        {"name": "R", "kind": "redis", "stream": env.stream},
        {"name": "J", "kind": "jetstream", "stream": env.js_stream, "subject": env.js_subject},
        {"name": "T", "kind": "tidings", "url": server.url, "token": server.admin_token,
         "data_dir": str(server.data_dir)},
    ], redis="redis://127.0.0.1:6379/0", redis_prefix=env.prefix)
    async with aiohttp.ClientSession() as http:
        status, sub = await post(http, f"{d.url}/api/v1/subscribe",
                                 {"eventTypes": ["*"], "notificationEndpoint": consumer.url})
        assert status == 201
        assert await post(http, f"{d.url}/api/v1/subscribe",
                          {"eventTypes": ["*"], "notificationEndpoint": consumer.url}) == (200, sub)
        # Bad bodies: stable codes.
        assert (await post(http, f"{d.url}/api/v1/publishEvent", b"{"))[1]["error"]["code"] == "malformed_json"
        status, err = await post(http, f"{d.url}/api/v1/publishEvent", {**event(0), "entityId": "0x1"})
        assert (status, err["error"]["code"]) == (400, "invalid_argument")
        status, err = await post(http, f"{d.url}/api/v1/publishEvent", {**event(0), "dataLocation": "https://h/x"})
        assert (status, err["error"]["code"]) == (400, "missing_global_id")
        status, err = await post(http, f"{d.url}/api/v1/subscribe", {"eventTypes": ["*"],
                                                                     "notificationEndpoint": "ftp://x"})
        assert (status, err["error"]["code"]) == (400, "invalid_argument")

        want = [f"d{i}" for i in range(5)]
        for i in range(5):
            status, ok = await post(http, f"{d.url}/api/v1/publishEvent", {**event(f"d{i}"), "network": "X"})
            assert status == 201 and ok["globalId"] == f"d{i}"

        async def converged() -> bool:
            return (a.gids() == want and await env.redis_gids() == want and await env.js_gids() == want
                    and broker_gids(server) == want and sorted(consumer.gids()) == want)

        await eventually(converged, timeout=20)
        await settle()
        assert a.gids() == want and await env.redis_gids() == want and await env.js_gids() == want
        assert broker_gids(server) == want
        assert sorted(consumer.gids()) == want  # once each, though four networks delivered each
        assert all("network" not in n for n in consumer.got)
        assert all(n["network"] == "A" for n in a.ledger)

        async with http.get(f"{d.url}/api/v1/events") as resp:
            listed = await resp.json()
        assert sorted(n["dataLocation"].rsplit("hl=", 1)[1] for n in listed) == want
        assert all("network" not in n for n in listed)


async def test_replication_from_every_kind_of_network(
    tmp_path: Path, env: Env, nets: list[DltTestNetwork], consumer: Consumer, server: ServerProcess,
    distributors: list[DistributorProcess],
) -> None:
    a, _ = nets
    d = start(tmp_path, distributors, [
        {"name": "A", "kind": "dlt", "url": a.url, "health_interval": 0.2},
        {"name": "R", "kind": "redis", "stream": env.stream},
        {"name": "J", "kind": "jetstream", "stream": env.js_stream, "subject": env.js_subject},
        {"name": "T", "kind": "tidings", "url": server.url, "token": server.admin_token},
    ], redis="redis://127.0.0.1:6379/0", redis_prefix=env.prefix)
    async with aiohttp.ClientSession() as http:
        await post(http, f"{d.url}/api/v1/subscribe",
                   {"eventTypes": ["Catalog"], "notificationEndpoint": consumer.url})
        await eventually(lambda: a.subs, timeout=20)  # the distributor follows A
        async with Admin(server.url, server.admin_token) as admin:  # ... and the broker

            async def broker_followed() -> bool:
                try:
                    return bool(await admin.get_subscriptions(namespace="dlt.events"))
                except ApiResponseError:  # namespace_not_found: not registered yet
                    return False

            await eventually(broker_followed, timeout=20)
        # Each network's own publishers publish there, not through the distributor.
        await post(http, f"{a.url}/api/v1/publishEvent", event("from-A", "Catalog"))
        await env.r.xadd(env.stream, {"event": json.dumps(event("from-R", "Catalog"))})
        js = await env.js()
        async with Publisher(server.url, server.admin_token) as pub:
            await pub.register_publication("dlt.events")
            await pub.publish("dlt.events", event("from-T", "Catalog"))
        await eventually(lambda: _stream_exists(js, env.js_stream), timeout=20)
        await js.publish(env.js_subject, json.dumps(event("from-J", "Other")).encode(), stream=env.js_stream)

        want = sorted(["from-A", "from-R", "from-T", "from-J"])

        async def converged() -> bool:
            return (sorted(a.gids()) == want and sorted(await env.redis_gids()) == want
                    and sorted(await env.js_gids()) == want and sorted(broker_gids(server)) == want)

        try:
            await eventually(converged, timeout=30)
        except AssertionError:
            seen = (a.gids(), await env.redis_gids(), await env.js_gids(), broker_gids(server))
            raise AssertionError(f"A, R, J, T hold {seen}; distributor log:\n{d.log()[-3000:]}") from None
        await settle()
        for gids in (a.gids(), await env.redis_gids(), await env.js_gids(), broker_gids(server)):
            assert sorted(gids) == want  # no network got anything twice
        # Only the Catalog events interest the consumer, each once.
        assert sorted(consumer.gids()) == ["from-A", "from-R", "from-T"]
        # Republished bodies carry no network parameter of their origin.
        assert {n["network"] for n in a.ledger} == {"A"}
        async with http.get(f"{d.url}/health") as resp:
            health = await resp.json()
        assert {n: h["outbox"] for n, h in health["networks"].items()} == {"A": 0, "R": 0, "J": 0, "T": 0}


async def _stream_exists(js: Any, name: str) -> bool:
    try:
        await js.stream_info(name)
    except nats.js.errors.NotFoundError:
        return False
    return True


async def test_subscriptions_survive_a_restart_embedded_state(
    tmp_path: Path, nets: list[DltTestNetwork], consumer: Consumer, distributors: list[DistributorProcess],
) -> None:
    a, _ = nets
    d = start(tmp_path, distributors, [{"name": "A", "kind": "dlt", "url": a.url, "health_interval": 0.2}],
              sqlite=str(tmp_path / "state.db"))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        status, sub = await post(http, f"{d.url}/api/v1/subscribe",
                                 {"eventTypes": ["*"], "notificationEndpoint": consumer.url})
        assert status == 201
        d.stop()
        d.start()
        # Nobody subscribes again: the kept subscription is notified.
        await eventually(lambda: len(a.subs) == 1, timeout=20)
        await post(http, f"{a.url}/api/v1/publishEvent", event("after-restart"))
        await eventually(lambda: consumer.gids() == ["after-restart"], timeout=20)
        # Known after the restart: the same body answers the same id, not a new one.
        assert await post(http, f"{d.url}/api/v1/subscribe",
                          {"eventTypes": ["*"], "notificationEndpoint": consumer.url}) == (200, sub)


async def test_outage_events_wait_and_converge_in_order_without_duplicates(
    tmp_path: Path, env: Env, nets: list[DltTestNetwork], consumer: Consumer, distributors: list[DistributorProcess],
) -> None:
    a, b = nets
    d = start(tmp_path, distributors, [
        {"name": "A", "kind": "dlt", "url": a.url, "health_interval": 0.2},
        {"name": "B", "kind": "dlt", "url": b.url, "health_interval": 0.2},
        {"name": "R", "kind": "redis", "stream": env.stream},
    ], redis="redis://127.0.0.1:6379/0", redis_prefix=env.prefix)
    async with aiohttp.ClientSession() as http:
        await post(http, f"{d.url}/api/v1/subscribe", {"eventTypes": ["*"], "notificationEndpoint": consumer.url})
        await eventually(lambda: a.subs and b.subs, timeout=20)
        await b.stop()  # network B goes down

        native = [f"r{i}" for i in range(4)]
        for gid in native:  # published on the Redis network by its own publishers
            await env.r.xadd(env.stream, {"event": json.dumps(event(gid))})
        await eventually(lambda: a.gids() == native, timeout=20)
        direct = ["p0", "p1"]
        for gid in direct:
            assert (await post(http, f"{d.url}/api/v1/publishEvent", event(gid)))[0] == 201
        want = native + direct
        await eventually(lambda: a.gids() == want, timeout=20)
        async with http.get(f"{d.url}/health") as resp:
            health = await resp.json()
        assert health["networks"]["B"]["outbox"] == len(want) and health["networks"]["B"]["failing"]
        assert b.gids() == []

        await b.start()  # B is back, on the same address
        await eventually(lambda: b.gids() == want, timeout=30)  # everything, in order
        await eventually(lambda: sorted(consumer.gids()) == sorted(want), timeout=20)
        await settle()
        assert a.gids() == want and b.gids() == want and await env.redis_gids() == want
        assert sorted(consumer.gids()) == sorted(want)  # no consumer saw a duplicate


async def test_events_on_a_broker_before_the_distributor_are_caught_up(
    tmp_path: Path, nets: list[DltTestNetwork], server: ServerProcess, distributors: list[DistributorProcess],
) -> None:
    a, _ = nets
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication("dlt.events")
        await pub.publish("dlt.events", event("early"))
    start(tmp_path, distributors, [
        {"name": "A", "kind": "dlt", "url": a.url, "health_interval": 0.2},
        {"name": "T", "kind": "tidings", "url": server.url, "token": server.admin_token,
         "data_dir": str(server.data_dir)},
    ], sqlite=str(tmp_path / "state.db"))
    await eventually(lambda: a.gids() == ["early"], timeout=20)
    await settle()
    assert a.gids() == ["early"] and broker_gids(server) == ["early"]
