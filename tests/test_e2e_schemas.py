"""The schema registry through the real server: registration checks, reads, states,
retention, evolution, events checked on publish, the SDK and the CLI."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tidings.client import ItemError, Publisher, Schemas, SchemaWarning
from tidings.store import PostgresStore

from .conftest import ServerProcess

pytestmark = pytest.mark.e2e

ORDER = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 0}, "currency": {"type": "string"}},
    "required": ["amount"],
}
ORDER_AVRO = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [{"name": "amount", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}],
}


class Api:
    """Raw ``POST /v1/<method>`` calls as one principal."""

    def __init__(self, http: aiohttp.ClientSession, server: ServerProcess, token: str) -> None:
        self.http, self.server, self.token = http, server, token

    async def raw(self, method: str, arg: Any) -> tuple[int, Any, Any]:
        async with self.http.post(
            f"{self.server.url}/v1/{method}", data=json.dumps(arg),
            headers={"authorization": f"Bearer {self.token}"},
        ) as resp:
            return resp.status, await resp.json(), resp.headers

    async def __call__(self, method: str, arg: Any) -> Any:
        status, body, _ = await self.raw(method, arg)
        assert status == 200, body
        return body

    async def register(self, model: Any, **kw: Any) -> Any:
        text = model if isinstance(model, str) else json.dumps(model)
        (r,) = await self("register_schema", [{"model": text, **kw}])
        return r

    async def as_(self, name: str, admin: bool = False) -> Api:
        created = await self("tidings_create_principal", {"name": name, "admin": admin})
        return Api(self.http, self.server, created["token"])


@pytest.fixture
async def api(server: ServerProcess) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as http:
        yield Api(http, server, server.admin_token)


def code(result: Any) -> str:
    (c,) = result["Err"].keys()
    return str(c)


async def test_formats_are_checked_for_well_formedness(api: Api) -> None:
    assert (await api.register(ORDER))["Ok"]["id"] == 1
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"n": {"type": "number", "exclusiveMinimum": 0}}}
    assert "Ok" in await api.register(draft7)
    assert "Ok" in await api.register(ORDER_AVRO, format="AVRO")
    bad = [
        ({"type": "object", "properties": {"a": {"type": "integr"}}}, "JSON"),  # not in the meta-schema
        ('{"type": "object",', "JSON"),  # not JSON
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "strng"}]}, "AVRO"),
        ({"type": "record", "name": "R"}, "AVRO"),  # no fields
        ({"type": "object"}, "PROTOBUF"),
    ]
    for model, fmt in bad:
        r = await api.register(model, format=fmt)
        assert code(r) == "MalformedSchema", (model, r)
        assert r["Err"]["MalformedSchema"]
    limits = await api("tidings_get_schema_limits", None)
    assert limits["count"] == 3


async def test_registration_checks_each_have_their_own_code(api: Api) -> None:
    bob = await api.as_("bob")
    # Only an admin changes the limits.
    status, body, _ = await bob.raw("tidings_update_schema_limits", {"max_count": 1})
    assert (status, body["error"]["code"]) == (403, "forbidden")
    await api("tidings_update_schema_limits", {"max_count": 2, "min_size": 10, "max_size": 200})

    assert code(await bob.register("{}")) == "SchemaTooSmall"
    big = {"type": "object", "description": "x" * 300}
    assert code(await bob.register(big)) == "SchemaTooLarge"
    first = await bob.register({"type": "object"})
    assert first["Ok"] == {"id": 1, "name": None, "version": None, "duplicate": False}
    # The same schema in another layout is a duplicate: its id comes back, nothing is added.
    again = await bob.register('{ "type" :\n  "object" }')
    assert again["Ok"]["id"] == 1 and again["Ok"]["duplicate"] is True
    assert "Ok" in await bob.register({"type": "string"})
    r = await bob.register({"type": "number"})
    assert code(r) == "TooManySchemas"
    # A duplicate is still answered at the maximum: it needs no room.
    assert (await bob.register({"type": "string"}))["Ok"]["duplicate"] is True

    # Closed registration: only admins and registrars.
    await api("tidings_update_schema_limits", {"max_count": 100, "open_registration": False,
                                                "registrars": ["carol"]})
    carol = await api.as_("carol")
    assert code(await bob.register({"type": "boolean"})) == "Unauthorized"
    assert "Ok" in await carol.register({"type": "boolean"})
    assert "Ok" in await api.register({"type": "null", "title": "by admin"})
    limits = await bob("tidings_get_schema_limits", None)
    assert limits["open_registration"] is False and limits["registrars"] == ["carol"] and limits["count"] == 4


async def test_ids_and_versions_are_never_reused(api: Api) -> None:
    # A closed model, so that adding an optional property is BACKWARD compatible (docs/schemas.md).
    closed = {**ORDER, "additionalProperties": False}
    memo = {**closed, "properties": {**ORDER["properties"], "memo": {"type": "string"}}}
    v1 = (await api.register(closed, name="shop.order"))["Ok"]
    assert (v1["id"], v1["name"], v1["version"]) == (1, "shop.order", 1)
    v2 = (await api.register(memo, name="shop.order"))["Ok"]
    assert (v2["id"], v2["version"]) == (2, 2)
    assert await api("delete_schema", [2]) == [{"Ok": True}]
    assert await api("get_schema", [2]) == [None]
    # The same model again gets a new id and a new version: neither 2 is given out twice.
    v3 = (await api.register(memo, name="shop.order"))["Ok"]
    assert (v3["id"], v3["version"], v3["duplicate"]) == (3, 3, False)
    versions = await api("tidings_get_schema_versions", ["shop.order", "nothing"])
    assert versions == [[{"name": "shop.order", "version": 1, "id": 1}, {"name": "shop.order", "version": 3, "id": 3}],
                        None]
    assert code(await api.register(ORDER, name="bad name")) == "ImproperName"
    assert code(await api.register(ORDER, replaces=99)) == "NotFound"


async def test_reads_listing_and_replacements(api: Api) -> None:
    ids = [(await api.register({"type": "object", "title": f"t{i}"}))["Ok"]["id"] for i in range(5)]
    newer = (await api.register({"type": "object", "title": "t0 fixed"}, replaces=ids[0]))["Ok"]["id"]
    (info,) = await api("get_schema", [ids[0]])
    assert info["id"] == ids[0] and info["format"] == "JSON" and json.loads(info["model"]) == {
        "type": "object", "title": "t0"}
    assert info["replaced_by"] == [newer] and info["replaces"] is None
    assert info["validity"]["state"] == "Active" and info["created_by"] == "admin"
    assert info["policy"] == {"retention_s": None, "starting_at": 0}
    assert (await api("get_schema", [newer]))[0]["replaces"] == ids[0]
    assert await api("tidings_get_schema_replacements", [ids[0], ids[1], 404]) == [[newer], [], None]
    assert (await api("get_schema_state", [ids[1], 404]))[0]["state"] == "Active"
    assert (await api("get_schema_state", [404])) == [None]
    page1 = await api("tidings_get_schemas", {"take": 4})
    page2 = await api("tidings_get_schemas", {"prev": page1[-1]["id"], "take": 4})
    assert [s["id"] for s in page1 + page2] == [*ids, newer]


async def test_states_windows_bulk_and_history(api: Api) -> None:
    bob = await api.as_("bob")
    ids = [(await api.register({"type": "object", "title": f"s{i}"}))["Ok"]["id"] for i in range(3)]
    until = time.time_ns() + 3600 * 10**9
    upd = [{"id": i, "state": "Deprecated", "valid_to": until} for i in ids[:2]]
    status, body, _ = await bob.raw("update_schema_state", upd)
    assert (status, body["error"]["code"]) == (403, "forbidden")  # admin-only: the whole call
    assert await api("update_schema_state", upd) == [{"Ok": True}] * 2  # bulk
    states = await api("get_schema_state", ids)
    assert [s["state"] for s in states] == ["Deprecated", "Deprecated", "Active"]
    assert states[0]["valid_to"] == until and states[0]["valid_from"] > 0
    assert await api("update_schema_state", [{"id": ids[2], "state": "Retracted"}]) == [{"Ok": True}]
    r = await api("update_schema_state", [{"id": ids[2], "state": "Active"}])
    assert code(r[0]) == "InvalidState"
    assert (await bob.raw("delete_schema", ids))[0] == 403
    assert await api("delete_schema", ids[:2]) == [{"Ok": True}] * 2
    assert [code(x) for x in await api("delete_schema", ids[:1])] == ["NotFound"]
    history = await api("tidings_get_schema_history", {"schema_id": ids[0]})
    assert [(h["action"], h["by"]) for h in history] == [
        ("register", "admin"), ("state", "admin"), ("delete", "admin")]
    assert all(h["at"] > 0 for h in history)
    everything = await api("tidings_get_schema_history", {})
    assert len(everything) == 3 + 2 + 1 + 2  # registrations, deprecations, retraction, deletions


async def test_compatibility_modes_refuse_with_the_reason(api: Api) -> None:
    base = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert "Ok" in await api.register(base, name="evo.a")
    # BACKWARD by default: a newly required field cannot read old data.
    narrower = {**base, "required": ["a"]}
    r = await api.register(narrower, name="evo.a")
    (issue, *_) = r["Err"]["IncompatibleSchema"]
    assert issue["version"] == 1 and issue["rule"] and "a" in issue["path"] + issue["message"]
    checked = await api("tidings_check_schema_compatibility", {"name": "evo.a", "model": json.dumps(narrower)})
    assert checked and checked[0]["rule"] == issue["rule"]
    assert await api("tidings_get_schema_compatibility", ["evo.a"]) == ["BACKWARD"]
    bob = await api.as_("bob")
    assert (await bob.raw("tidings_set_schema_compatibility", [{"name": "evo.a", "compatibility": "NONE"}]))[0] == 403
    await api("tidings_set_schema_compatibility", [{"name": "evo.a", "compatibility": "NONE"}])
    assert (await api.register(narrower, name="evo.a"))["Ok"]["version"] == 2
    bad = await api("tidings_set_schema_compatibility", [{"name": "evo.a", "compatibility": "SIDEWAYS"}])
    assert code(bad[0]) == "ImproperConfig"

    # Avro under FULL_TRANSITIVE: a field without a default can be neither added nor removed.
    await api("tidings_set_schema_compatibility", [{"name": "evo.avro", "compatibility": "FULL_TRANSITIVE"}])
    assert "Ok" in await api.register(ORDER_AVRO, name="evo.avro", format="AVRO")
    added = {**ORDER_AVRO, "fields": [*ORDER_AVRO["fields"], {"name": "sku", "type": "string"}]}
    assert code(await api.register(added, name="evo.avro", format="AVRO")) == "IncompatibleSchema"
    with_default = {**ORDER_AVRO, "fields": [*ORDER_AVRO["fields"], {"name": "sku", "type": "string", "default": ""}]}
    assert (await api.register(with_default, name="evo.avro", format="AVRO"))["Ok"]["version"] == 2


async def test_transitive_modes_stop_drift(api: Api) -> None:
    # A has f: int; B drops f; C brings f back as a string with a default. Each step is
    # BACKWARD compatible with the one before, but C cannot read what A wrote.
    def rec(*fields: dict[str, Any]) -> dict[str, Any]:
        return {"type": "record", "name": "R", "fields": list(fields)}

    a = rec({"name": "f", "type": "int"}, {"name": "id", "type": "long"})
    b = rec({"name": "id", "type": "long"})
    c = rec({"name": "f", "type": "string", "default": ""}, {"name": "id", "type": "long"})
    for name, mode in (("drift.plain", "BACKWARD"), ("drift.trans", "BACKWARD_TRANSITIVE")):
        await api("tidings_set_schema_compatibility", [{"name": name, "compatibility": mode}])
        assert "Ok" in await api.register(a, name=name, format="AVRO")
        assert "Ok" in await api.register(b, name=name, format="AVRO")
    assert (await api.register(c, name="drift.plain", format="AVRO"))["Ok"]["version"] == 3
    r = await api.register(c, name="drift.trans", format="AVRO")
    assert {i["version"] for i in r["Err"]["IncompatibleSchema"]} == {1}


async def events_left(server: ServerProcess, namespaces: list[str]) -> dict[str, int]:
    """How many events of each namespace the server's store holds, read from the store."""
    address = server.env.get("TIDINGS_STORE")
    if address is None:
        with sqlite3.connect(server.data_dir / "tidings.db") as db:
            return dict(db.execute("SELECT namespace, COUNT(*) FROM events GROUP BY namespace").fetchall())
    store = PostgresStore(address)
    await store.open()
    try:
        return {ns: await store.count_events(ns) for ns in namespaces}
    finally:
        await store.close()


async def test_retention_is_set_by_admins_and_the_store_trims(api: Api, server: ServerProcess) -> None:
    sid = (await api.register(ORDER))["Ok"]["id"]
    bob = await api.as_("bob")
    assert (await bob.raw("update_schema_retention", [{"id": sid, "retention_s": 1}]))[0] == 403
    assert await api("update_schema_retention", [{"id": sid, "retention_s": 1}]) == [{"Ok": True}]
    assert await api("get_retention_period", [sid, 999]) == [{"retention_s": 1, "starting_at": 0}, None]
    # The starting position is the store's: there is no public way to set it.
    status, body, _ = await api.raw("set_schema_starting_block", [{"id": sid, "starting_at": 5}])
    assert (status, body["error"]["code"]) == (404, "unknown_method")

    await api("icrc72_register_publication", [{"namespace": "kept.short", "config": [
        ["tidings:publication:schema", {"Nat": sid}]]}])
    await api("icrc72_register_publication", [{"namespace": "kept.forever", "config": []}])
    old = [{"namespace": ns, "data": {"Map": [["amount", {"Nat": i}]]}} for i in range(5)
           for ns in ("kept.short", "kept.forever")]
    assert all("Ok" in r for r in await api("icrc72_publish", old))
    await asyncio.sleep(1.2)
    await api("icrc72_publish", [{"namespace": "kept.short", "data": {"Map": [["amount", {"Nat": 9}]]}}])
    run = await api("tidings_apply_retention", None)
    (trimmed,) = run["namespaces"]
    assert (trimmed["namespace"], trimmed["schema_id"], trimmed["trimmed"]) == ("kept.short", sid, 5)
    (policy,) = await api("get_retention_period", [sid])
    assert policy["starting_at"] == trimmed["before"] > 0
    assert await events_left(server, ["kept.short", "kept.forever"]) == {"kept.short": 1, "kept.forever": 5}
    status, body, _ = await bob.raw("tidings_apply_retention", None)
    assert status == 403


async def test_events_are_checked_against_their_publications_schema(api: Api) -> None:
    sid = (await api.register(ORDER, name="shop.order"))["Ok"]["id"]
    avro = (await api.register(ORDER_AVRO, format="AVRO"))["Ok"]["id"]
    await api("icrc72_register_publication", [
        {"namespace": "shop.orders", "config": [["tidings:publication:schema", {"Nat": sid}]]},
        {"namespace": "shop.byname", "config": [["tidings:publication:schema", {"Text": "shop.order"}]]},
        {"namespace": "shop.avro", "config": [["tidings:publication:schema", {"Nat": avro}]]},
    ])
    refused = await api("icrc72_register_publication", [
        {"namespace": "shop.none", "config": [["tidings:publication:schema", {"Nat": 999}]]}])
    assert code(refused[0]) == "ImproperConfig"

    def order(**fields: Any) -> dict[str, Any]:
        return {"Map": [[k, v] for k, v in fields.items()]}

    batch = [
        {"namespace": "shop.orders", "data": order(amount={"Nat": 5}, currency={"Text": "EUR"})},
        {"namespace": "shop.orders", "data": order(amount={"Int": -5})},
        {"namespace": "shop.orders", "data": order(currency={"Text": "EUR"})},
        {"namespace": "shop.orders", "data": order(amount={"Nat": 7})},
        {"namespace": "shop.avro", "data": order(amount={"Nat": 1}, note={"Option": {"Text": "hi"}})},
        {"namespace": "shop.avro", "data": order(amount={"Text": "one"})},
    ]
    results = await api("icrc72_publish", batch)
    assert results[0] == {"Ok": [1]} and results[3] == {"Ok": [2]} and results[4] == {"Ok": [1]}
    for i, where in ((1, "$.amount"), (2, "$"), (5, "amount")):
        err = results[i]["Err"]["GenericError"]
        assert err["error_code"] == 2 and where in err["message"], err
    assert "minimum" in results[1]["Err"]["GenericError"]["message"]
    assert "amount" in results[2]["Err"]["GenericError"]["message"]

    # By name: the latest Active version. Deprecated: accepted with a Warning header.
    assert (await api("icrc72_publish", [{"namespace": "shop.byname", "data": order(amount={"Nat": 1})}]))[0]["Ok"]
    until = time.time_ns() + 3600 * 10**9
    await api("update_schema_state", [{"id": sid, "state": "Deprecated", "valid_to": until}])
    status, body, headers = await api.raw("icrc72_publish", [{"namespace": "shop.orders", "data": order(
        amount={"Nat": 3})}])
    assert status == 200 and "Ok" in body[0]
    assert headers["Warning"].startswith("299 ") and "Deprecated" in headers["Warning"]
    # A window that has ended refuses; so does a Retracted schema.
    await api("update_schema_state", [{"id": sid, "state": "Deprecated", "valid_from": time.time_ns() - 10,
                                       "valid_to": time.time_ns()}])
    r = await api("icrc72_publish", [{"namespace": "shop.orders", "data": order(amount={"Nat": 3})}])
    assert r[0]["Err"]["GenericError"]["error_code"] == 3
    await api("update_schema_state", [{"id": sid, "state": "Retracted"}])
    status, body, headers = await api.raw("icrc72_publish", [
        {"namespace": "shop.orders", "data": order(amount={"Nat": 3})},
        {"namespace": "shop.avro", "data": order(amount={"Nat": 3})},
    ])
    assert body[0]["Err"]["GenericError"]["error_code"] == 3 and "Retracted" in body[0]["Err"]["GenericError"][
        "message"]
    assert "Ok" in body[1] and "Warning" not in headers
    # By name, with no usable version left: refused.
    r = await api("icrc72_publish", [{"namespace": "shop.byname", "data": order(amount={"Nat": 1})}])
    assert r[0]["Err"]["GenericError"]["error_code"] == 3


async def test_sdk_and_cli(server: ServerProcess) -> None:
    async with Schemas(server.url, server.admin_token) as reg, Publisher(server.url, server.admin_token) as pub:
        s = await reg.register(ORDER, name="sdk.order")
        assert (s.id, s.version, s.duplicate) == (1, 1, False)
        assert (await reg.register(json.dumps(ORDER), name="sdk.order")).duplicate
        with pytest.raises(ItemError) as e:
            await reg.register("not json at all")
        assert e.value.code == "MalformedSchema"
        await pub.register_publication("sdk.orders", {"tidings:publication:schema": s.id})
        assert await pub.publish("sdk.orders", {"amount": 4}) == 1
        with pytest.raises(ItemError) as e:
            await pub.publish("sdk.orders", {"amount": "four"})
        assert e.value.code == "GenericError" and "$.amount" in e.value.detail.message
        await reg.deprecate([s.id], valid_to=time.time_ns() + 10**12)
        with pytest.warns(SchemaWarning, match="Deprecated"):
            assert await pub.publish("sdk.orders", {"amount": 5}) == 2
        assert (await reg.state(s.id)).state == "Deprecated"
        assert [v.version for v in await reg.versions("sdk.order")] == [1]
        await reg.set_retention(s.id, 3600)
        assert (await reg.retention(s.id)).retention_s == 3600

    base = ["--url", server.url]
    model = server.data_dir / "model.avsc"
    model.write_text(json.dumps(ORDER_AVRO))
    out = server.cli("schema", "register", str(model), "--format", "AVRO", "--name", "cli.order", *base)
    assert out == "2 (cli.order version 1)"
    assert "cli.order v1" in server.cli("schema", "list", *base)
    assert json.loads(server.cli("schema", "get", "2", *base))["format"] == "AVRO"
    assert server.cli("schema", "compatibility", "cli.order", "FULL", *base) == "FULL"
    assert server.cli("schema", "deprecate", "2", "--until", "2099-01-01T00:00:00", *base) == "deprecated 1 schema(s)"
    assert json.loads(server.cli("schema", "retention", "2", "60", *base))["retention_s"] == 60
    assert "state" in server.cli("schema", "history", "2", *base)
    assert server.cli("schema", "retract", "2", *base) == "retracted 1 schema(s)"


@pytest.mark.parametrize("setting", [None, "1"])
async def test_format_is_an_annotation_unless_asked_for(server_factory: Any, setting: str | None) -> None:
    """2020-12: a publish with a bad ``email`` passes, unless the schema's $vocabulary or
    TIDINGS_SCHEMA_FORMAT_ASSERTION makes ``format`` an assertion (docs/schemas.md)."""
    server = server_factory(**({"schema_format_assertion": setting} if setting else {}))
    plain = {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}}
    asking = {**plain, "$vocabulary": {"https://json-schema.org/draft/2020-12/vocab/core": True,
                                       "https://json-schema.org/draft/2020-12/vocab/format-assertion": True}}
    async with aiohttp.ClientSession() as http:
        api = Api(http, server, server.admin_token)
        ids = [(await api.register(m))["Ok"]["id"] for m in (plain, asking)]
        await api("icrc72_register_publication", [
            {"namespace": f"fmt.n{i}", "config": [["tidings:publication:schema", {"Nat": sid}]]}
            for i, sid in enumerate(ids)
        ])
        bad = {"Map": [["email", {"Text": "not an address"}]]}
        plain_result, asking_result = await api("icrc72_publish", [
            {"namespace": "fmt.n0", "data": bad}, {"namespace": "fmt.n1", "data": bad}])
    assert ("Ok" in plain_result) == (setting is None), plain_result
    assert asking_result["Err"]["GenericError"]["error_code"] == 2


async def test_binding_refuses_a_schema_that_takes_no_events(api: Api) -> None:
    """A schema publish would refuse (Retracted, Deprecated past its window, deleted, or a
    name with no usable version) is refused when a publication binds it, itemised; one
    retracted after binding shows in the publication's query and refuses its events."""
    ids = [(await api.register({**ORDER, "title": f"v{i}"}, name=f"bind.s{i}"))["Ok"]["id"] for i in range(4)]
    now = time.time_ns()
    assert await api("update_schema_state", [
        {"id": ids[0], "state": "Retracted"},
        {"id": ids[1], "state": "Deprecated", "valid_from": now - 10, "valid_to": now},
        {"id": ids[2], "state": "Deprecated", "valid_to": now + 3600 * 10**9},
    ]) == [{"Ok": True}] * 3

    def bind(ns: str, ref: Any) -> dict[str, Any]:
        return {"namespace": ns, "config": [["tidings:publication:schema", ref]]}

    results = await api("icrc72_register_publication", [
        bind("bind.retracted", {"Nat": ids[0]}), bind("bind.expired", {"Nat": ids[1]}),
        bind("bind.window", {"Nat": ids[2]}), bind("bind.active", {"Nat": ids[3]}),
        bind("bind.name.retracted", {"Text": "bind.s0"}), bind("bind.name.expired", {"Text": "bind.s1"}),
    ])
    assert code(results[0]) == code(results[1]) == code(results[4]) == code(results[5]) == "ImproperConfig"
    assert "Retracted" in results[0]["Err"]["ImproperConfig"]
    assert "window has ended" in results[1]["Err"]["ImproperConfig"]
    assert "Ok" in results[2] and "Ok" in results[3]
    # An update to such a schema is refused the same way; the publication keeps its old one.
    (upd,) = await api("icrc72_update_publication", [
        {"namespace": "bind.active", "config": [["tidings:publication:schema", {"Nat": ids[0]}]]}])
    assert code(upd) == "ImproperConfig"

    async def schema_stats(ns: str) -> dict[str, Any]:
        infos = await api("icrc72_get_publications", {"prev": None, "take": None, "statsFilter": None})
        info = next(i for i in infos if i["namespace"] == ns)
        return {k: v for k, v in info["stats"] if k.startswith("tidings:publication:schema:")}

    assert await schema_stats("bind.active") == {"tidings:publication:schema:accepting": {"Nat": 1}}
    # Retracted after binding: the publication stays, its events are refused, and it shows.
    await api("update_schema_state", [{"id": ids[3], "state": "Retracted"}])
    stats = await schema_stats("bind.active")
    assert stats["tidings:publication:schema:accepting"] == {"Nat": 0}
    assert "Retracted" in stats["tidings:publication:schema:refusal"]["Text"]
    (res,) = await api("icrc72_publish", [{"namespace": "bind.active", "data": {"Map": [["amount", {"Nat": 1}]]}}])
    assert res["Err"]["GenericError"]["error_code"] == 3


async def test_limits_cannot_pass_the_specifications_bounds(api: Api) -> None:
    for change in ({"max_count": 65_001}, {"max_size": 65_501}, {"min_size": 0}, {"max_count": 2**40},
                   {"min_size": 100, "max_size": 50}):
        status, body, _ = await api.raw("tidings_update_schema_limits", change)
        assert (status, body["error"]["code"]) == (400, "invalid_argument"), (change, body)
    limits = await api("tidings_update_schema_limits", {"max_count": 65_000, "max_size": 65_500, "min_size": 1})
    assert (limits["max_count"], limits["max_size"], limits["min_size"]) == (65_000, 65_500, 1)


async def test_schemas_equal_but_for_number_spelling_share_one_id(api: Api) -> None:
    first = await api.register('{"type": "integer", "minimum": 1, "maximum": 100}', name="num.a")
    again = await api.register('{"maximum": 1e2, "type": "integer", "minimum": 1.0}', name="num.a")
    assert first["Ok"]["id"] == again["Ok"]["id"], (first, again)
    # Exactly by value: 2**53 + 1 written as 9007199254740993.0 is the same number; 2**53
    # (one double away from it in no double at all) is another schema.
    big = await api.register('{"maximum": 9007199254740993}', name="num.b")
    same = await api.register('{"maximum": 9007199254740993.0}', name="num.b")
    other = await api.register('{"maximum": 9007199254740992.0}', name="num.c")
    assert same["Ok"]["id"] == big["Ok"]["id"] != other["Ok"]["id"], (big, same, other)
    assert other["Ok"]["duplicate"] is False
    # A number past a double is malformed, itemised, never a 5xx (Python's int refuses
    # 4,300 digits with a ValueError).
    for number in ("1e400", "1" + "0" * 5000):
        for fmt, model in (("JSON", f'{{"maximum": {number}}}'), ("AVRO", f'{{"type": "record", "name": "R", '
                                                                           f'"fields": [{{"name": "d", "type": '
                                                                           f'"double", "default": {number}}}]}}')):
            result = await api.register(model, format=fmt)
            assert code(result) == "MalformedSchema", (fmt, number[:10], result)


async def test_a_publication_whose_schema_was_retracted_can_still_be_updated(api: Api) -> None:
    """Only an update that sets the schema is a binding: other changes to a publication
    whose schema was retracted go through, and rebinding to a usable schema heals it."""
    old, new = [(await api.register({**ORDER, "title": t}))["Ok"]["id"] for t in ("old", "new")]
    await api("icrc72_register_publication", [
        {"namespace": "heal.me", "config": [["tidings:publication:schema", {"Nat": old}]]}])
    await api("update_schema_state", [{"id": old, "state": "Retracted"}])

    async def update(*pairs: Any) -> Any:
        (r,) = await api("icrc72_update_publication", [{"namespace": "heal.me", "config": [list(p) for p in pairs]}])
        return r

    assert await update(("x:note", {"Text": "still mine"})) == {"Ok": True}
    refused = await update(("tidings:publication:schema", {"Nat": old}))  # binding it again is refused
    assert "Retracted" in refused["Err"]["ImproperConfig"]
    assert await update(("tidings:publication:schema", {"Nat": new})) == {"Ok": True}
    (info,) = [i for i in await api("icrc72_get_publications", {}) if i["namespace"] == "heal.me"]
    stats = dict((k, v) for k, v in info["stats"] if k.startswith("tidings:publication:schema:"))
    assert stats == {"tidings:publication:schema:accepting": {"Nat": 1}}
    assert ["x:note", {"Text": "still mine"}] in info["config"]
    (res,) = await api("icrc72_publish", [{"namespace": "heal.me", "data": {"Map": [["amount", {"Nat": 1}]]}}])
    assert "Ok" in res, res
    # Unbinding (null) is no binding either: events go unchecked.
    await api("update_schema_state", [{"id": new, "state": "Retracted"}])
    assert await update(("tidings:publication:schema", None)) == {"Ok": True}
    (res,) = await api("icrc72_publish", [{"namespace": "heal.me", "data": {"Text": "anything"}}])
    assert "Ok" in res, res


async def test_deleting_a_bound_schema_is_refused_item_by_item(api: Api) -> None:
    """delete_schema never leaves a publication without its schema (docs/schemas.md)."""
    by_id = (await api.register({**ORDER, "title": "by id"}))["Ok"]["id"]
    free = (await api.register({**ORDER, "title": "free"}))["Ok"]["id"]
    v1 = (await api.register({**ORDER, "title": "n1"}, name="del.named"))["Ok"]["id"]
    v2 = (await api.register({**ORDER, "title": "n2"}, name="del.named"))["Ok"]["id"]
    await api("tidings_set_schema_compatibility", [{"name": "del.named", "compatibility": "NONE"}])
    await api("icrc72_register_publication", [
        {"namespace": "del.a", "config": [["tidings:publication:schema", {"Nat": by_id}]]},
        {"namespace": "del.b", "config": [["tidings:publication:schema", {"Text": "del.named"}]]},
    ])
    results = await api("delete_schema", [by_id, free, v1])
    assert code(results[0]) == "InvalidState" and "del.a" in results[0]["Err"]["InvalidState"]
    assert results[1] == {"Ok": True} and results[2] == {"Ok": True}  # the name keeps v2
    (last,) = await api("delete_schema", [v2])
    assert code(last) == "InvalidState" and "del.b" in last["Err"]["InvalidState"]
    (res,) = await api("icrc72_publish", [{"namespace": "del.a", "data": {"Map": [["amount", {"Nat": 1}]]}}])
    assert "Ok" in res
    # Unbound first, the schema may go.
    await api("icrc72_update_publication", [{"namespace": "del.a", "config": [["tidings:publication:schema", None]]}])
    assert await api("delete_schema", [by_id]) == [{"Ok": True}]
