"""``GET /asyncapi.json`` and ``tidings asyncapi`` (docs/asyncapi.md): a document the
official AsyncAPI 3.0.0 JSON Schema accepts (vendored from npm ``@asyncapi/specs``
6.11.1, Apache-2.0: tests/asyncapi/), every bound schema under its channel in its own
format, every reference resolving, and each principal seeing only its own view."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.asyncapi import BoundSchema, ChannelView, Servers, channel_key, schema_format
from tidings.core.asyncapi import document as asyncapi_document

from .conftest import ServerProcess

pytestmark = pytest.mark.e2e

SPEC = json.loads((Path(__file__).parent / "asyncapi" / "asyncapi-3.0.0.schema.json").read_text())
VALIDATOR = jsonschema.Draft7Validator(SPEC)

JSON_2020 = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
             "properties": {"total": {"type": "integer"}}, "required": ["total"]}
JSON_07 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
           "properties": {"sku": {"type": "string"}}}
AVRO = {"type": "record", "name": "Payment", "namespace": "com.example",
        "fields": [{"name": "amount", "type": "long"}, {"name": "currency", "type": "string"}]}
PROTO = 'syntax = "proto3";\npackage shop;\nmessage Refund {\n  string id = 1;\n  int64 cents = 2;\n}\n'


async def call(http: aiohttp.ClientSession, server: ServerProcess, method: str, arg: Any, token: str) -> Any:
    async with http.post(f"{server.url}/v1/{method}", data=json.dumps(arg),
                         headers={"authorization": f"Bearer {token}"}) as r:
        body = await r.json()
        assert r.status == 200, body
        return body


async def document(http: aiohttp.ClientSession, server: ServerProcess, token: str | None) -> tuple[int, Any]:
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    async with http.get(f"{server.url}/asyncapi.json", headers=headers) as r:
        return r.status, await r.json()


def deref(doc: Any, node: Any) -> Any:
    """``node``, or what its ``$ref`` (within the document) points at."""
    while isinstance(node, dict) and "$ref" in node:
        target = doc
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def valid(doc: Any) -> None:
    errors = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message[:300]}" for e in errors[:5]]
    # What the JSON Schema cannot say: every $ref resolves, and an operation's messages
    # are messages of its own channel (AsyncAPI 3.0, Operation Object).
    def resolve(ref: str) -> Any:
        node = doc
        for part in ref.removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
            return own + [r for v in node.values() for r in refs(v)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    for ref in refs({k: v for k, v in doc.items() if k != "channels"}) + refs(
            [c["messages"] for c in doc["channels"].values()]):
        resolve(ref)
    for op in doc["operations"].values():
        channel = op["channel"]["$ref"]
        for m in op["messages"]:
            assert m["$ref"].startswith(channel + "/messages/")


async def test_the_document_is_valid_asyncapi_with_every_schema_kind(
    server_factory: Any, tmp_path: Path
) -> None:
    server: ServerProcess = server_factory(xmpp_component="tidings.localhost")
    admin = server.admin_token
    async with aiohttp.ClientSession() as http:
        ids = {}
        for name, fmt, model in [("orders", "JSON", json.dumps(JSON_2020)), ("items", "JSON", json.dumps(JSON_07)),
                                 ("payments", "AVRO", json.dumps(AVRO)), ("refunds", "PROTOBUF", PROTO)]:
            (r,) = await call(http, server, "register_schema", [{"model": model, "format": fmt}], admin)
            ids[name] = r["Ok"]["id"]
        bob = (await call(http, server, "tidings_create_principal", {"name": "bob"}, admin))["token"]
        alice = (await call(http, server, "tidings_create_principal", {"name": "alice"}, admin))["token"]
        await call(http, server, "icrc72_register_publication", [
            {"namespace": f"shop.{name}", "config": [["tidings:publication:schema", {"Nat": sid}]]}
            for name, sid in ids.items()
        ] + [
            {"namespace": "shop.plain"},
            {"namespace": "shop.secret", "config": [
                ["icrc72:publication:subscribers:disallowed:list", {"Array": [{"Principal": "bob"}]}]]},
        ], admin)
        await call(http, server, "icrc72_register_publication", [{"namespace": "alice.own"}], alice)
        await call(http, server, "icrc72_register_subscription", [
            {"namespace": "shop.*", "endpoint": "http://127.0.0.1:9/",
             "config": [["tidings:subscription:cloudevents", {"Text": "structured"}]]},
            {"namespace": "shop.orders", "endpoint": "http://127.0.0.1:9/",
             "config": [["tidings:subscription:cloudevents", {"Text": "binary"}]]},
        ], alice)

        status, doc = await document(http, server, admin)
        assert status == 200
        valid(doc)
        assert doc["asyncapi"] == "3.0.0"
        assert set(doc["servers"]) == {"http", "stream", "xmpp"}
        assert doc["servers"]["http"]["host"] == f"127.0.0.1:{server.port}"
        assert doc["servers"]["xmpp"]["host"] == "tidings.localhost"
        assert doc["components"]["securitySchemes"]["bearer"] == {
            "type": "http", "scheme": "bearer", "description": doc["components"]["securitySchemes"]["bearer"][
                "description"]}
        # Each bound schema under its channel, in its own format.
        want = {
            "orders": ("application/schema+json;version=2020-12", JSON_2020),
            "items": ("application/schema+json;version=draft-07", JSON_07),
            "payments": ("application/vnd.apache.avro+json;version=1.9.0", AVRO),
            "refunds": ("application/vnd.google.protobuf;version=3", PROTO),
        }
        for name, (fmt, schema) in want.items():
            channel = doc["channels"][f"ns-shop.{name}"]
            assert channel["address"] == f"shop.{name}"
            assert deref(doc, channel["messages"]["event"]["payload"]) == {"schemaFormat": fmt, "schema": schema}
            ops = doc["operations"]
            assert ops[f"publish.ns-shop.{name}"]["action"] == "send"
            assert ops[f"receive.ns-shop.{name}"]["action"] == "receive"
        assert "schemaFormat" not in deref(doc, doc["channels"]["ns-shop.plain"]["messages"]["event"]["payload"])
        notification = doc["channels"]["ns-shop.plain"]["messages"]["notification"]
        assert set(deref(doc, notification["headers"])["required"]) == {
            "webhook-id", "webhook-timestamp", "webhook-signature"}
        # The admin subscribes with no pattern and chose no CloudEvents.
        assert not any(k.startswith("pattern-") for k in doc["channels"])
        assert not any(m.startswith("cloudevent") for c in doc["channels"].values() for m in c["messages"])

        # Alice: her pattern and her CloudEvents modes; she publishes only to her own.
        status, doc = await document(http, server, alice)
        valid(doc)
        pattern = doc["channels"][channel_key("shop.*", True)]
        assert pattern["address"] == "shop.*" and "shop.orders" in pattern["description"]
        assert set(pattern["messages"]) == {"notification", "cloudevent-structured", "cloudevent-batch"}
        orders = doc["channels"]["ns-shop.orders"]["messages"]
        assert set(orders) == {"notification", "cloudevent-binary", "cloudevent-batch"}
        assert deref(doc, orders["cloudevent-binary"]["payload"])["schema"] == JSON_2020
        assert "publish.ns-shop.orders" not in doc["operations"]
        assert doc["operations"]["publish.ns-alice.own"]["action"] == "send"

        # Bob: not the namespace that refuses him, nothing of Alice's subscriptions.
        status, doc = await document(http, server, bob)
        valid(doc)
        assert "ns-shop.secret" not in doc["channels"]
        assert "ns-shop.orders" in doc["channels"]
        assert not any(k.startswith("pattern-") for k in doc["channels"])
        assert not any(m.startswith("cloudevent") for c in doc["channels"].values() for m in c["messages"])
        assert not any(k.startswith("publish.") for k in doc["operations"])

        assert (await document(http, server, None))[0] == 401
        assert (await document(http, server, "nonsense"))[0] == 401

    # The command prints the same document.
    out = subprocess.run([sys.executable, "-m", "tidings", "asyncapi", "--url", server.url, "--token", bob],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == doc


@given(st.text(alphabet="ab_:*.-é", max_size=6), st.text(alphabet="ab_:*.-é", max_size=6), st.booleans(),
       st.booleans())
def test_channel_keys_are_safe_and_distinct(a: str, b: str, pa: bool, pb: bool) -> None:
    ka, kb = channel_key(a, pa), channel_key(b, pb)
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in ka)
    assert (ka == kb) == ((a, pa) == (b, pb))


_SCHEMAS = [
    BoundSchema(1, "JSON", json.dumps(JSON_2020)), BoundSchema(2, "JSON", json.dumps(JSON_07)),
    BoundSchema(3, "AVRO", json.dumps(AVRO)), BoundSchema(4, "PROTOBUF", PROTO),
    BoundSchema(5, "JSON", json.dumps({"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"})),
    BoundSchema(6, "JSON", "true"),
]
_segment = st.from_regex(r"[A-Za-z0-9_:\-]{1,6}", fullmatch=True)
_namespace = st.lists(_segment, min_size=1, max_size=3).map(".".join)
_pattern = st.lists(_segment | st.just("*"), min_size=1, max_size=3).map(".".join) | _namespace.map(
    lambda n: n + ".**")
_views = st.lists(
    st.builds(ChannelView, _namespace, send=st.booleans(), receive=st.booleans(),
              schema=st.none() | st.sampled_from(_SCHEMAS),
              cloudevents=st.frozensets(st.sampled_from(["binary", "structured"])))
    | st.builds(lambda p, modes: ChannelView(p, pattern=True, receive=True, cloudevents=modes), _pattern,
                st.frozensets(st.sampled_from(["binary", "structured"]))),
    max_size=6, unique_by=lambda v: (v.address, v.pattern),
)


@settings(max_examples=60, deadline=None)
@given(_views, st.sampled_from(["http://127.0.0.1:8072", "https://tidings.example.com"]),
       st.none() | st.just("tidings.example.com"))
def test_any_view_writes_a_valid_document(views: list[ChannelView], url: str, xmpp: str | None) -> None:
    doc = asyncapi_document(views, Servers(url, xmpp), version="0.1.0", caller="alice")
    valid(doc)
    for v in views:
        key = channel_key(v.address, v.pattern)
        if not (v.send or v.receive):
            assert key not in doc["channels"]
            continue
        messages = doc["channels"][key]["messages"]
        if v.schema is not None and v.send and not v.pattern:
            assert deref(doc, messages["event"]["payload"])["schemaFormat"] == schema_format(v.schema)[0]
        assert ("cloudevent-binary" in messages) == ("binary" in v.cloudevents and v.receive)
    # Each bound schema is written once, however many channels use it, and only if used.
    text = json.dumps(doc["channels"])
    for key in doc["components"]["schemas"]:
        if key.startswith("schema-"):
            assert f'"#/components/schemas/{key}"' in text
