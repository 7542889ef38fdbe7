"""Adapters and escaped global ids: the JetStream network names each message by its
escaped global id, so a resend of the same event (a crash between sending and removing
it from the outbox, a second reconciliation) lands once, whatever characters the id
holds and wherever they are."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from pathlib import Path

import msgspec
import nats
import nats.js.errors
import pytest
from starlette.applications import Starlette

from tidings.client import Publisher
from tidings.core.global_id import escape_global_id
from tidings.core.interchain import DltPublish, NetworkNotification, global_id
from tidings.interchain import NetworkContext
from tidings.interchain.adapters import BrokerNetwork, JetStreamNetwork
from tidings.interchain.state import SQLiteState

from .conftest import Endpoint, ServerProcess, eventually
from .interchain_support import event

pytestmark = pytest.mark.e2e

# Escapes first, in the middle, last; a header's enemies (CR, LF, ':'); non-ASCII.
IDS = ["\r\nfirst", "mid: dle", "last\n", "%", "é😀", "a b", "a+b"]


async def test_jetstream_publishes_each_global_id_once(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:10]
    js_stream, subject = f"TEST_ADAPT_{tag}", f"test.adapt.{tag}"
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    net = JetStreamNetwork("J", {"stream": js_stream, "subject": subject},
                           NetworkContext(public_url="http://127.0.0.1:1", state=state))
    nc = await nats.connect("nats://127.0.0.1:4222")
    await net.open()
    try:
        bodies = [msgspec.convert({**event(i), "dataLocation": "https://m.example/e?hl=" + escape_global_id(g)},
                                  DltPublish) for i, g in enumerate(IDS)]
        assert [global_id(b.dataLocation) for b in bodies] == IDS
        # "a+b" spelled the way the rule reads it is the same event as "a b".
        same = msgspec.convert({**event(99), "dataLocation": "https://m.example/x?hl=a+b"}, DltPublish)
        assert await net.publish_many(bodies) == len(bodies)
        assert await net.publish_many(bodies) == len(bodies)  # a resend of the whole batch
        for b in [*bodies, same]:
            await net.publish(b)
        info = await nc.jetstream().stream_info(js_stream)
        assert info.state.messages == len(set(IDS))
        assert sorted(global_id(n.dataLocation) for n in await net.events()) == sorted(IDS)
    finally:
        await net.close()
        await state.close()
        try:
            await nc.jetstream().delete_stream(js_stream)
        except nats.js.errors.NotFoundError:
            pass
        await nc.close()


async def test_the_tidings_network_publishes_each_global_id_once(tmp_path: Path, server: ServerProcess) -> None:
    """As JetStream's ``Nats-Msg-Id``: the adapter keys each event by its global id, so a
    resend (the distributor's outbox after a crash or a lost answer) stores nothing twice
    and counts as sent (docs/interchain.md)."""
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    net = BrokerNetwork("T", {"url": server.url, "token": server.admin_token, "namespace": "dlt.once"},
                        NetworkContext(public_url="http://127.0.0.1:1", state=state))
    try:
        bodies = [msgspec.convert({**event(i), "dataLocation": "https://m.example/e?hl=" + escape_global_id(g)},
                                  DltPublish) for i, g in enumerate(IDS)]
        assert await net.publish_many(bodies) == len(bodies)
        assert await net.publish_many(bodies) == len(bodies)  # a resend of the whole batch
        for b in bodies:
            await net.publish(b)
        async with Publisher(server.url, server.admin_token) as pub:
            assert await pub.publish("dlt.once", "next") == len(IDS) + 1  # nothing else was stored
    finally:
        await net.close()
        await state.close()


async def test_jetstream_publish_counts_only_what_the_stream_holds(tmp_path: Path) -> None:
    """A resend whose first copy is still in the stream is absorbed by the duplicate
    window; one whose first copy was deleted inside the window (acknowledged as a
    duplicate, nothing stored) goes out again and is stored, by ``publish`` and by
    ``publish_many`` alike, as many times as it is deleted."""
    tag = uuid.uuid4().hex[:10]
    js_stream, subject = f"TEST_ADAPT_{tag}", f"test.adapt.{tag}"
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    net = JetStreamNetwork("J", {"stream": js_stream, "subject": subject},
                           NetworkContext(public_url="http://127.0.0.1:1", state=state))
    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    await net.open()

    async def held() -> list[str]:
        return sorted(global_id(n.dataLocation) for n in await net.events())

    async def delete(gid: str) -> None:
        for n in await net.events():
            if global_id(n.dataLocation) == gid:
                await js.delete_msg(js_stream, int(n.id))

    try:
        bodies = [msgspec.convert(event(i), DltPublish) for i in range(4)]
        ids = sorted(str(i) for i in range(4))
        assert await net.publish_many(bodies) == 4
        await net.publish(bodies[0])  # still held: absorbed
        assert await held() == ids
        for _ in range(3):  # deleted again and again inside the window
            await delete("1")
            await delete("2")
            await net.publish(bodies[1])
            assert await net.publish_many(bodies) == 4
            assert await held() == ids
        assert (await js.stream_info(js_stream)).state.messages == 4
    finally:
        await net.close()
        await state.close()
        try:
            await js.delete_stream(js_stream)
        except nats.js.errors.NotFoundError:
            pass
        await nc.close()


async def test_pushes_before_following_wait_and_are_told_once(tmp_path: Path, server: ServerProcess,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A broker that pushes to the distributor while its network is not followed (the
    distributor starting, or following again): each push waits, then is delivered; one
    line says so, none fails a handler per event."""
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    endpoint = Endpoint(None)
    net = BrokerNetwork("T", {"url": server.url, "token": server.admin_token, "namespace": "dlt.wait"},
                        NetworkContext(public_url=endpoint.url.rstrip("/"), state=state))
    endpoint.app = Starlette(routes=net.routes())
    await endpoint.start()
    got: list[str] = []

    async def deliver(found: list[NetworkNotification]) -> None:
        got.extend(global_id(n.dataLocation) for n in found)

    try:
        follow = asyncio.create_task(net.follow(deliver))
        await eventually(lambda: state.get_cursor("tidings-subscription:T"), timeout=10)
        follow.cancel()  # the subscription stays on the broker; nothing follows it now
        with contextlib.suppress(asyncio.CancelledError):
            await follow
        caplog.clear()
        with caplog.at_level(logging.INFO):
            async with Publisher(server.url, server.admin_token) as pub:
                for i in range(20):
                    await pub.publish("dlt.wait", event(f"w{i}"))
            await asyncio.sleep(1.5)  # the pushes arrive, and wait
            assert got == []
            follow = asyncio.create_task(net.follow(deliver))
            await eventually(lambda: sorted(set(got)) == sorted(f"w{i}" for i in range(20)), timeout=20)
        messages = [r.getMessage() for r in caplog.records]
        assert not [m for m in messages if "handler failed" in m], messages
        assert len([m for m in messages if "before the network is followed" in m]) == 1, messages
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
    finally:
        await net.close()
        await endpoint.stop()
        await state.close()
