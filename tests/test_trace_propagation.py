"""The event's W3C trace context on every push (docs/wire-format.md, docs/streaming.md):
the ``traceparent``/``tracestate`` HTTP headers of tidings' own JSON pushes (the first
traced notification's; each notification keeps its own in its headers), the fields of a
stream push, and what is read back from stored headers, whatever they hold."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core import tracecontext

from .conftest import ServerProcess, admin_api, eventually, read_body, respond
from .test_e2e_stream import ws_url

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OWN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NS = "com.example.traced"


@dataclass
class Receiver:
    """An endpoint keeping every push's headers and notifications; holds the first push
    until ``hold`` is set, so that what is published meanwhile goes out in one batch."""

    pushes: list[tuple[dict[str, str], list[Any]]] = field(default_factory=list)
    hold: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.pushes.append((headers, json.loads(await read_body(receive))))
        await self.hold.wait()
        await respond(send, 200, b"")


def trace_of(notification: Any) -> tuple[str | None, str | None]:
    pairs = {k: v.get("Text") for k, v in notification["headers"]}
    return pairs.get("traceparent"), pairs.get("tracestate")


async def publish(http: aiohttp.ClientSession, server: ServerProcess, events: list[Any], **headers: str) -> None:
    async with http.post(f"{server.url}/v1/icrc72_publish", data=json.dumps(events),
                         headers={"authorization": f"Bearer {server.admin_token}", **headers}) as r:
        assert r.status == 200, await r.text()
        assert all("Ok" in x for x in await r.json())


@pytest.mark.e2e
async def test_a_json_push_carries_the_first_traced_events_context_as_http_headers(
    server: ServerProcess, http: aiohttp.ClientSession, endpoints: Any
) -> None:
    rx = Receiver()
    ep = await endpoints(rx)
    await admin_api(http, server, "icrc72_register_publication", [{"namespace": NS}])
    await admin_api(http, server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}])
    await publish(http, server, [{"namespace": NS, "data": {"Nat": 0}}])  # untraced: held by the receiver
    await eventually(lambda: rx.pushes)
    # Pushed together once the first is answered: an untraced event, a malformed own
    # context (a header injection: ignored, not carried), the request's, an event's own.
    await publish(http, server, [{"namespace": NS, "data": {"Nat": 1}}])
    await publish(http, server, [{"namespace": NS, "data": {"Nat": 2},
                                  "headers": [["traceparent", {"Text": PARENT + "\r\nx-evil: 1"}]]}])
    await publish(http, server, [{"namespace": NS, "data": {"Nat": 3}},
                                 {"namespace": NS, "data": {"Nat": 4}, "headers": [["traceparent", {"Text": OWN}]]}],
                  traceparent=PARENT, tracestate="v=1")
    rx.hold.set()
    await eventually(lambda: sum(len(n) for _, n in rx.pushes) == 5)
    first_headers, _ = rx.pushes[0]
    assert "traceparent" not in first_headers and "tracestate" not in first_headers
    (headers, batch) = rx.pushes[1]  # 1..4, in one push
    assert [n["data"]["Nat"] for n in batch] == [1, 2, 3, 4]
    assert [trace_of(n) for n in batch] == [
        (None, None), (PARENT + "\r\nx-evil: 1", None), (PARENT, "v=1"), (OWN, None)
    ]  # each notification keeps its own headers as published
    assert headers["traceparent"] == PARENT and headers["tracestate"] == "v=1"
    assert "x-evil" not in headers


@pytest.mark.e2e
async def test_a_stream_push_carries_the_trace_context_as_fields(
    server: ServerProcess, http: aiohttp.ClientSession
) -> None:
    await admin_api(http, server, "icrc72_register_publication", [{"namespace": NS}])
    (r,) = await admin_api(http, server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": "stream:t"}])
    async with http.ws_connect(ws_url(server), headers={"authorization": f"Bearer {server.admin_token}"}) as ws:
        await ws.send_str(json.dumps({"op": "listen", "ref": 1, "subscriptions": [int(r["Ok"])]}))
        assert json.loads((await ws.receive(timeout=10)).data)["op"] == "listening"
        await publish(http, server, [{"namespace": NS, "data": {"Nat": 1}}], traceparent=PARENT, tracestate="v=1")
        push = json.loads((await ws.receive(timeout=10)).data)
        assert push["op"] == "push"
        assert (push["traceparent"], push["tracestate"]) == (PARENT, "v=1")
        assert [trace_of(n) for n in push["notifications"]] == [(PARENT, "v=1")]
        await ws.send_str(json.dumps({"op": "ack", "push": push["push"]}))
        await publish(http, server, [{"namespace": NS, "data": {"Nat": 2}}], traceparent="00-not-valid")
        push = json.loads((await ws.receive(timeout=10)).data)
        assert "traceparent" not in push and "tracestate" not in push
        assert [trace_of(n) for n in push["notifications"]] == [(None, None)]
        await ws.send_str(json.dumps({"op": "ack", "push": push["push"]}))


_text = st.text(max_size=80)
_value = st.one_of(st.builds(lambda t: {"Text": t}, _text), st.builds(lambda n: {"Nat": n}, st.integers(0, 2**70)),
                   st.just({"Text": PARENT}), st.just({"Text": "v=1"}))
_pairs = st.lists(st.tuples(st.sampled_from(["traceparent", "tracestate", "x", "icrc72:broadcaster:received"]),
                            _value), max_size=6)


@given(_pairs)
def test_what_is_read_from_stored_headers_is_a_valid_context_or_none(pairs: list[Any]) -> None:
    headers = msgspec.json.encode(pairs)
    got = tracecontext.of_headers(headers)
    parents = [v.get("Text") for k, v in pairs if k == "traceparent" and "Text" in v]
    if not parents or not tracecontext.valid_traceparent(parents[0]):
        assert got is None
        return
    assert got is not None and got.traceparent == parents[0]
    states = [v.get("Text") for k, v in pairs if k == "tracestate" and "Text" in v]
    expected = states[0] if states and tracecontext.valid_tracestate(states[0]) else None
    assert got.tracestate == expected


@given(st.binary(max_size=200))
def test_any_bytes_as_stored_headers_give_a_context_or_none(raw: bytes) -> None:
    got = tracecontext.of_headers(b'["traceparent"' + raw)
    assert got is None or tracecontext.valid_traceparent(got.traceparent)


def test_deeply_nested_headers_give_none() -> None:
    assert tracecontext.of_headers(b'[["traceparent",' + b"[" * 100_000 + b"]" * 100_000 + b"]]") is None
