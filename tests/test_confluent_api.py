"""The Confluent-compatible face, driven by confluent-kafka's own SchemaRegistryClient and raw HTTP.

One real server for the module; each test uses its own subjects.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka.schema_registry import Schema

from .confluent_support import MEDIA, call, client, refused
from .conftest import ServerProcess, admin_api

pytestmark = pytest.mark.e2e

def avro(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": list(fields)})


ORDER_V1 = avro({"name": "id", "type": "long"})
ORDER_V2 = avro({"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""})
ORDER_BAD = avro({"name": "id", "type": "long"}, {"name": "qty", "type": "int"})  # new field, no default
USER_V1 = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})
USER_BAD = json.dumps({"type": "object", "properties": {"name": {"type": "integer"}}})


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("confluent")))
    s.start(new_port_if_taken=True)
    yield s
    s.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def test_avro_evolution_through_the_confluent_client(srv: ServerProcess) -> None:
    subject = "orders-value"
    with client(srv) as sr:
        assert set(sr.get_schema_types()) == {"AVRO", "JSON", "PROTOBUF"}
        id1 = sr.register_schema(subject, Schema(ORDER_V1, "AVRO"))
        id2 = sr.register_schema(subject, Schema(ORDER_V2, "AVRO"))
        assert id2 != id1
        assert sr.get_versions(subject) == [1, 2]
        assert subject in sr.get_subjects()

        latest = sr.get_latest_version(subject)
        assert (latest.schema_id, latest.version, latest.subject) == (id2, 2, subject)
        assert latest.schema.schema_type == "AVRO" and json.loads(latest.schema.schema_str) == json.loads(ORDER_V2)
        assert sr.get_version(subject, 1).schema_id == id1
        assert sr.get_schema(id1).schema_str == ORDER_V1
        assert sr.get_subjects_by_schema_id(id1) == [subject]
        assert [(v.subject, v.version) for v in sr.get_schema_versions(id2)] == [(subject, 2)]

    with client(srv) as sr:  # no cache: the server answers
        # An identical schema (other whitespace: same canonical form) is the existing id, not a new version.
        assert sr.register_schema(subject, Schema(json.dumps(json.loads(ORDER_V1), indent=2))) == id1
        found = sr.lookup_schema(subject, Schema(ORDER_V1, "AVRO"))
        assert (found.schema_id, found.version) == (id1, 1)
        assert refused(sr.lookup_schema, subject, Schema(ORDER_BAD, "AVRO")) == (404, 40403)

        # BACKWARD (the default): a new field without a default cannot read old data.
        assert sr.get_compatibility() == "BACKWARD"
        assert sr.test_compatibility(subject, Schema(ORDER_BAD, "AVRO")) is False
        assert sr.test_compatibility_all_versions(subject, Schema(ORDER_BAD, "AVRO")) is False
        assert sr.test_compatibility(subject, Schema(ORDER_V2, "AVRO"), version=1) is True
        assert refused(sr.register_schema, subject, Schema(ORDER_BAD, "AVRO")) == (409, 40901)
        assert sr.get_versions(subject) == [1, 2]

        # Relax the subject, register, then tighten it again.
        assert sr.set_compatibility(subject, "NONE") == {"compatibility": "NONE"}
        assert sr.get_compatibility(subject) == "NONE"
        id3 = sr.register_schema(subject, Schema(ORDER_BAD, "AVRO"))
        assert sr.get_latest_version(subject).version == 3
        assert sr.delete_config(subject).compatibility_level.value == "NONE"
        assert refused(sr.get_compatibility, subject) == (404, 40408)  # no level of its own, as in Confluent

        # Deletion: a soft delete keeps the id readable; a permanent one (after it) does not.
        assert sr.delete_version(subject, 3) == 3
        assert sr.get_versions(subject) == [1, 2]
        assert sr.get_schema(id3).schema_str == ORDER_BAD
        assert sr.delete_subject(subject) == [1, 2]
        assert sr.delete_subject(subject, permanent=True) == [1, 2, 3]
        with client(srv) as fresh:  # sr caches the schemas it read
            assert refused(fresh.get_schema, id3) == (404, 40403)
        assert refused(sr.get_versions, subject) == (404, 40401)
        assert subject not in sr.get_subjects()
        assert sr.register_schema(subject, Schema(ORDER_V1, "AVRO")) > id3


async def test_json_schema_and_tidings_see_the_same_ids(srv: ServerProcess, http: aiohttp.ClientSession) -> None:
    with client(srv) as sr:
        sid = sr.register_schema("users-value", Schema(USER_V1, "JSON"))
        got = sr.get_schema(sid)
        assert (got.schema_str, got.schema_type) == (USER_V1, "JSON")
        assert sr.get_latest_version("users-value").schema.schema_type == "JSON"
        assert sr.test_compatibility("users-value", Schema(USER_BAD, "JSON")) is False
        assert refused(sr.register_schema, "users-value", Schema(USER_BAD, "JSON")) == (409, 40901)
        # The same model under a second subject keeps its id, as in Confluent.
        assert sr.register_schema("users-key", Schema(USER_V1, "JSON")) == sid
        assert sorted(sr.get_subjects_by_schema_id(sid)) == ["users-key", "users-value"]
        # Deleting it from one subject leaves it under the other.
        assert sr.delete_version("users-key", 1) == 1
        assert sr.delete_version("users-key", 1, permanent=True) == 1
        assert sr.get_subjects_by_schema_id(sid) == ["users-value"]
    with client(srv) as sr:  # a new client: the old one remembers what it registered
        assert sr.register_schema("users-key", Schema(USER_V1, "JSON")) == sid

    [info] = await admin_api(http, srv, "get_schema", [sid])
    assert (info["id"], info["format"], info["model"]) == (sid, "JSON", USER_V1)
    assert {(v["name"], v["version"]) for v in info["versions"]} == {("users-value", 1), ("users-key", 2)}

    # And what tidings registers is visible through the Confluent face.
    [res] = await admin_api(http, srv, "register_schema", [{"model": ORDER_V2, "format": "AVRO", "name": "native"}])
    status, body = await call(http, srv, "GET", "/subjects/native/versions/latest")
    assert status == 200 and body == {"subject": "native", "version": 1, "id": res["Ok"]["id"], "schema": ORDER_V2}


async def test_raw_endpoints(srv: ServerProcess, http: aiohttp.ClientSession) -> None:
    s = "team%2Fpayments-value"  # a subject holding "/", percent-encoded as clients send it
    status, body = await call(http, srv, "POST", f"/subjects/{s}/versions", {"schema": ORDER_V1})
    assert status == 200 and set(body) == {"id"}
    sid = body["id"]
    assert "team/payments-value" in (await call(http, srv, "GET", "/subjects"))[1]
    assert (await call(http, srv, "GET", "/subjects?subjectPrefix=team/"))[1] == ["team/payments-value"]
    assert await call(http, srv, "GET", f"/schemas/ids/{sid}") == (200, {"schema": ORDER_V1})  # AVRO: no schemaType
    assert await call(http, srv, "GET", f"/schemas/ids/{sid}/schema") == (200, json.loads(ORDER_V1))
    for v in ("1", "latest", "-1"):
        assert await call(http, srv, "GET", f"/subjects/{s}/versions/{v}/schema") == (200, json.loads(ORDER_V1))
    assert await call(http, srv, "GET", f"/subjects/{s}/versions/1/referencedby") == (200, [])
    listed = (await call(http, srv, "GET", "/schemas?subjectPrefix=team/"))[1]
    assert listed == [{"subject": "team/payments-value", "version": 1, "id": sid, "schema": ORDER_V1}]

    verbose = f"/compatibility/subjects/{s}/versions/latest?verbose=true"
    status, body = await call(http, srv, "POST", verbose, {"schema": ORDER_BAD, "schemaType": "AVRO"})
    assert status == 200 and body["is_compatible"] is False and body["messages"]
    assert await call(http, srv, "POST", f"/compatibility/subjects/{s}/versions", {"schema": ORDER_V2}) == (
        200, {"is_compatible": True, "messages": []})
    nothing = "/compatibility/subjects/fresh/versions/latest"  # a subject without versions accepts anything
    assert (await call(http, srv, "POST", nothing, {"schema": ORDER_BAD}))[1]["is_compatible"] is True

    assert await call(http, srv, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert await call(http, srv, "PUT", "/config", {"compatibility": "full"}) == (200, {"compatibility": "FULL"})
    assert await call(http, srv, "GET", f"/config/{s}?defaultToGlobal=true") == (200, {"compatibilityLevel": "FULL"})
    assert await call(http, srv, "DELETE", "/config") == (200, {"compatibilityLevel": "FULL"})
    assert await call(http, srv, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert await call(http, srv, "GET", "/mode") == (200, {"mode": "READWRITE"})
    assert await call(http, srv, "PUT", "/mode", {"mode": "READWRITE"}) == (200, {"mode": "READWRITE"})
    # Basic credentials carry the token as the password; the user name is ignored.
    basic = "Basic " + base64.b64encode(f"anyone:{srv.admin_token}".encode()).decode()
    async with http.get(f"{srv.url}/schemas/types", headers={"authorization": basic}) as resp:
        assert resp.status == 200 and await resp.json(content_type=MEDIA) == ["AVRO", "JSON", "PROTOBUF"]


async def test_errors_carry_confluent_codes(srv: ServerProcess, http: aiohttp.ClientSession) -> None:
    async def code(method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, int]:
        status, answer = await call(http, srv, method, path, body, **kw)
        assert set(answer) == {"error_code", "message"}, answer
        return status, answer["error_code"]

    await call(http, srv, "POST", "/subjects/errs/versions", {"schema": ORDER_V1})
    reg = "/subjects/errs/versions"
    assert await code("GET", "/subjects", token=None) == (401, 40101)
    assert await code("GET", "/subjects", token="tid_not-a-token") == (401, 40101)
    assert await code("GET", "/subjects/nobody/versions") == (404, 40401)
    assert await code("GET", "/subjects/errs/versions/7") == (404, 40402)
    assert await code("GET", "/subjects/errs/versions/0") == (422, 42202)
    assert await code("GET", "/subjects/errs/versions/first") == (422, 42202)
    assert await code("GET", "/schemas/ids/987654") == (404, 40403)
    assert await code("POST", "/subjects/errs", {"schema": ORDER_V2}) == (404, 40403)
    assert await code("POST", "/subjects/nobody", {"schema": ORDER_V1}) == (404, 40401)
    assert await code("POST", reg, {"schema": '{"type": "record", "name": "X"}'}) == (422, 42201)
    assert await code("POST", reg, {"schema": ORDER_V1, "schemaType": "PROTOBUF"}) == (422, 42201)
    assert await code("POST", reg, {"schema": ORDER_V1, "references": [  # a reference that resolves to nothing
        {"name": "x", "subject": "y", "version": 1}]}) == (422, 42201)
    assert await code("POST", reg, {"schema": '"int"'}) == (422, 42201)  # below the registry's minimum size
    big = avro(*({"name": f"f{i}", "type": "string", "default": "x" * 64} for i in range(1000)))
    assert await code("POST", "/subjects/big/versions", {"schema": big}) == (422, 42209)
    assert await code("POST", "/subjects/bad name/versions", {"schema": ORDER_V1}) == (422, 42208)
    assert await code("POST", reg, raw=b"{not json") == (400, 400)
    deep = b"[" * 3000 + b"]" * 3000  # past the decoder's depth, where any JSON is taken
    assert await code("POST", reg, raw=b'{"schema": "x", "metadata": ' + deep + b"}") == (400, 400)
    assert await code("PUT", "/config", raw=b'{"unknown": ' + deep + b"}") == (400, 400)
    assert await code("POST", reg, {"schemaType": "AVRO"}) == (422, 42201)
    assert await code("POST", reg, {"schema": ORDER_V1}, ctype="text/plain") == (415, 415)
    assert await code("POST", reg, {"schema": ORDER_BAD}) == (409, 40901)
    assert await code("PUT", "/config", {"compatibility": "SIDEWAYS"}) == (422, 42203)
    assert await code("PUT", "/config/errs", {"compatibility": ""}) == (422, 42203)
    assert await code("PUT", "/mode", {"mode": "SIDEWAYS"}) == (422, 42204)
    assert await code("GET", "/subjects/errs/versions/1/schema/extra") == (404, 404)
    assert await code("PATCH", "/config") == (405, 405)

    # A principal that is not an admin reads and registers, but does not delete or configure.
    created = await admin_api(http, srv, "tidings_create_principal", {"name": "reader"})
    reader = created["token"]
    assert (await call(http, srv, "GET", "/subjects/errs/versions", token=reader)) == (200, [1])
    assert await code("DELETE", "/subjects/errs", token=reader) == (403, 40301)
    assert await code("DELETE", "/subjects/errs/versions/1", token=reader) == (403, 40301)
    assert await code("PUT", "/config", {"compatibility": "NONE"}, token=reader) == (403, 40301)
    assert await code("PUT", "/config/errs", {"compatibility": "NONE"}, token=reader) == (403, 40301)
    with client(srv, reader) as sr:
        assert refused(sr.delete_subject, "errs") == (403, 40301)
        assert sr.get_versions("errs") == [1]
