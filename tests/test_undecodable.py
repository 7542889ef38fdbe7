"""JSON nested past msgspec's depth raises ``RecursionError``, no ``DecodeError``
(``tidings.core.undecodable``). Every face that decodes input from the network takes it
as the bad input it is: a push answer, a push to the SDK's Subscriber, a message on an
interchain network, a row handed to the pipeline."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import nats.js.errors
import pytest
import redis.asyncio as aioredis

from tidings.client import EventNotification, Publisher, Subscriber
from tidings.core.interchain import InvalidEvent
from tidings.interchain import NetworkContext
from tidings.interchain.adapters import JetStreamNetwork, RedisStreamNetwork
from tidings.interchain.api import _decode, _decode_publish
from tidings.interchain.state import SQLiteState
from tidings.pipeline._rows import RowRefused, _headers, _wire_data

from .conftest import ServerProcess, eventually, read_body, respond
from .interchain_support import event

DEEP = b"[" * 1500 + b"]" * 1500
NS = "com.example.deep"


def test_nesting_past_the_decoder_is_a_recursion_error_not_a_decode_error() -> None:
    # What every site below guards against: if msgspec ever raises DecodeError for it, fine.
    with pytest.raises(RecursionError):
        msgspec.json.decode(DEEP)


@pytest.mark.e2e
async def test_a_push_answered_with_json_too_deep_counts_as_an_answer_without_results(
    server: ServerProcess, endpoints: Any
) -> None:
    got: list[int] = []

    async def deep(scope: Any, receive: Any, send: Any) -> None:
        got.extend(n["eventId"] for n in json.loads(await read_body(receive)))
        await respond(send, 200, DEEP)

    received: list[EventNotification] = []
    good = Subscriber(received.append, url=server.url, token=server.admin_token)
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        await good.subscribe(NS, (await endpoints(good)).url)
        await good.subscribe(NS, (await endpoints(deep)).url)  # trusted: a 2xx confirms
        for i in range(5):
            await pub.publish(NS, i)
        await eventually(lambda: len(received) == 5 and len(got) == 5)
    await good.close()
    await asyncio.sleep(1.5)  # past the first retry's back-off: nothing is pushed again
    assert sorted(got) == [1, 2, 3, 4, 5]
    assert "Traceback" not in (server.data_dir / "server.log").read_text()


async def test_the_sdk_subscriber_answers_400_to_a_push_too_deep(endpoints: Any) -> None:
    received: list[EventNotification] = []
    ep = await endpoints(Subscriber(received.append))
    # Deep where any JSON may stand (the data): a typed decoder refuses a wrong shape sooner.
    body = b'[{"id": 1, "eventId": 1, "timestamp": 1, "namespace": "a", "source": "s", "data": ' + DEEP + b"}]"
    async with aiohttp.ClientSession() as http, http.post(ep.url, data=body) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "invalid_argument"
    assert received == []


def test_the_distributor_api_and_the_pipeline_refuse_bodies_too_deep() -> None:
    with pytest.raises(InvalidEvent) as e:
        _decode(_decode_publish, b'{"eventType": "x", "extra": ' + DEEP + b"}")
    assert e.value.code == "invalid_argument"
    with pytest.raises(RowRefused):
        _wire_data(DEEP.decode())
    with pytest.raises(RowRefused):
        _headers(DEEP.decode())


@pytest.mark.e2e
async def test_a_message_too_deep_on_a_network_is_skipped(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:10]
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    ctx = NetworkContext(public_url="http://127.0.0.1:1", state=state)
    good = msgspec.json.encode(event(1))
    deep = b'{"eventType": "x", "extra": ' + DEEP + b"}"
    r = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    rnet = RedisStreamNetwork("R", {"stream": f"test:deep:{tag}"}, ctx)
    js_stream, subject = f"TEST_DEEP_{tag}", f"test.deep.{tag}"
    jnet = JetStreamNetwork("J", {"stream": js_stream, "subject": subject}, ctx)
    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        await rnet.open()
        await jnet.open()
        await nc.jetstream().add_stream(name=js_stream, subjects=[subject])
        for body in (deep, good):
            await r.xadd(f"test:deep:{tag}", {b"event": body})
            await nc.jetstream().publish(subject, body)
        for net in (rnet, jnet):
            assert [n.eventType for n in await net.events()] == ["ProductOffering"], net.name
    finally:
        await rnet.close()
        await jnet.close()
        await r.delete(f"test:deep:{tag}")
        await r.aclose()
        try:
            await nc.jetstream().delete_stream(js_stream)
        except nats.js.errors.NotFoundError:
            pass
        await nc.close()
        await state.close()
