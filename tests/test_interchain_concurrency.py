"""Several networks delivering the same global id at the same moment, to two distributor
instances sharing one real Redis: one republish per missing network, one notification
per subscription, then delivered for real."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import msgspec
import pytest

from tidings.core.interchain import DltPublish, DltSubscribe, notification_of
from tidings.interchain import Distributor, NetworkContext
from tidings.interchain.adapters import DltNetwork
from tidings.interchain.state import RedisState

from .conftest import eventually
from .interchain_support import Consumer, DltTestNetwork, event

N = 200


@pytest.fixture
async def redis_state() -> AsyncIterator[RedisState]:
    s = RedisState("redis://127.0.0.1:6379/0", f"test:ied:{uuid.uuid4().hex}:")
    await s.open()
    yield s
    keys = [k async for k in s._r.scan_iter(match=s.prefix + "*")]
    if keys:
        await s._r.delete(*keys)
    await s.close()


async def test_same_id_from_several_networks_at_once(redis_state: RedisState) -> None:
    nets = {name: DltTestNetwork(name) for name in "ABCD"}
    consumer = Consumer()
    for n in nets.values():
        await n.start()
    await consumer.endpoint.start()
    ctx = NetworkContext(public_url="http://127.0.0.1:1", state=redis_state)
    adapters = [[DltNetwork(name, {"url": n.url}, ctx) for name, n in nets.items()] for _ in range(2)]
    d1, d2 = (Distributor(a, redis_state) for a in adapters)
    try:
        for a in adapters:
            for net in a:
                await net.open()
        sub = await d1.subscribe(DltSubscribe(eventTypes=["*"], notificationEndpoint=consumer.url))
        await d2.load()
        assert sub.id in d2.subscriptions

        bodies = [msgspec.convert(event(f"c{i}"), DltPublish) for i in range(N)]
        # A, B and C each deliver every event, to both distributors, all at once.
        await asyncio.gather(*(
            d.on_event(origin, notification_of(b, id=i, timestamp=i, network=origin))
            for i, b in enumerate(bodies) for origin in "ABC" for d in (d1, d2)
        ))
        gids = {f"c{i}" for i in range(N)}
        for name in "ABCD":
            assert await redis_state.members(f"publishedEvents:{name}") == gids
        # D lacked every event: exactly one republish each. A, B, C may get one (when
        # another's delivery was handled before their own), never two.
        assert await redis_state.outbox_size("net:D") == N
        for name in "ABC":
            queued = [msgspec.json.decode(p, type=DltPublish).dataLocation
                      for p in await redis_state.peek(f"net:{name}", 10 * N)]
            assert len(queued) == len(set(queued))
        assert await redis_state.outbox_size(f"sub:{sub.id}") == N

        # Delivered for real: D gets each once, the consumer each once.
        runs = [asyncio.create_task(d1.run(follow=False))]
        await eventually(lambda: len(nets["D"].ledger) == N and len(consumer.got) == N, timeout=30)
        assert sorted(nets["D"].gids()) == sorted(gids)
        assert sorted(consumer.gids()) == sorted(gids)
        assert all("network" not in n for n in consumer.got)
        for t in runs:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
    finally:
        for a in adapters:
            for net in a:
                await net.close()
        for n in nets.values():
            await n.close()
        await consumer.endpoint.stop()
