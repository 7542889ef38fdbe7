"""The round trip through the CloudEvents reference SDK (PyPI ``cloudevents``): events
written by the SDK in binary and structured mode are published to the real server,
pushed to subscriptions in both modes, read back by the SDK's own HTTP parsing in a real
receiver, and compared attribute by attribute and data for data. Then the CloudEvents
webhook handshake (docs/cloudevents.md)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http, to_binary, to_structured
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from .conftest import ServerProcess, eventually, read_body, respond

pytestmark = pytest.mark.e2e

NS = "com.example.sdk"
FORMAT = JSONFormat()
TIDINGS = ("tidingsnotification", "tidingseventid", "tidingsnamespace")


class SdkReceiver:
    """A subscriber endpoint that reads every push with the SDK: one CloudEvent by
    ``from_http`` (binary or structured, as the SDK tells them apart), a batch item by
    item with the SDK's JSON format. Answers the webhook handshake with ``allow``."""

    def __init__(self, allow: str | None = "*", status: int = 200) -> None:
        self.events: list[CloudEvent] = []
        self.modes: list[str] = []
        self.handshakes: list[dict[str, str]] = []
        self.allow = allow
        self.status = status

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body = await read_body(receive)
        if scope["method"] == "OPTIONS":
            self.handshakes.append(headers)
            allowed = [] if self.allow is None else [("WebHook-Allowed-Origin", self.allow)]
            await respond(send, self.status, b"", allowed, content_type=None)
            return
        if headers.get("content-type") == "application/cloudevents-batch+json":
            self.modes.append("batch")
            for item in json.loads(body):
                self.events.append(FORMAT.read(None, json.dumps(item).encode()))  # type: ignore[arg-type]
        else:
            self.modes.append("binary" if "ce-id" in headers else "structured")
            self.events.append(from_http(HTTPMessage(headers, body), FORMAT))  # type: ignore[arg-type]
        await respond(send, 202, b"")


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("ce-sdk")), env={
        "TIDINGS_RETRY_INITIAL_S": "0.05", "TIDINGS_RETRY_MAX_S": "0.2",
    })
    s.start(new_port_if_taken=True)
    yield s
    s.stop()


async def api(http: aiohttp.ClientSession, server: ServerProcess, method: str, arg: Any) -> Any:
    async with http.post(f"{server.url}/v1/{method}", data=json.dumps(arg),
                         headers={"authorization": f"Bearer {server.admin_token}"}) as r:
        body = await r.json()
        assert r.status == 200, body
        return body


def sdk_events(tag: str = "") -> list[CloudEvent]:
    """The kinds of data the issue names: a JSON payload, non-ASCII text, bytes; and
    every kind of attribute (with a non-ASCII subject, an extension, a trace context).
    ``tag`` ends each id: ``source`` and ``id`` identify a CloudEvent."""
    cet = timezone(timedelta(hours=1))
    common = {"source": "https://shop.example/orders", "type": "com.example.order.created"}
    return [
        CloudEvent({**common, "id": "json-1" + tag, "datacontenttype": "application/json", "subject": "Grüße ☃ 100%",
                    "time": datetime(2026, 11, 27, 8, 0, 0, 123456, tzinfo=cet), "region": "eu-west",
                    "dataschema": "https://shop.example/order.json",
                    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                   {"order": {"items": [{"sku": "a-1", "qty": 2}, {"sku": "b", "qty": 1}], "total": 12.5,
                              "note": None, "gift": False, "tags": ["é", "ü"], "big": 2**70}}),
        CloudEvent({**common, "id": "text-1" + tag, "datacontenttype": "text/plain; charset=utf-8",
                    "time": datetime(2026, 11, 27, 7, 0, tzinfo=UTC)}, "naïve café ☃ — ünïcödé"),
        CloudEvent({**common, "id": "bytes-1" + tag, "datacontenttype": "application/octet-stream",
                    "time": datetime(2026, 11, 27, 7, 0, 1, tzinfo=UTC), "partition": "7"},
                   b"\x00\xff\xfe binary \x80"),
    ]


def comparable(e: CloudEvent) -> tuple[dict[str, Any], Any]:
    return {k: v for k, v in e.get_attributes().items() if k not in TIDINGS}, e.get_data()


async def test_the_sdk_round_trip_in_both_modes(sdk_server: ServerProcess, endpoints: Any) -> None:
    binary_rx, structured_rx = SdkReceiver(), SdkReceiver()
    async with aiohttp.ClientSession() as http:
        await api(http, sdk_server, "icrc72_register_publication", [{"namespace": NS}])
        for rx, mode in ((binary_rx, "binary"), (structured_rx, "structured")):
            ep = await endpoints(rx)
            (r,) = await api(http, sdk_server, "icrc72_register_subscription", [{
                "namespace": NS, "endpoint": ep.url,
                "config": [["tidings:subscription:cloudevents", {"Text": mode}]]}])
            assert "Ok" in r
        sent = []
        for writer, tag in ((to_binary, "-b"), (to_structured, "-s")):
            for event in sdk_events(tag):
                message = writer(event, FORMAT)
                async with http.post(f"{sdk_server.url}/v1/cloudevents/{NS}", data=message.body, headers={
                        "authorization": f"Bearer {sdk_server.admin_token}", **message.headers}) as resp:
                    assert resp.status == 200, await resp.text()
                sent.append(event)
                # One at a time, so each push holds one event and keeps its mode.
                n = len(sent)
                await eventually(lambda: len(binary_rx.events) == n and len(structured_rx.events) == n)  # noqa: B023
        # The same CloudEvents (same source and id) sent again in the other mode are repeats:
        # answered with the first ids, stored and pushed no more (issue 45).
        for event in sdk_events("-b"):
            message = to_structured(event, FORMAT)
            async with http.post(f"{sdk_server.url}/v1/cloudevents/{NS}", data=message.body, headers={
                    "authorization": f"Bearer {sdk_server.admin_token}", **message.headers}) as resp:
                assert resp.status == 200, await resp.text()
                (item,) = await resp.json()
                assert item.get("repeat") is True, item
    assert binary_rx.modes == ["binary"] * 6 and structured_rx.modes == ["structured"] * 6
    for rx in (binary_rx, structured_rx):
        for want, got in zip(sent, rx.events, strict=True):
            assert comparable(got) == comparable(want)
            assert got.get_extension("tidingsnamespace") == NS
    # The three kinds of data came back as the SDK gave them: a dict, a str, bytes.
    assert [type(e.get_data()) for e in binary_rx.events[:3]] == [dict, str, bytes]


async def test_a_batch_is_read_by_the_sdk(sdk_server: ServerProcess, endpoints: Any) -> None:
    rx = SdkReceiver()
    hold = asyncio.Event()
    inner = rx.__call__

    entered: list[int] = []

    async def held(scope: dict[str, Any], receive: Any, send: Any) -> None:
        entered.append(1)
        await hold.wait()
        await inner(scope, receive, send)

    ns = NS + ".batch"
    async with aiohttp.ClientSession() as http:
        await api(http, sdk_server, "icrc72_register_publication", [{"namespace": ns}])
        ep = await endpoints(held)
        await api(http, sdk_server, "icrc72_register_subscription", [{
            "namespace": ns, "endpoint": ep.url, "config": [["tidings:subscription:cloudevents", {"Text": "binary"}]]}])
        events = sdk_events()
        for i, event in enumerate(events):
            message = to_structured(event, FORMAT)
            async with http.post(f"{sdk_server.url}/v1/cloudevents/{ns}", data=message.body, headers={
                    "authorization": f"Bearer {sdk_server.admin_token}", **message.headers}) as resp:
                assert resp.status == 200
            if i == 0:  # the first push is held at the receiver; the other two wait behind it
                await eventually(lambda: entered)
        hold.set()
        await eventually(lambda: len(rx.events) == 3)
    assert rx.modes == ["binary", "batch"]
    assert [comparable(e) for e in rx.events] == [comparable(e) for e in events]


@pytest.mark.parametrize(("allow", "status", "accepted"), [
    ("*", 200, True),
    ("127.0.0.1", 200, True),
    ("other.example", 200, False),
    (None, 200, False),
    ("*", 405, False),
], ids=["any-origin", "our-origin", "other-origin", "no-header", "not-2xx"])
async def test_the_webhook_handshake(sdk_server: ServerProcess, endpoints: Any, allow: str | None, status: int,
                                     accepted: bool) -> None:
    rx = SdkReceiver(allow, status)
    ep = await endpoints(rx)
    config = [["tidings:subscription:cloudevents", {"Text": "structured"}],
              ["tidings:subscription:cloudevents:handshake", {"Bool": True}]]
    async with aiohttp.ClientSession() as http:
        await api(http, sdk_server, "icrc72_register_publication", [{"namespace": NS}])
        (r,) = await api(http, sdk_server, "icrc72_register_subscription", [
            {"namespace": NS, "endpoint": ep.url, "config": config}])
    (handshake,) = rx.handshakes
    assert handshake["webhook-request-origin"] == "127.0.0.1"
    if accepted:
        assert "Ok" in r
    else:
        assert "tidings:subscription:cloudevents:handshake" in r["Err"]["ImproperConfig"]


async def test_the_handshake_is_asked_again_for_a_new_endpoint(sdk_server: ServerProcess, endpoints: Any) -> None:
    good, bad = SdkReceiver("*"), SdkReceiver(None)
    good_ep, bad_ep = await endpoints(good), await endpoints(bad)
    async with aiohttp.ClientSession() as http:
        await api(http, sdk_server, "icrc72_register_publication", [{"namespace": NS}])
        (r,) = await api(http, sdk_server, "icrc72_register_subscription", [
            {"namespace": NS, "endpoint": good_ep.url, "config": [
                ["tidings:subscription:cloudevents", {"Text": "binary"}]]}])
        sub = r["Ok"]
        assert good.handshakes == []  # not asked for: no handshake
        (u,) = await api(http, sdk_server, "icrc72_update_subscription", [{"id": sub, "config": [
            ["tidings:subscription:cloudevents:handshake", {"Bool": True}]]}])
        assert u == {"Ok": True} and len(good.handshakes) == 1
        (u,) = await api(http, sdk_server, "icrc72_update_subscription", [{"id": sub, "endpoint": bad_ep.url}])
        assert "handshake" in u["Err"]["ImproperConfig"] and len(bad.handshakes) == 1
        # Without the CloudEvents mode, the handshake cannot be asked for.
        (r,) = await api(http, sdk_server, "icrc72_register_subscription", [
            {"namespace": NS, "endpoint": good_ep.url, "config": [
                ["tidings:subscription:cloudevents:handshake", {"Bool": True}]]}])
        assert "tidings:subscription:cloudevents" in r["Err"]["ImproperConfig"]
