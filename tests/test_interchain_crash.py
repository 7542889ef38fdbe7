"""Exactly once to consumers across SIGKILL: the distributor, a real process on real
Redis (its state) and real NATS, is killed again and again in the middle of delivery
while events keep arriving; every consumer acts on every event it wants once, none is
lost, and a repeat (the push in flight at a kill) carries the same idempotency key."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import nats.js.errors
import pytest
import redis.asyncio as aioredis

from tidings.core.interchain import IDEMPOTENCY_HEADER, global_id, idempotency_key

from .conftest import Endpoint, eventually
from .interchain_support import DistributorProcess, event

pytestmark = pytest.mark.e2e

KILLS = 10


class KeyedConsumer:
    """A consumer that does what docs/interchain.md asks of one: it records the
    idempotency key of each notification before answering 2xx. It answers slowly, so
    kills land while a push is in flight."""

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []
        self.in_flight = 0
        self.endpoint = Endpoint(self)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.got.append((headers.get(IDEMPOTENCY_HEADER.lower(), ""), body))
        self.in_flight += 1
        try:
            await asyncio.sleep(0.02)
        finally:
            self.in_flight -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def acted_on(self) -> dict[str, bytes]:
        """Key -> body, as a consumer that skips known keys acts."""
        out: dict[str, bytes] = {}
        for key, body in self.got:
            out.setdefault(key, body)
        return out


@pytest.fixture
async def consumers() -> AsyncIterator[list[KeyedConsumer]]:
    made = [KeyedConsumer(), KeyedConsumer()]
    for c in made:
        await c.endpoint.start()
    yield made
    for c in made:
        await c.endpoint.stop()


async def test_sigkill_mid_delivery_neither_repeats_nor_loses(tmp_path: Path,
                                                                consumers: list[KeyedConsumer]) -> None:
    tag = uuid.uuid4().hex[:10]
    prefix, stream = f"test:ied-crash:{tag}:", f"test:crash:{tag}"
    js_stream, js_subject = f"TEST_CRASH_{tag}", f"test.crash.{tag}"
    r = aioredis.Redis()
    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    await js.add_stream(name=js_stream, subjects=[js_subject])
    d = DistributorProcess(tmp_path, {
        "networks": [{"name": "R", "kind": "redis", "stream": stream},
                     {"name": "J", "kind": "jetstream", "stream": js_stream, "subject": js_subject,
                      "ack_wait": 1}],
        "redis": "redis://127.0.0.1:6379/0", "redis_prefix": prefix,
    })
    every, catalog = consumers
    rng = random.Random(tag)
    total = 400
    sent: list[tuple[str, str]] = []  # (gid, event type)

    async def publish_all() -> None:
        # The networks' own publishers: events on R, on J, and some on both (a
        # notification must still be acted on once).
        for i in range(total):
            kind = "Catalog" if i % 3 == 0 else "ProductOffering"
            body = json.dumps(event(f"{tag}-{i}", kind))
            if i % 5 != 1:
                await r.xadd(stream, {"event": body})
            if i % 5 in (1, 2):
                await js.publish(js_subject, body.encode(), stream=js_stream)
            sent.append((f"{tag}-{i}", kind))
            await asyncio.sleep(0.01)

    try:
        await asyncio.to_thread(d.start)
        subs = {}
        async with aiohttp.ClientSession() as http:
            for c, types in ((every, ["*"]), (catalog, ["Catalog"])):
                async with http.post(f"{d.url}/api/v1/subscribe",
                                     json={"eventTypes": types, "notificationEndpoint": c.endpoint.url}) as resp:
                    assert resp.status == 201
                    subs[c] = (await resp.json())["id"]
        publisher = asyncio.create_task(publish_all())
        in_window = 0
        for k in range(KILLS):
            if k % 2 == 0:
                # Kill while a push is in flight: the consumer has the notification, the
                # distributor has not recorded its answer.
                await eventually(lambda: every.in_flight or catalog.in_flight, timeout=30, interval=0.001)
                in_window += 1
            else:
                await asyncio.sleep(rng.uniform(0.05, 0.6))
            d.proc.kill()  # type: ignore[union-attr]  # SIGKILL
            await asyncio.to_thread(d.proc.wait)  # type: ignore[union-attr]
            d.stop()
            await asyncio.to_thread(d.start)
        await publisher
        want = {c: {g for g, kind in sent if c is every or kind == "Catalog"} for c in consumers}

        def done() -> bool:
            return all({global_id(json.loads(b)["dataLocation"]) for b in c.acted_on().values()} == want[c]
                       for c in consumers)

        await eventually(done, timeout=60)
        await asyncio.sleep(1.0)  # anything more that was coming would come now
        for c in consumers:
            acted = c.acted_on()
            gids = [global_id(json.loads(b)["dataLocation"]) for b in acted.values()]
            assert sorted(gids) == sorted(want[c])  # each event acted on once; none lost
            for key, body in c.got:  # every repeat is the same notification with the same key
                assert acted[key] == body
                assert key == idempotency_key(subs[c], global_id(json.loads(body)["dataLocation"]))
            repeats = len(c.got) - len(acted)
            assert repeats <= KILLS, repeats  # at most the push in flight at each kill
            delivered = {m.decode() for m in await r.smembers(f"{prefix}deliveredEvents:{subs[c]}")}
            assert delivered == want[c]
            assert await r.llen(f"{prefix}outbox:sub:{subs[c]}") == 0
        assert in_window == KILLS // 2
    finally:
        d.stop()
        keys = [k async for k in r.scan_iter(match=prefix + "*")]
        await r.delete(stream, *keys)
        await r.aclose()
        try:
            await js.delete_stream(js_stream)
        except nats.js.errors.NotFoundError:
            pass
        await nc.close()


async def test_sigkill_between_the_consumers_2xx_and_its_record(tmp_path: Path) -> None:
    """The kill aimed at the one window: the consumer has answered 2xx, the distributor
    dies before recording it (CRASH_ENV). The restarted distributor sends that one
    notification again, with the same body and Idempotency-Key, and nothing else twice:
    a consumer keeping keys acts on every event once; one keeping none sees one repeat."""
    from tidings.interchain.distributor import CRASH_ENV

    tag = uuid.uuid4().hex[:10]
    prefix, stream = f"test:ied-aim:{tag}:", f"test:aim:{tag}"
    r = aioredis.Redis()
    consumer = KeyedConsumer()
    await consumer.endpoint.start()
    d = DistributorProcess(tmp_path, {
        "networks": [{"name": "R", "kind": "redis", "stream": stream}],
        "redis": "redis://127.0.0.1:6379/0", "redis_prefix": prefix,
    })
    total = 30
    try:
        await asyncio.to_thread(d.start, {CRASH_ENV: "acked"})
        async with aiohttp.ClientSession() as http, http.post(
                f"{d.url}/api/v1/subscribe",
                json={"eventTypes": ["*"], "notificationEndpoint": consumer.endpoint.url}) as resp:
            assert resp.status == 201
            sub = (await resp.json())["id"]
        for i in range(total):
            await r.xadd(stream, {"event": json.dumps(event(f"{tag}-{i}"))})
        assert await asyncio.to_thread(d.proc.wait, 30) == -9  # type: ignore[union-attr]  # killed at the ack
        assert len(consumer.got) == 1
        d.stop()
        await asyncio.to_thread(d.start)
        want = {f"{tag}-{i}" for i in range(total)}
        await eventually(lambda: len(consumer.acted_on()) == total, timeout=30)
        await asyncio.sleep(0.5)  # anything more that was coming would come now
        first_key, first_body = consumer.got[0]
        assert consumer.got[1] == (first_key, first_body)  # the one repeat, first in order
        assert first_key == idempotency_key(sub, global_id(json.loads(first_body)["dataLocation"]))
        assert len(consumer.got) == total + 1
        assert sorted(global_id(json.loads(b)["dataLocation"]) for b in consumer.acted_on().values()) == sorted(want)
        assert {m.decode() for m in await r.smembers(f"{prefix}deliveredEvents:{sub}")} == want
        assert await r.llen(f"{prefix}outbox:sub:{sub}") == 0
    finally:
        d.stop()
        await consumer.endpoint.stop()
        keys = [k async for k in r.scan_iter(match=prefix + "*")]
        await r.delete(stream, *keys)
        await r.aclose()
