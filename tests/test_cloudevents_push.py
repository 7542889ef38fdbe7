"""Pushing CloudEvents (``tidings:subscription:cloudevents``) through the real server:
binary, structured and batched mode, attributes stable across retries, the tidings ids
as extensions, the Standard Webhooks signature, trace context; subscriptions that do not
ask get today's body (docs/cloudevents.md)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tidings.core.webhooks import encode_secret, verify

from .conftest import ServerProcess, eventually, read_body, respond

pytestmark = pytest.mark.e2e

SECRET = encode_secret(b"k" * 32)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass
class Push:
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An endpoint that keeps every push; answers ``fail_first`` pushes 503, and holds
    each push while ``hold`` is clear."""

    pushes: list[Push] = field(default_factory=list)
    fail_first: int = 0
    hold: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.hold.set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.pushes.append(Push(headers, await read_body(receive)))
        await self.hold.wait()
        await respond(send, 503 if len(self.pushes) <= self.fail_first else 200, b"")


@pytest.fixture(scope="module")
def push_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("ce-push")), env={
        "TIDINGS_RETRY_INITIAL_S": "0.05", "TIDINGS_RETRY_MAX_S": "0.2", "TIDINGS_ACK_DEADLINE_S": "2",
    })
    s.start(new_port_if_taken=True)
    yield s
    s.stop()


@dataclass
class Harness:
    server: ServerProcess
    http: aiohttp.ClientSession
    ns: str
    endpoints: Any

    async def api(self, method: str, arg: Any) -> Any:
        async with self.http.post(f"{self.server.url}/v1/{method}", data=json.dumps(arg),
                                  headers={"authorization": f"Bearer {self.server.admin_token}"}) as resp:
            body = await resp.json()
            assert resp.status == 200, body
            return body

    async def subscribe(self, mode: str | None, receiver: Receiver) -> int:
        ep = await self.endpoints(receiver)
        config = [] if mode is None else [["tidings:subscription:cloudevents", {"Text": mode}]]
        (r,) = await self.api("icrc72_register_subscription", [
            {"namespace": self.ns, "endpoint": ep.url, "config": config, "secret": SECRET}])
        return int(r["Ok"])

    async def publish_ce(self, headers: dict[str, str], body: bytes) -> int:
        async with self.http.post(f"{self.server.url}/v1/cloudevents/{self.ns}", data=body, headers={
                "authorization": f"Bearer {self.server.admin_token}", **headers}) as resp:
            answer = await resp.json()
            assert resp.status == 200, answer
            return int(answer[0]["Ok"][0])


@pytest.fixture
async def h(push_server: ServerProcess, endpoints: Any) -> AsyncIterator[Harness]:
    async with aiohttp.ClientSession() as http:
        harness = Harness(push_server, http, f"com.example.push.t{uuid.uuid4().hex[:10]}", endpoints)
        await harness.api("icrc72_register_publication", [{"namespace": harness.ns}])
        yield harness


def signed(push: Push) -> None:
    verify([SECRET], push.headers, push.body, int(time.time()))


async def test_binary_mode_gives_the_cloudevent_back_as_published(h: Harness) -> None:
    rx = Receiver()
    sub = await h.subscribe("binary", rx)
    event_id = await h.publish_ce({
        "ce-specversion": "1.0", "ce-id": "order-1", "ce-source": "/shop", "ce-type": "com.example.created",
        "ce-subject": "caf%C3%A9 \"q\"", "ce-time": "2026-11-27T08:00:00.5+01:00", "ce-region": "eu",
        "ce-traceparent": TRACEPARENT, "ce-tracestate": "v=1", "content-type": "text/plain; charset=utf-8",
    }, "naïve ☃".encode())
    await eventually(lambda: rx.pushes)
    (push,) = rx.pushes
    signed(push)
    ce = {k: v for k, v in push.headers.items() if k.startswith("ce-")}
    assert ce == {
        "ce-specversion": "1.0", "ce-id": "order-1", "ce-source": "/shop", "ce-type": "com.example.created",
        "ce-subject": "caf%C3%A9%20%22q%22", "ce-time": "2026-11-27T08:00:00.5+01:00", "ce-region": "eu",
        "ce-traceparent": TRACEPARENT, "ce-tracestate": "v=1",
        "ce-tidingsnotification": ce["ce-tidingsnotification"], "ce-tidingseventid": str(event_id),
        "ce-tidingsnamespace": h.ns,
    }
    assert push.headers["content-type"] == "text/plain; charset=utf-8"
    assert push.headers["traceparent"] == TRACEPARENT
    assert push.headers["x-tidings-subscription"] == str(sub)
    assert push.body == "naïve ☃".encode()


async def test_structured_mode_for_an_icrc72_event(h: Harness) -> None:
    rx = Receiver()
    await h.subscribe("structured", rx)
    (r,) = await h.api("icrc72_publish", [{"namespace": h.ns, "data": {"Map": [
        ["total", {"Nat": 17}], ["who", {"Principal": "aaaaa-aa"}], ["ok", {"Bool": True}]]},
        "headers": [["traceparent", {"Text": TRACEPARENT}]]}])
    await eventually(lambda: rx.pushes)
    (push,) = rx.pushes
    signed(push)
    assert push.headers["content-type"] == "application/cloudevents+json"
    assert push.headers["traceparent"] == TRACEPARENT
    got = push.json()
    assert got.pop("time").endswith("Z")
    assert got == {
        "id": str(r["Ok"][0]), "source": f"tidings:{h.ns}", "type": h.ns, "specversion": "1.0",
        "datacontenttype": "application/json", "traceparent": TRACEPARENT,
        "tidingsnotification": got["tidingsnotification"], "tidingseventid": str(r["Ok"][0]),
        "tidingsnamespace": h.ns, "data": {"total": 17, "who": "aaaaa-aa", "ok": True},
    }


async def test_attributes_are_stable_across_retries(h: Harness) -> None:
    rx = Receiver(fail_first=2)
    await h.subscribe("binary", rx)
    await h.api("icrc72_publish", [{"namespace": h.ns, "data": {"Text": "x"}}])
    await eventually(lambda: len(rx.pushes) == 3)
    stable = ("ce-id", "ce-source", "ce-type", "ce-time", "ce-tidingsnotification", "ce-tidingseventid",
              "webhook-id")
    first = {k: rx.pushes[0].headers[k] for k in stable}
    for push in rx.pushes[1:]:
        assert {k: push.headers[k] for k in stable} == first
        assert push.body == rx.pushes[0].body
        signed(push)
    structured = Receiver(fail_first=1)
    await h.subscribe("structured", structured)
    await h.api("icrc72_publish", [{"namespace": h.ns, "data": {"Text": "y"}}])
    await eventually(lambda: len(structured.pushes) == 2)
    a, b = (p.json() for p in structured.pushes)
    assert a == b


async def test_several_in_one_push_are_batched(h: Harness) -> None:
    rx = Receiver()
    rx.hold.clear()
    await h.subscribe("binary", rx)
    await h.publish_ce({"content-type": "application/cloudevents+json"}, json.dumps(
        {"specversion": "1.0", "id": "first", "source": "/s", "type": "t", "data_base64": "AAE="}).encode())
    await eventually(lambda: rx.pushes)
    # While the first push is held, three more events wait: they go out together.
    await h.publish_ce({"content-type": "application/cloudevents-batch+json"}, json.dumps([
        {"specversion": "1.0", "id": f"b{i}", "source": "/s", "type": "t", "data": {"i": i}} for i in range(2)
    ]).encode())
    await h.api("icrc72_publish", [{"namespace": h.ns, "data": {"Nat": 5},
                                    "headers": [["traceparent", {"Text": TRACEPARENT}]]}])
    await asyncio.sleep(0.3)
    rx.hold.set()
    await eventually(lambda: len(rx.pushes) == 2)
    assert rx.pushes[0].headers["ce-id"] == "first"
    assert rx.pushes[0].body == b"\x00\x01"
    batch = rx.pushes[1]
    signed(batch)
    assert batch.headers["content-type"] == "application/cloudevents-batch+json"
    items = batch.json()
    assert [(e["id"], e.get("data")) for e in items] == [("b0", {"i": 0}), ("b1", {"i": 1}), (items[2]["id"], 5)]
    assert items[2]["source"] == f"tidings:{h.ns}"
    assert len({e["tidingsnotification"] for e in items}) == 3
    # The first traced event's context is the push's HTTP header; each keeps its own.
    assert batch.headers["traceparent"] == TRACEPARENT and "traceparent" not in items[0]
    assert items[2]["traceparent"] == TRACEPARENT


async def test_subscriptions_that_do_not_ask_get_todays_body(h: Harness) -> None:
    plain, ce = Receiver(), Receiver()
    await h.subscribe(None, plain)
    await h.subscribe("structured", ce)
    await h.publish_ce({"ce-specversion": "1.0", "ce-id": "1", "ce-source": "/s", "ce-type": "t",
                        "content-type": "application/json"}, b'{"a": 1}')
    await eventually(lambda: plain.pushes and ce.pushes)
    (push,) = plain.pushes
    assert push.headers["content-type"] == "application/json"
    assert not any(k.startswith("ce-") for k in push.headers)
    (note,) = push.json()
    assert note["data"] == {"Map": [["a", {"Nat": 1}]]} and note["eventId"] == 1
    assert ce.pushes[0].json()["data"] == {"a": 1}


async def test_the_mode_is_checked(h: Harness) -> None:
    (r,) = await h.api("icrc72_register_subscription", [{"namespace": h.ns, "endpoint": "http://127.0.0.1:9/",
                                                         "config": [["tidings:subscription:cloudevents",
                                                                     {"Text": "xml"}]]}])
    assert "tidings:subscription:cloudevents" in r["Err"]["ImproperConfig"]


async def test_an_icrc72_publish_keeps_the_requests_trace_context(server_factory: Any, endpoints: Any) -> None:
    """The W3C trace context of an ``icrc72_publish`` request becomes each event's (an
    event header) unless the event has its own, on whichever process the request lands
    (a server of three: the broker and two fronts), and CloudEvents pushes carry it."""
    server = server_factory(workers="3", retry_initial_s="0.05")
    rx = Receiver()
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with aiohttp.ClientSession() as http:
        h = Harness(server, http, "com.example.trace", endpoints)
        await h.api("icrc72_register_publication", [{"namespace": h.ns}])
        await h.subscribe("structured", rx)
        for i in range(6):
            async with aiohttp.ClientSession() as fresh, fresh.post(  # a connection of its own: any process
                f"{server.url}/v1/icrc72_publish", headers={
                    "authorization": f"Bearer {server.admin_token}", "traceparent": TRACEPARENT,
                    "tracestate": "v=1"},
                data=json.dumps([{"namespace": h.ns, "data": {"Nat": i}},
                                 {"namespace": h.ns, "data": {"Nat": i}, "headers": [["traceparent", {"Text": own}]]},
                                 ]) if i % 2 else json.dumps([{"namespace": h.ns, "data": {"Nat": i}}]),
            ) as r:
                assert r.status == 200, await r.text()
        async with http.post(f"{server.url}/v1/icrc72_publish", headers={
                "authorization": f"Bearer {server.admin_token}", "traceparent": "00-bad-01"},
                data=json.dumps([{"namespace": h.ns, "data": {"Nat": 99}}])) as r:
            assert r.status == 200
        await eventually(lambda: sum(len(p.json()) if p.headers["content-type"].endswith("batch+json") else 1
                                     for p in rx.pushes) == 10)
    events = []
    for p in rx.pushes:
        events.extend(p.json() if p.headers["content-type"].endswith("batch+json") else [p.json()])
    by_data = [(e["data"], e.get("traceparent"), e.get("tracestate")) for e in events]
    assert by_data.count((99, None, None)) == 1
    assert sorted(x for x in by_data if x[0] != 99) == sorted(
        [(i, TRACEPARENT, "v=1") for i in range(6)] + [(i, own, None) for i in (1, 3, 5)]
    )
