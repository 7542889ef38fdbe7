"""Soft and permanent deletes on the Confluent face, with Confluent's codes (docs/confluent.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka.schema_registry import Schema

from .confluent_support import Raw, client, refused
from .conftest import ServerProcess, admin_api

pytestmark = pytest.mark.e2e


def record(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [
        {"name": f, "type": "string", "default": ""} for f in fields]})


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("confluent-deletes")))
    s.start(new_port_if_taken=True)
    yield s
    s.stop()


@pytest.fixture
def raw(srv: ServerProcess, http: aiohttp.ClientSession) -> Raw:
    return Raw(http, srv)


async def register(raw: Raw, subject: str, schema: str | None = None, **extra: Any) -> int:
    answer = await raw.ok("POST", f"/subjects/{subject}/versions", {"schema": schema, **extra} if schema else extra)
    return int(answer["id"])


async def test_soft_delete_keeps_the_id_readable_and_listed_as_deleted(raw: Raw) -> None:
    s = "soft-value"
    id1 = await register(raw, s, record("Soft", "a"))
    id2 = await register(raw, s, record("Soft", "a", "b"))
    assert await raw.ok("DELETE", f"/subjects/{s}/versions/1") == 1

    # Gone from listings and reads without ?deleted ...
    assert await raw.ok("GET", f"/subjects/{s}/versions") == [2]
    assert await raw.code("GET", f"/subjects/{s}/versions/1") == (404, 40402)
    assert await raw.code("POST", f"/subjects/{s}", {"schema": record("Soft", "a")}) == (404, 40403)
    # ... but the id answers, and ?deleted=true shows the version everywhere.
    assert (await raw.ok("GET", f"/schemas/ids/{id1}"))["schema"] == record("Soft", "a")
    assert await raw.ok("GET", f"/subjects/{s}/versions?deleted=true") == [1, 2]
    assert await raw.ok("GET", f"/subjects/{s}/versions?deletedOnly=true") == [1]
    assert await raw.ok("GET", f"/subjects/{s}/versions?deletedAsNegative=true") == [-1, 2]
    assert (await raw.ok("GET", f"/subjects/{s}/versions/1?deleted=true"))["id"] == id1
    assert (await raw.ok("POST", f"/subjects/{s}?deleted=true", {"schema": record("Soft", "a")}))["version"] == 1
    assert await raw.ok("GET", f"/schemas/ids/{id1}/versions") == []
    assert await raw.ok("GET", f"/schemas/ids/{id1}/versions?deleted=true") == [{"subject": s, "version": 1}]
    listed = await raw.ok("GET", f"/schemas?subjectPrefix={s}&deleted=true")
    assert [(x["version"], x["id"]) for x in listed] == [(1, id1), (2, id2)]
    assert [x["version"] for x in await raw.ok("GET", f"/schemas?subjectPrefix={s}")] == [2]

    # The whole subject: soft first, and then it is listed only under ?deleted.
    assert await raw.ok("DELETE", f"/subjects/{s}") == [2]
    assert s not in await raw.ok("GET", "/subjects")
    assert s in await raw.ok("GET", "/subjects?deleted=true")
    assert s in await raw.ok("GET", "/subjects?deletedOnly=true")
    assert await raw.code("GET", f"/subjects/{s}/versions") == (404, 40401)
    assert (await raw.ok("GET", f"/subjects/{s}/versions/latest?deleted=true"))["version"] == 2
    assert (await raw.ok("GET", f"/schemas/ids/{id2}"))["schema"] == record("Soft", "a", "b")

    # Registering the same schema again: the same id, a new version number.
    assert await register(raw, s, record("Soft", "a")) == id1
    assert await raw.ok("GET", f"/subjects/{s}/versions") == [3]


async def test_each_refusal_has_confluents_code(raw: Raw) -> None:
    s = "codes-value"
    await register(raw, s, record("Codes", "a"))
    await register(raw, s, record("Codes", "a", "b"))
    assert await raw.code("DELETE", "/subjects/nobody") == (404, 40401)
    assert await raw.code("DELETE", "/subjects/nobody/versions/1") == (404, 40401)
    assert await raw.code("DELETE", f"/subjects/{s}/versions/9") == (404, 40402)
    assert await raw.code("DELETE", f"/subjects/{s}/versions/zero") == (422, 42202)
    # Permanent before soft: 40407 for a version, 40405 for a subject.
    assert await raw.code("DELETE", f"/subjects/{s}/versions/1?permanent=true") == (404, 40407)
    assert await raw.code("DELETE", f"/subjects/{s}?permanent=true") == (404, 40405)
    # Soft twice: 40406 for a version, 40404 for a subject.
    assert await raw.ok("DELETE", f"/subjects/{s}/versions/1") == 1
    assert await raw.code("DELETE", f"/subjects/{s}/versions/1") == (404, 40406)
    assert await raw.ok("DELETE", f"/subjects/{s}") == [2]
    assert await raw.code("DELETE", f"/subjects/{s}") == (404, 40404)
    # Then permanent works, once; after it the subject is unknown.
    assert await raw.ok("DELETE", f"/subjects/{s}/versions/1?permanent=true") == 1
    assert await raw.code("DELETE", f"/subjects/{s}/versions/1?permanent=true") == (404, 40402)
    assert await raw.ok("DELETE", f"/subjects/{s}?permanent=true") == [2]
    assert await raw.code("DELETE", f"/subjects/{s}?permanent=true") == (404, 40401)
    assert s not in await raw.ok("GET", "/subjects?deleted=true")


async def test_permanent_delete_frees_nothing_still_in_use(srv: ServerProcess, raw: Raw) -> None:
    shared = record("Shared", "a")
    sid = await register(raw, "left-value", shared)
    assert await register(raw, "right-value", shared) == sid
    await raw.ok("DELETE", "/subjects/left-value")
    assert await raw.ok("DELETE", "/subjects/left-value?permanent=true") == [1]
    # Still under the other subject: the id answers.
    assert (await raw.ok("GET", f"/schemas/ids/{sid}"))["schema"] == shared
    await raw.ok("DELETE", "/subjects/right-value")
    await raw.ok("DELETE", "/subjects/right-value?permanent=true")
    assert await raw.code("GET", f"/schemas/ids/{sid}") == (404, 40403)
    # Ids are never reused: the same text registered again gets a new one.
    assert await register(raw, "right-value", shared) > sid

    # A permanent delete also drops the subject's own compatibility level and mode.
    await raw.ok("PUT", "/config/cfg-value", {"compatibility": "NONE"})
    await raw.ok("PUT", "/mode/cfg-value", {"mode": "READWRITE"})
    await register(raw, "cfg-value", record("Cfg", "a"))
    await raw.ok("DELETE", "/subjects/cfg-value")
    assert await raw.ok("GET", "/mode/cfg-value") == {"mode": "READWRITE"}  # kept by a soft delete
    assert await raw.ok("GET", "/config/cfg-value") == {"compatibilityLevel": "NONE"}
    await raw.ok("DELETE", "/subjects/cfg-value?permanent=true")
    assert await raw.code("GET", "/mode/cfg-value") == (404, 40409)
    assert await raw.code("GET", "/config/cfg-value") == (404, 40408)
    assert await raw.ok("GET", "/config/cfg-value?defaultToGlobal=true") == {"compatibilityLevel": "BACKWARD"}


async def test_a_schema_a_publication_binds_is_not_deleted_without_force(
    srv: ServerProcess, raw: Raw, http: aiohttp.ClientSession
) -> None:
    by_id = await register(raw, "bound-id", record("BoundId", "a"))
    await register(raw, "bound-name", record("BoundName", "a"))
    await admin_api(http, srv, "icrc72_register_publication", [
        {"namespace": "bound.by_id", "config": [["tidings:publication:schema", {"Nat": by_id}]]},
        {"namespace": "bound.by_name", "config": [["tidings:publication:schema", {"Text": "bound-name"}]]},
    ])
    # By name: the subject's last live version may not go, even softly.
    assert await raw.code("DELETE", "/subjects/bound-name") == (409, 40960)
    assert await raw.code("DELETE", "/subjects/bound-name/versions/1") == (409, 40960)
    # By id: a soft delete keeps the id usable, so it is allowed; the permanent one is not.
    assert await raw.ok("DELETE", "/subjects/bound-id") == [1]
    event = [{"namespace": "bound.by_id", "data": {"Map": [["a", {"Text": "x"}]]}}]
    assert "Ok" in (await admin_api(http, srv, "icrc72_publish", event))[0]
    assert await raw.code("DELETE", "/subjects/bound-id?permanent=true") == (409, 40960)
    # force=true deletes anyway, and the publication then refuses events, saying why.
    assert await raw.ok("DELETE", "/subjects/bound-id?permanent=true&force=true") == [1]
    [res] = await admin_api(http, srv, "icrc72_publish", event)
    assert f"schema {by_id}" in res["Err"]["GenericError"]["message"]
    assert await raw.ok("DELETE", "/subjects/bound-name?force=true") == [1]


async def test_deletes_survive_a_restart(server: ServerProcess, http: aiohttp.ClientSession) -> None:
    raw = Raw(http, server)
    sid = await register(raw, "kept-value", record("Kept", "a"))
    await register(raw, "kept-value", record("Kept", "a", "b"))
    await raw.ok("DELETE", "/subjects/kept-value/versions/1")
    # References are kept too: the lookup after the restart finds the same schema.
    await raw.ok("POST", "/subjects/part/versions", {"schemaType": "JSON", "schema": '{"type": "string"}'})
    ref = [{"name": "part.json", "subject": "part", "version": 1}]
    whole = {"schemaType": "JSON", "schema": '{"type": "array", "items": {"$ref": "part.json"}}', "references": ref}
    wid = await register(raw, "whole", **whole)
    server.restart()
    async with aiohttp.ClientSession() as fresh:  # http's kept-alive connections went with the old process
        raw = Raw(fresh, server)
        assert (await raw.ok("POST", "/subjects/whole", whole))["id"] == wid
        assert (await raw.ok("GET", f"/schemas/ids/{wid}"))["references"] == ref
        assert await raw.ok("GET", "/subjects/part/versions/1/referencedby") == [wid]
        assert await raw.ok("GET", "/subjects/kept-value/versions") == [2]
        assert await raw.ok("GET", "/subjects/kept-value/versions?deleted=true") == [1, 2]
        assert (await raw.ok("GET", f"/schemas/ids/{sid}"))["schema"] == record("Kept", "a")
        assert await raw.code("DELETE", "/subjects/kept-value/versions/1") == (404, 40406)


def test_the_confluent_client_soft_then_permanent(srv: ServerProcess) -> None:
    with client(srv) as sr:
        sid = sr.register_schema("client-value", Schema(record("Client", "a"), "AVRO"))
        assert sr.delete_subject("client-value") == [1]
        assert sr.get_versions("client-value", deleted=True) == [1]
        assert sr.get_version("client-value", 1, deleted=True).schema_id == sid
        assert "client-value" in sr.get_subjects(deleted=True)
        assert refused(sr.delete_subject, "client-value") == (404, 40404)
        assert sr.delete_subject("client-value", permanent=True) == [1]
        assert refused(sr.get_versions, "client-value", deleted=True) == (404, 40401)
