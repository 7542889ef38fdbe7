"""Adapters and escaped global ids: the JetStream network names each message by its
escaped global id, so a resend of the same event (a crash between sending and removing
it from the outbox, a second reconciliation) lands once, whatever characters the id
holds and wherever they are."""

from __future__ import annotations

import uuid
from pathlib import Path

import msgspec
import nats
import nats.js.errors
import pytest

from tidings.core.global_id import escape_global_id
from tidings.core.interchain import DltPublish, global_id
from tidings.interchain import NetworkContext
from tidings.interchain.adapters import JetStreamNetwork
from tidings.interchain.state import SQLiteState

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
