"""Publishing CloudEvents (``POST /v1/cloudevents/<namespace>``) through the real server:
the three modes, the mapping of every attribute to the stored event, rights, schemas,
statistics, and hostile requests answered with a clear 4xx (docs/cloudevents.md)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import ServerProcess, eventually, read_body, respond

pytestmark = pytest.mark.e2e

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Recorder:
    """A trusted subscriber endpoint: keeps every notification pushed to it."""

    def __init__(self) -> None:
        self.notes: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.notes.extend(json.loads(await read_body(receive)))
        await respond(send)


@pytest.fixture(scope="module")
def ce_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("cloudevents")), env={"TIDINGS_MAX_BATCH_ITEMS": "100"})
    s.start(new_port_if_taken=True)
    yield s
    s.stop()


@dataclass
class Ce:
    server: ServerProcess
    http: aiohttp.ClientSession
    ns: str
    recorder: Recorder

    @property
    def url(self) -> str:
        return f"{self.server.url}/v1/cloudevents/{self.ns}"

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"authorization": f"Bearer {token or self.server.admin_token}"}

    async def post(self, body: bytes, headers: dict[str, str], token: str | None = None) -> tuple[int, Any]:
        async with self.http.post(self.url, data=io.BytesIO(body), headers={**self.auth(token), **headers}) as resp:
            raw = await resp.read()
            return resp.status, json.loads(raw) if raw else None

    async def api(self, method: str, arg: Any, token: str | None = None) -> Any:
        async with self.http.post(f"{self.server.url}/v1/{method}", data=json.dumps(arg),
                                  headers=self.auth(token)) as resp:
            body = await resp.json()
            assert resp.status == 200, body
            return body

    async def pushed(self, n: int) -> list[dict[str, Any]]:
        await eventually(lambda: len(self.recorder.notes) >= n)
        return self.recorder.notes


@pytest.fixture
async def ce(ce_server: ServerProcess, endpoints: Any) -> AsyncIterator[Ce]:
    recorder = Recorder()
    ep = await endpoints(recorder)
    async with aiohttp.ClientSession() as http:
        c = Ce(ce_server, http, f"com.example.ce.t{uuid.uuid4().hex[:10]}", recorder)
        await c.api("icrc72_register_publication", [{"namespace": c.ns}])
        await c.api("icrc72_register_subscription", [{"namespace": c.ns, "endpoint": ep.url}])
        yield c


def headers_of(note: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in note["headers"] if not k.startswith("icrc72:")}


async def test_binary_mode_maps_every_attribute(ce: Ce) -> None:
    status, body = await ce.post(b'{"total": 17, "items": ["a", "b"], "note": null}', {
        "content-type": "application/json; charset=utf-8",
        "ce-specversion": "1.0", "ce-id": "order-1", "ce-source": "/shop/orders",
        "ce-type": "com.example.order.created", "ce-subject": "caf%C3%A9 100%25",
        "ce-time": "2026-11-27T08:00:00.123456789+01:00", "ce-dataschema": "https://example.com/order.json",
        "ce-region": "eu", "ce-traceparent": TRACEPARENT, "ce-tracestate": "vendor=x",
    })
    assert (status, body) == (200, [{"Ok": [1]}])
    (note,) = await ce.pushed(1)
    assert headers_of(note) == {
        "cloudevents:specversion": {"Text": "1.0"},
        "cloudevents:id": {"Text": "order-1"},
        "cloudevents:source": {"Text": "/shop/orders"},
        "cloudevents:type": {"Text": "com.example.order.created"},
        "cloudevents:subject": {"Text": "café 100%"},
        "cloudevents:time": {"Text": "2026-11-27T08:00:00.123456789+01:00"},
        "cloudevents:dataschema": {"Text": "https://example.com/order.json"},
        "cloudevents:region": {"Text": "eu"},
        "cloudevents:datacontenttype": {"Text": "application/json; charset=utf-8"},
        "traceparent": {"Text": TRACEPARENT},
        "tracestate": {"Text": "vendor=x"},
    }
    assert note["data"] == {"Map": [
        ["total", {"Nat": 17}], ["items", {"Array": [{"Text": "a"}, {"Text": "b"}]}], ["note", {"Option": None}],
    ]}


async def test_binary_mode_text_bytes_and_no_data(ce: Ce) -> None:
    base = {"ce-specversion": "1.0", "ce-source": "s", "ce-type": "t"}
    assert (await ce.post("naïve ☃".encode(), {**base, "ce-id": "1", "content-type": "text/plain"}))[0] == 200
    octets = {**base, "ce-id": "2", "content-type": "application/octet-stream"}
    assert (await ce.post(b"\xff\x00\xfe", octets))[0] == 200
    assert (await ce.post(b"\xff\xfe", {**base, "ce-id": "3", "content-type": "text/plain; charset=utf-8"}))[0] == 200
    assert (await ce.post(b"", {**base, "ce-id": "4"}))[0] == 200
    notes = await ce.pushed(4)
    assert [n["data"] for n in notes] == [
        {"Text": "naïve ☃"}, {"Blob": base64.b64encode(b"\xff\x00\xfe").decode()},
        {"Blob": base64.b64encode(b"\xff\xfe").decode()}, {"Option": None},
    ]
    assert headers_of(notes[3]).get("cloudevents:data:absent") == {"Bool": True}
    assert "cloudevents:data:absent" not in headers_of(notes[0])


async def test_structured_mode_data_kinds_and_typed_extensions(ce: Ce) -> None:
    ct = {"content-type": "application/cloudevents+json; charset=utf-8"}
    base = {"specversion": "1.0", "source": "urn:x", "type": "t"}
    events = [
        {**base, "id": "1", "data": {"n": -3, "f": 1.5, "ok": True, "s": "ü"}, "flag": True, "count": -7},
        {**base, "id": "2", "data_base64": base64.b64encode(b"\x00\x01").decode()},
        {**base, "id": "3", "data": None},
        {**base, "id": "4"},
        {**base, "id": "5", "datacontenttype": "text/plain", "data": "plain text", "subject": None},
    ]
    for e in events:
        status, body = await ce.post(json.dumps(e).encode(), ct)
        assert status == 200, body
    notes = await ce.pushed(5)
    assert notes[0]["data"] == {"Map": [["n", {"Int": -3}], ["f", {"Float": 1.5}], ["ok", {"Bool": True}],
                                        ["s", {"Text": "ü"}]]}
    assert headers_of(notes[0])["cloudevents:flag"] == {"Bool": True}
    assert headers_of(notes[0])["cloudevents:count"] == {"Int": -7}
    assert notes[1]["data"] == {"Blob": "AAE="}
    # JSON null data and no data at all stay apart.
    assert notes[2]["data"] == notes[3]["data"] == {"Option": None}
    assert "cloudevents:data:absent" not in headers_of(notes[2])
    assert headers_of(notes[3])["cloudevents:data:absent"] == {"Bool": True}
    assert notes[4]["data"] == {"Text": "plain text"}
    assert "cloudevents:subject" not in headers_of(notes[4])  # null is absent (JSON format §2.2)


async def test_batched_mode_is_itemized(ce: Ce) -> None:
    batch = [{"specversion": "1.0", "id": str(i), "source": "s", "type": "t", "data": i} for i in range(3)]
    status, body = await ce.post(json.dumps(batch).encode(), {"content-type": "application/cloudevents-batch+json"})
    assert (status, body) == (200, [{"Ok": [1]}, {"Ok": [2]}, {"Ok": [3]}])
    notes = await ce.pushed(3)
    assert [n["data"] for n in notes] == [{"Nat": 0}, {"Nat": 1}, {"Nat": 2}]
    pubs = await ce.api("icrc72_get_publications", {"take": 1000})
    (pub,) = [p for p in pubs if p["namespace"] == ce.ns]
    assert dict(pub["stats"])["icrc72:publication:stats:events"] == {"Nat": 3}


async def test_request_traceparent_when_the_event_has_none(ce: Ce) -> None:
    base = {"ce-specversion": "1.0", "ce-source": "s", "ce-type": "t", "content-type": "application/json"}
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    await ce.post(b"1", {**base, "ce-id": "1", "traceparent": TRACEPARENT})
    await ce.post(b"2", {**base, "ce-id": "2", "traceparent": TRACEPARENT, "ce-traceparent": other})
    await ce.post(b"3", {**base, "ce-id": "3", "traceparent": "00-zz-bad-01", "tracestate": "a=b"})
    notes = await ce.pushed(3)
    assert headers_of(notes[0])["traceparent"] == {"Text": TRACEPARENT}
    assert headers_of(notes[1])["traceparent"] == {"Text": other}
    assert "traceparent" not in headers_of(notes[2]) and "tracestate" not in headers_of(notes[2])


async def test_rights_and_schemas_apply_as_for_publish(ce: Ce) -> None:
    created = await ce.api("tidings_create_principal", {"name": f"mallory{uuid.uuid4().hex[:6]}"})
    event = {"specversion": "1.0", "id": "1", "source": "s", "type": "t", "data": {"total": "x"}}
    ct = {"content-type": "application/cloudevents+json"}
    status, body = await ce.post(json.dumps(event).encode(), ct, token=created["token"])
    assert status == 403 and "Unauthorized" in body[0]["Err"]
    status, body = await ce.post(json.dumps(event).encode(), ct, token="nonsense")
    assert status == 401
    schema = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
    (reg,) = await ce.api("register_schema", [{"model": json.dumps(schema)}])
    await ce.api("icrc72_update_publication", [{"namespace": ce.ns, "config": [
        ["tidings:publication:schema", {"Nat": reg["Ok"]["id"]}]]}])
    status, body = await ce.post(json.dumps(event).encode(), ct)
    assert status == 422 and body[0]["Err"]["GenericError"]["error_code"] == 2
    status, body = await ce.post(json.dumps({**event, "data": {"total": 3}}).encode(), ct)
    assert (status, body) == (200, [{"Ok": [1]}])


def _good(**over: str) -> dict[str, str]:
    return {"ce-specversion": "1.0", "ce-id": "1", "ce-source": "s", "ce-type": "t",
            "content-type": "application/json", **over}


@pytest.mark.parametrize(("headers", "body", "attribute"), [
    ({k: v for k, v in _good().items() if k != "ce-id"}, b"1", "id"),
    ({k: v for k, v in _good().items() if k != "ce-source"}, b"1", "source"),
    ({k: v for k, v in _good().items() if k != "ce-type"}, b"1", "type"),
    (_good(**{"ce-specversion": "0.3"}), b"1", "specversion"),
    (_good(**{"ce-bad_name": "x"}), b"1", "bad_name"),
    (_good(**{"ce-time": "yesterday"}), b"1", "time"),
    (_good(**{"ce-time": "2026-02-30T00:00:00Z"}), b"1", "time"),
    (_good(**{"ce-time": "2026-11-27 08:00:00Z"}), b"1", "time"),
    (_good(**{"ce-id": "x" * 257}), b"1", "id"),
    (_good(**{"ce-id": ""}), b"1", "id"),
    (_good(**{"ce-subject": "%FF%FE"}), b"1", "subject"),
    (_good(**{"ce-subject": "a%0Ab"}), b"1", "subject"),
    (_good(**{"ce-source": "has space"}), b"1", "source"),
    (_good(**{"ce-dataschema": "relative/path"}), b"1", "dataschema"),
    (_good(**{"ce-datacontenttype": "text/plain"}), b"1", "datacontenttype"),
    (_good(), b"{not json", "datacontenttype"),
    (_good(**{"ce-data": "x"}), b"1", "data"),
], ids=["no-id", "no-source", "no-type", "specversion", "extension-name", "time-words", "time-feb-30",
        "time-space", "id-too-long", "id-empty", "non-utf8", "control-char", "source-space", "dataschema-relative",
        "ce-datacontenttype", "not-json", "ce-data"])
async def test_binary_refusals_name_the_attribute(ce: Ce, headers: dict[str, str], body: bytes,
                                                  attribute: str) -> None:
    status, answer = await ce.post(body, headers)
    assert status == 400, answer
    assert answer["error"]["code"] == "invalid_cloudevent"
    assert f"attribute {attribute!r}" in answer["error"]["message"]


@pytest.mark.parametrize(("event", "attribute"), [
    ({"id": "1", "source": "s", "type": "t"}, "specversion"),
    ({"specversion": 1.0, "id": "1", "source": "s", "type": "t"}, "specversion"),
    ({"specversion": "1.0", "id": 5, "source": "s", "type": "t"}, "id"),
    ({"specversion": "1.0", "id": "1", "source": "s", "type": "t", "Upper": "x"}, "Upper"),
    ({"specversion": "1.0", "id": "1", "source": "s", "type": "t", "big": 2**63}, "big"),
    ({"specversion": "1.0", "id": "1", "source": "s", "type": "t", "obj": {"a": 1}}, "obj"),
    ({"specversion": "1.0", "id": "1", "source": "s", "type": "t", "data": 1, "data_base64": "AA=="}, "data_base64"),
    ({"specversion": "1.0", "id": "1", "source": "s", "type": "t", "data_base64": "!!"}, "data_base64"),
    ({"specversion": "1.0", "id": "1", "source": "s", "type": "t", "time": "2026-11-27T25:00:00Z"}, "time"),
], ids=["no-specversion", "specversion-number", "id-number", "uppercase-extension", "int-past-int32",
        "object-extension", "data-and-base64", "bad-base64", "time-hour-25"])
async def test_structured_refusals_name_the_attribute(ce: Ce, event: dict[str, Any], attribute: str) -> None:
    status, answer = await ce.post(json.dumps(event).encode(), {"content-type": "application/cloudevents+json"})
    assert status == 400, answer
    assert f"attribute {attribute!r}" in answer["error"]["message"]


async def _raw_request(ce: Ce, head: bytes, body: bytes) -> tuple[int, bytes]:
    """One request written byte for byte (header values aiohttp would not send)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ce.server.port)
    try:
        writer.write(head + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def test_hostile_requests_are_clear_4xx(ce: Ce) -> None:
    path = f"/v1/cloudevents/{ce.ns}".encode()
    start = b"POST %b HTTP/1.1\r\nhost: x\r\nauthorization: Bearer %b\r\n" % (path, ce.server.admin_token.encode())
    ok = b"ce-specversion: 1.0\r\nce-source: s\r\nce-type: t\r\n"
    # A ce- header repeated.
    status, body = await _raw_request(ce, start + ok + b"ce-id: 1\r\nce-id: 2\r\n", b"")
    assert status == 400 and b"repeated" in body
    # Raw bytes that are not UTF-8 in an attribute's value.
    status, body = await _raw_request(ce, start + ok + b"ce-id: 1\r\nce-subject: \xff\xfe\r\n", b"")
    assert status == 400 and b"'subject'" in body
    # A huge header set: bounded, refused as a whole.
    many = b"".join(b"x-h%d: %b\r\n" % (i, b"v" * 100) for i in range(1000))
    status, body = await _raw_request(ce, start + ok + b"ce-id: 1\r\n" + many, b"")
    assert status == 431 and b"headers" in body, body
    # Too many attributes.
    attrs = b"".join(b"ce-x%d: v\r\n" % i for i in range(100))
    status, body = await _raw_request(ce, start + ok + b"ce-id: 1\r\n" + attrs, b"")
    assert status == 400 and b"attributes" in body
    # A batch of 100,000 events: refused by count, quickly.
    batch = json.dumps([{"specversion": "1.0", "id": str(i), "source": "s", "type": "t"} for i in range(100_000)])
    t0 = time.monotonic()
    status, answer = await ce.post(batch.encode(), {"content-type": "application/cloudevents-batch+json"})
    assert time.monotonic() - t0 < 5
    assert status in (400, 413), answer
    small = json.dumps([{"specversion": "1.0", "id": "x", "source": "s", "type": "t"}] * 101).encode()
    status, answer = await ce.post(small, {"content-type": "application/cloudevents-batch+json"})
    assert status == 400 and "at most 100" in answer["error"]["message"]
    # A batch with one bad event spoils the whole request, naming it.
    bad = [{"specversion": "1.0", "id": "1", "source": "s", "type": "t"}, {"specversion": "1.0", "id": "2"}]
    status, answer = await ce.post(json.dumps(bad).encode(), {"content-type": "application/cloudevents-batch+json"})
    assert status == 400 and answer["error"]["message"].startswith("event 1: attribute 'source'")
    # Not JSON, not a CloudEvent, another event format.
    for ct, payload in [("application/cloudevents+json", b"\xff{"), ("application/cloudevents-batch+json", b"{}"),
                        ("application/json", b"{}")]:
        status, answer = await ce.post(payload, {"content-type": ct})
        assert status == 400, (ct, answer)
    status, answer = await ce.post(b"x", {"content-type": "application/cloudevents+avro"})
    assert status == 415
    # Nothing of the above was stored, and the server is well.
    status, answer = await ce.post(b"1", _good())
    assert (status, answer) == (200, [{"Ok": [1]}])
    assert "Traceback" not in (ce.server.data_dir / "server.log").read_text()


_hostile_values = st.sampled_from([b"1.0", b"0.3", b"", b"x" * 300, b"%FF", b"%00", b"\xff\xfe", b"caf\xc3\xa9",
                                   b"2026-11-27T08:00:00Z", b"2026-99-99T99:99:99Z", b"/s", b"has space",
                                   b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"])
_names = st.sampled_from([b"ce-specversion", b"ce-id", b"ce-source", b"ce-type", b"ce-time", b"ce-subject",
                          b"ce-dataschema", b"ce-x", b"ce-bad_name", b"ce-", b"ce-data", b"traceparent"])
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.text(max_size=6)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
_structured = st.fixed_dictionaries(
    {}, optional={"specversion": st.sampled_from(["1.0", "0.3", 1]), "id": st.text(max_size=4) | st.integers(),
                  "source": st.sampled_from(["/s", "", "a b", "urn:x"]), "type": st.just("t"),
                  "time": st.sampled_from(["2026-11-27T08:00:00Z", "now", "2026-02-29T00:00:00Z"]),
                  "data": _json_values, "data_base64": st.sampled_from(["AAE=", "!!", 5]),
                  "ext": _json_values, "Bad": st.just("x")},
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    headers=st.lists(st.tuples(_names, _hostile_values), max_size=7),
    content_type=st.sampled_from([b"application/json", b"text/plain", b"application/cloudevents+json",
                                  b"application/cloudevents-batch+json", b"application/cloudevents+xml", None]),
    body=st.binary(max_size=30) | _structured.map(lambda d: json.dumps(d).encode())
    | st.lists(_structured, max_size=3).map(lambda d: json.dumps(d).encode()),
)
async def test_any_request_is_answered_without_a_5xx(
    ce: Ce, headers: list[tuple[bytes, bytes]], content_type: bytes | None, body: bytes
) -> None:
    path = f"/v1/cloudevents/{ce.ns}".encode()
    head = b"POST %b HTTP/1.1\r\nhost: x\r\nauthorization: Bearer %b\r\n" % (path, ce.server.admin_token.encode())
    if content_type is not None:
        head += b"content-type: " + content_type + b"\r\n"
    head += b"".join(k + b": " + v + b"\r\n" for k, v in headers)
    status, answer = await _raw_request(ce, head, body)
    assert status < 500, answer
    if status != 200:
        assert json.loads(answer)["error"]["message"]


async def test_the_webhook_handshake_as_a_receiver(ce: Ce) -> None:
    """tidings answers the CloudEvents webhook validation request (Web Hooks §4.2) of a
    sender that may publish to the namespace, echoing its origin; nobody else."""
    async def options(headers: dict[str, str], token: str | None = None, path: str | None = None) -> Any:
        return await ce.http.options(path or ce.url, headers={**ce.auth(token), **headers})

    async with await options({"WebHook-Request-Origin": "eventgrid.azure.net"}) as r:
        assert r.status == 200
        assert r.headers["WebHook-Allowed-Origin"] == "eventgrid.azure.net"
        assert "POST" in r.headers["Allow"]
    async with await options({}) as r:
        assert r.status == 200 and "WebHook-Allowed-Origin" not in r.headers
    async with ce.http.options(ce.url, headers={"WebHook-Request-Origin": "x.example"}) as r:
        assert r.status == 401 and "WebHook-Allowed-Origin" not in r.headers
    stranger = await ce.api("tidings_create_principal", {"name": f"eve{uuid.uuid4().hex[:6]}"})
    async with await options({"WebHook-Request-Origin": "x.example"}, stranger["token"]) as r:
        assert r.status == 403 and "WebHook-Allowed-Origin" not in r.headers
    async with await options({"WebHook-Request-Origin": "a b"}) as r:
        assert r.status == 400
    async with await options({"WebHook-Request-Origin": "x" * 256}) as r:
        assert r.status == 400
    async with await options({"WebHook-Request-Origin": "x.example"},
                             path=f"{ce.server.url}/v1/cloudevents/com.example.nothing") as r:
        assert r.status == 404
    async with ce.http.get(ce.url, headers=ce.auth()) as r:
        assert r.status == 405 and (await r.json())["error"]["code"] == "method_not_allowed"
        assert "POST" in r.headers["Allow"]


async def test_a_cloudevent_sent_again_is_a_repeat_of_the_first(ce: Ce) -> None:
    """CloudEvents 1.0 §3.1.1: ``source`` + ``id`` identify an event; a sender's retry of one
    stores nothing and answers its first id (docs/cloudevents.md, "Sent again")."""
    base = {"ce-specversion": "1.0", "ce-source": "/shop", "ce-type": "t", "content-type": "application/json"}
    assert await ce.post(b'{"n": 1}', {**base, "ce-id": "a"}) == (200, [{"Ok": [1]}])
    assert await ce.post(b'{"n": 1}', {**base, "ce-id": "a"}) == (200, [{"Ok": [1], "repeat": True}])
    structured = json.dumps({"specversion": "1.0", "source": "/shop", "id": "s", "type": "t", "data": {"n": 1}})
    for _ in range(2):  # in a batch, each event's source + id is its key
        assert (await ce.post(f"[{structured}]".encode(), {"content-type": "application/cloudevents-batch+json"}))[
            1][0]["Ok"] == [2]
    # Another source, the same id: another event.
    assert await ce.post(b'{"n": 1}', {**base, "ce-id": "a", "ce-source": "/other"}) == (200, [{"Ok": [3]}])
    # The same source and id with other data: refused, not mapped to the first.
    status, body = await ce.post(b'{"n": 2}', {**base, "ce-id": "a"})
    assert status == 422 and body[0]["Err"]["GenericError"]["error_code"] == 5
    # The publisher's own key wins over source + id.
    assert await ce.post(b'{"n": 3}', {**base, "ce-id": "b", "idempotency-key": "mine"}) == (200, [{"Ok": [4]}])
    assert await ce.post(b'{"n": 3}', {**base, "ce-id": "b", "idempotency-key": "mine"}) == (
        200, [{"Ok": [4], "repeat": True}])
    # A content that differs from the key's first event (its ce-id) is refused as another event.
    assert (await ce.post(b'{"n": 3}', {**base, "ce-id": "c", "idempotency-key": "mine"}))[0] == 422
    # Pushes go in event order: once event 5 is pushed, any repeat pushed would have been too.
    assert await ce.post(b'{"n": 5}', {**base, "ce-id": "last"}) == (200, [{"Ok": [5]}])
    await ce.pushed(5)
    assert [n["eventId"] for n in ce.recorder.notes] == [1, 2, 3, 4, 5]
