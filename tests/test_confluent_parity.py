"""Confluent parity beyond the basics: modes, references, Protobuf, listings, and confluent-kafka's
serializers round-tripping through a running tidings (docs/confluent.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from .confluent_support import Raw, client, refused
from .conftest import ServerProcess, admin_api

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("confluent-parity")))
    s.start(new_port_if_taken=True)
    yield s
    s.stop()


@pytest.fixture
def raw(srv: ServerProcess, http: aiohttp.ClientSession) -> Raw:
    return Raw(http, srv)


def record(name: str, *fields: tuple[Any, ...]) -> str:
    """An Avro record; a field is ``(name, type)`` or ``(name, type, default)``."""
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": [
        {"name": f[0], "type": f[1], **({"default": f[2]} if len(f) > 2 else {})} for f in fields]})


def obj(**props: Any) -> str:
    return json.dumps({"type": "object", "properties": props, "required": list(props)})


async def publish(http: aiohttp.ClientSession, srv: ServerProcess, namespace: str, data: Any) -> Any:
    [res] = await admin_api(http, srv, "icrc72_publish", [{"namespace": namespace, "data": data}])
    return res


def fields(**kv: Any) -> dict[str, Any]:
    return {"Map": [[k, v] for k, v in kv.items()]}


# -- modes -------------------------------------------------------------------------------


async def test_modes_global_and_per_subject(srv: ServerProcess, raw: Raw, http: aiohttp.ClientSession) -> None:
    one = record("Mode", ("a", "string"))
    assert await raw.ok("GET", "/mode") == {"mode": "READWRITE"}
    assert await raw.code("GET", "/mode/ro-value") == (404, 40409)
    assert await raw.ok("GET", "/mode/ro-value?defaultToGlobal=true") == {"mode": "READWRITE"}

    # READONLY on a subject: no registration (either API), no delete; other subjects go on.
    await raw.ok("POST", "/subjects/ro-value/versions", {"schema": one})
    assert await raw.ok("PUT", "/mode/ro-value", {"mode": "readonly"}) == {"mode": "READONLY"}
    assert await raw.ok("GET", "/mode/ro-value") == {"mode": "READONLY"}
    two = record("Mode", ("a", "string"), ("b", ["null", "int"], None))
    assert await raw.code("POST", "/subjects/ro-value/versions", {"schema": two}) == (422, 42205)
    assert await raw.code("DELETE", "/subjects/ro-value") == (422, 42205)
    [res] = await admin_api(http, srv, "register_schema", [{"model": two, "format": "AVRO", "name": "ro-value"}])
    assert "InvalidState" in res["Err"]
    await raw.ok("POST", "/subjects/rw-value/versions", {"schema": one})
    assert await raw.ok("DELETE", "/mode/ro-value") == {"mode": "READONLY"}
    assert await raw.code("DELETE", "/mode/ro-value") == (404, 40409)
    await raw.ok("POST", "/subjects/ro-value/versions", {"schema": two})

    # Global READONLY: every subject without a mode of its own.
    await raw.ok("PUT", "/mode/own-value", {"mode": "READWRITE"})
    await raw.ok("PUT", "/mode", {"mode": "READONLY"})
    try:
        assert await raw.code("POST", "/subjects/rw-value/versions", {"schema": two}) == (422, 42205)
        await raw.ok("POST", "/subjects/own-value/versions", {"schema": one})
    finally:
        assert await raw.ok("DELETE", "/mode") == {"mode": "READONLY"}
    assert await raw.ok("GET", "/mode") == {"mode": "READWRITE"}
    assert await raw.code("PUT", "/mode", {"mode": "SIDEWAYS"}) == (422, 42204)
    assert await raw.code("PUT", "/mode/bad name", {"mode": "READONLY"}) == (422, 42208)

    with client(srv) as sr:  # confluent-kafka's own mode calls
        assert sr.update_mode("client-mode", "READONLY") == "READONLY"
        assert sr.get_mode("client-mode") == "READONLY"
        assert sr.delete_mode("client-mode") == "READONLY"
        assert sr.get_global_mode() == "READWRITE"


async def test_import_mode_keeps_ids_and_versions(raw: Raw) -> None:
    v1, bad = record("Imp", ("a", "string")), record("Imp", ("a", "int"))
    body = {"schema": v1, "id": 7001, "version": 3}
    assert await raw.code("POST", "/subjects/imp-value/versions", body) == (422, 42205)  # not in IMPORT mode
    await raw.ok("POST", "/subjects/busy-value/versions", {"schema": record("Busy", ("x", "string"))})
    # Switching to IMPORT where schemas exist needs force; an empty subject does not.
    assert await raw.code("PUT", "/mode", {"mode": "IMPORT"}) == (422, 42205)
    assert await raw.code("PUT", "/mode/busy-value", {"mode": "IMPORT"}) == (422, 42205)
    assert await raw.ok("PUT", "/mode/busy-value?force=true", {"mode": "IMPORT"}) == {"mode": "IMPORT"}
    assert await raw.ok("PUT", "/mode/imp-value", {"mode": "IMPORT"}) == {"mode": "IMPORT"}

    assert await raw.ok("POST", "/subjects/imp-value/versions", body) == {"id": 7001}
    got = await raw.ok("GET", "/subjects/imp-value/versions/3")
    assert (got["id"], got["version"], got["schema"]) == (7001, 3, v1)
    assert (await raw.ok("GET", "/schemas/ids/7001"))["schema"] == v1
    # IMPORT skips the compatibility check, and refuses an id or a version already taken.
    assert await raw.ok("POST", "/subjects/imp-value/versions", {"schema": bad, "id": 7002, "version": 4}) == {
        "id": 7002}
    taken = await raw.code("POST", "/subjects/imp-value/versions", {"schema": record("Imp2", ("z", "int")),
                                                                    "id": 7001})
    assert taken == (422, 42205)
    version_taken = {"schema": record("Imp3", ("z", "int")), "id": 7003, "version": 3}
    assert await raw.code("POST", "/subjects/imp-value/versions", version_taken) == (422, 42205)
    await raw.ok("DELETE", "/mode/imp-value")
    await raw.ok("DELETE", "/mode/busy-value")
    # Ids the registry assigns later go on above the imported ones.
    later = await raw.ok("POST", "/subjects/after-import/versions", {"schema": record("After", ("q", "long"))})
    assert later["id"] > 7002


# -- references --------------------------------------------------------------------------


async def test_json_schema_references(srv: ServerProcess, raw: Raw, http: aiohttp.ClientSession) -> None:
    customer = await raw.ok("POST", "/subjects/customer-json/versions", {
        "schemaType": "JSON", "schema": obj(name={"type": "string"})})
    ref = [{"name": "customer.json", "subject": "customer-json", "version": 1}]
    order = json.dumps({"type": "object", "properties": {"id": {"type": "integer"},
                                                         "customer": {"$ref": "customer.json"}}})
    body = {"schemaType": "JSON", "schema": order, "references": ref}
    oid = (await raw.ok("POST", "/subjects/order-json/versions", body))["id"]
    got = await raw.ok("GET", "/subjects/order-json/versions/1")
    assert got["references"] == ref and got["schema"] == order
    assert (await raw.ok("GET", f"/schemas/ids/{oid}"))["references"] == ref
    assert (await raw.ok("POST", "/subjects/order-json", body))["id"] == oid  # lookup
    assert await raw.ok("GET", "/subjects/customer-json/versions/1/referencedby") == [oid]
    assert await raw.ok("GET", f"/schemas/ids/{customer['id']}/referencedby") == [oid]

    # Without its reference the same text does not resolve: 42201.
    assert await raw.code("POST", "/subjects/order-json/versions", {"schemaType": "JSON", "schema": order}) == (
        422, 42201)
    missing = [{"name": "customer.json", "subject": "customer-json", "version": 9}]
    assert await raw.code("POST", "/subjects/x-json/versions", {**body, "references": missing}) == (422, 42201)

    # Compatibility looks through the reference: customer v2 makes name an integer.
    await raw.ok("PUT", "/config/customer-json", {"compatibility": "NONE"})
    await raw.ok("POST", "/subjects/customer-json/versions", {"schemaType": "JSON",
                                                              "schema": obj(name={"type": "integer"})})
    body2 = {**body, "references": [{**ref[0], "version": 2}]}
    check = await raw.ok("POST", "/compatibility/subjects/order-json/versions/latest", body2)
    assert check["is_compatible"] is False
    assert await raw.code("POST", "/subjects/order-json/versions", body2) == (409, 40901)

    # Events are validated through the reference too.
    await admin_api(http, srv, "icrc72_register_publication", [
        {"namespace": "ref.json", "config": [["tidings:publication:schema", {"Nat": oid}]]}])
    good = fields(id={"Nat": 1}, customer=fields(name={"Text": "ann"}))
    assert "Ok" in await publish(http, srv, "ref.json", good)
    bad = await publish(http, srv, "ref.json", fields(id={"Nat": 1}, customer=fields(name={"Nat": 3})))
    assert "customer" in bad["Err"]["GenericError"]["message"]

    # A referenced version is not deleted while a live schema refers to it: 42206.
    assert await raw.code("DELETE", "/subjects/customer-json/versions/1") == (422, 42206)
    assert await raw.ok("DELETE", "/subjects/order-json?force=true") == [1]
    assert await raw.ok("DELETE", "/subjects/customer-json/versions/1") == 1  # the referrer is soft-deleted
    assert await raw.code("DELETE", "/subjects/customer-json/versions/1?permanent=true") == (422, 42206)


@pytest.mark.parametrize("fmt", ["JSON", "AVRO"])
@pytest.mark.parametrize("deep", ["[" * 3000 + "]" * 3000, '{"a":' * 3000 + "1" + "}" * 3000])
async def test_a_text_nested_past_the_parser_is_refused_with_its_references_too(
    srv: ServerProcess, raw: Raw, fmt: str, deep: str
) -> None:
    # Resolving references parsed the text on a path of its own, which raised RecursionError: a 500.
    base = obj(name={"type": "string"}) if fmt == "JSON" else record("Base", ("name", "string"))
    await raw.ok("POST", f"/subjects/base-{fmt}/versions", {"schemaType": fmt, "schema": base})
    body = {"schemaType": fmt, "schema": deep, "references": [{"name": "base", "subject": f"base-{fmt}", "version": 1}]}
    assert await raw.code("POST", f"/subjects/deep-{fmt}/versions", body) == (422, 42201)
    assert await raw.code("POST", f"/compatibility/subjects/base-{fmt}/versions/latest", body) == (422, 42201)
    assert "Traceback" not in (srv.data_dir / "server.log").read_text()


async def test_avro_references(srv: ServerProcess, raw: Raw, http: aiohttp.ClientSession) -> None:
    customer = record("Customer", ("name", "string"))
    await raw.ok("POST", "/subjects/customer-avro/versions", {"schema": customer})
    ref = [{"name": "shop.Customer", "subject": "customer-avro", "version": 1}]
    order = record("Order", ("id", "long"), ("buyer", "Customer"), ("seller", "shop.Customer"))
    oid = (await raw.ok("POST", "/subjects/order-avro/versions", {"schema": order, "references": ref}))["id"]
    assert await raw.code("POST", "/subjects/order-avro/versions", {"schema": order}) == (422, 42201)
    assert await raw.ok("GET", "/subjects/customer-avro/versions/1/referencedby") == [oid]

    # The referenced record evolves incompatibly: the referrer's check sees it.
    await raw.ok("PUT", "/config/customer-avro", {"compatibility": "NONE"})
    await raw.ok("POST", "/subjects/customer-avro/versions", {"schema": record("Customer", ("name", "int"))})
    body2 = {"schema": order, "references": [{**ref[0], "version": 2}]}
    assert await raw.code("POST", "/subjects/order-avro/versions", body2) == (409, 40901)

    await admin_api(http, srv, "icrc72_register_publication", [
        {"namespace": "ref.avro", "config": [["tidings:publication:schema", {"Nat": oid}]]}])
    who = fields(name={"Text": "ann"})
    assert "Ok" in await publish(http, srv, "ref.avro", fields(id={"Nat": 1}, buyer=who, seller=who))
    bad = await publish(http, srv, "ref.avro", fields(id={"Nat": 1}, buyer=fields(name={"Nat": 2}), seller=who))
    assert "buyer" in bad["Err"]["GenericError"]["message"]

    with client(srv) as sr:  # the client sees the references
        latest = sr.get_latest_version("order-avro")
        assert [(r.name, r.subject, r.version) for r in latest.schema.references] == [
            ("shop.Customer", "customer-avro", 1)]
        assert sr.get_referenced_by("customer-avro", 1) == [oid]
        again = Schema(order, "AVRO", [SchemaReference("shop.Customer", "customer-avro", 1)])
        assert sr.register_schema("order-avro", again) == oid


# -- Protobuf ----------------------------------------------------------------------------

ORDER_PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  repeated string tags = 2;
  google.protobuf.Timestamp at = 3;
}
"""


async def test_protobuf_schemas_over_http(srv: ServerProcess, raw: Raw, http: aiohttp.ClientSession) -> None:
    assert "PROTOBUF" in await raw.ok("GET", "/schemas/types")
    body = {"schemaType": "PROTOBUF", "schema": ORDER_PROTO}
    pid = (await raw.ok("POST", "/subjects/order-proto/versions", body))["id"]
    got = await raw.ok("GET", f"/schemas/ids/{pid}")
    assert got == {"schema": ORDER_PROTO, "schemaType": "PROTOBUF"}
    serialized = (await raw.ok("GET", f"/schemas/ids/{pid}?format=serialized"))["schema"]
    # The same file sent as a base64 descriptor is the same schema.
    assert (await raw.ok("POST", "/subjects/order-proto", {"schemaType": "PROTOBUF", "schema": serialized}))[
        "id"] == pid

    # Confluent's rules: a field changing group is incompatible, a renamed or added field is not.
    changed = ORDER_PROTO.replace("int64 id = 1;", "string id = 1;")
    assert await raw.code("POST", "/subjects/order-proto/versions", {**body, "schema": changed}) == (409, 40901)
    evolved = ORDER_PROTO.replace("int64 id = 1;", "int64 order_id = 1;\n  string note = 4;")
    assert (await raw.ok("POST", "/subjects/order-proto/versions", {**body, "schema": evolved}))["id"] != pid
    broken = ORDER_PROTO.replace("int64 id = 1;", "Missing id = 1;")
    assert await raw.code("POST", "/subjects/order-proto/versions", {**body, "schema": broken}) == (422, 42201)

    await admin_api(http, srv, "icrc72_register_publication", [
        {"namespace": "proto.orders", "config": [["tidings:publication:schema", {"Text": "order-proto"}]]}])
    good = fields(order_id={"Nat": 5}, tags={"Array": [{"Text": "a"}]}, note={"Text": "n"},
                  at={"Text": "2026-01-01T00:00:00Z"})
    assert "Ok" in await publish(http, srv, "proto.orders", good)
    bad = await publish(http, srv, "proto.orders", fields(order_id={"Text": "five"}))
    assert bad["Err"]["GenericError"]["error_code"] == 2


def _order_class() -> Any:
    """A generated-like message class, built at test time from descriptors (no protoc)."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    customer = descriptor_pb2.FileDescriptorProto(name="tidings_test/customer.proto", package="crm", syntax="proto3")
    m = customer.message_type.add(name="Customer")
    m.field.add(name="name", number=1, type=9, label=1)
    order = descriptor_pb2.FileDescriptorProto(
        name="tidings_test/order.proto", package="shop", syntax="proto3",
        dependency=["tidings_test/customer.proto", "google/protobuf/timestamp.proto"])
    m = order.message_type.add(name="PbOrder")
    m.field.add(name="id", number=1, type=3, label=1)
    m.field.add(name="customer", number=2, type=11, label=1, type_name=".crm.Customer")
    m.field.add(name="at", number=3, type=11, label=1, type_name=".google.protobuf.Timestamp")
    pool.Add(customer)
    pool.Add(order)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.PbOrder"))


def test_confluent_serializers_round_trip(srv: ServerProcess) -> None:
    avro = record("SerOrder", ("id", "long"), ("note", "string"))
    js = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})
    with client(srv) as sr:
        ctx = SerializationContext("ser-avro", MessageField.VALUE)
        data = AvroSerializer(sr, avro)({"id": 5, "note": "hi"}, ctx)
        assert AvroDeserializer(sr)(data, ctx) == {"id": 5, "note": "hi"}

        ctx = SerializationContext("ser-json", MessageField.VALUE)
        data = JSONSerializer(js, sr)({"id": 3}, ctx)
        assert JSONDeserializer(None, schema_registry_client=sr)(data, ctx) == {"id": 3}

        order_cls = _order_class()
        ctx = SerializationContext("ser-proto", MessageField.VALUE)
        msg = order_cls(id=7)
        msg.customer.name = "ann"
        msg.at.seconds = 100
        data = ProtobufSerializer(order_cls, sr, {"use.deprecated.format": False})(msg, ctx)
        back = ProtobufDeserializer(order_cls, {"use.deprecated.format": False}, sr)(data, ctx)
        assert back == msg

    with client(srv) as sr:
        # The import became a subject of its own and a reference, as Confluent's serializer asks.
        latest = sr.get_latest_version("ser-proto-value")
        assert latest.schema.schema_type == "PROTOBUF"
        # Sent as a base64 descriptor, it reads back as .proto text, as from Confluent.
        assert latest.schema.schema_str.startswith('syntax = "proto3";\npackage shop;\n')
        assert "message PbOrder {" in latest.schema.schema_str
        assert [(r.name, r.subject) for r in latest.schema.references] == [
            ("tidings_test/customer.proto", "tidings_test/customer.proto")]
        assert {"ser-avro-value", "ser-json-value", "ser-proto-value"} <= set(sr.get_subjects())
        assert sr.get_schema_versions(latest.schema_id)[0].subject == "ser-proto-value"
        assert refused(sr.delete_version, "tidings_test/customer.proto", 1) == (422, 42206)


# -- listings ----------------------------------------------------------------------------


async def test_schema_listings_take_confluents_filters(raw: Raw) -> None:
    a1, a2 = record("ListA", ("a", "string")), record("ListA", ("a", "string"), ("b", ["null", "string"], None))
    id1 = (await raw.ok("POST", "/subjects/list-a/versions", {"schema": a1}))["id"]
    id2 = (await raw.ok("POST", "/subjects/list-a/versions", {"schema": a2}))["id"]
    await raw.ok("POST", "/subjects/list-b/versions", {"schema": a1})
    everything = await raw.ok("GET", "/schemas?subjectPrefix=list-")
    assert [(x["subject"], x["version"], x["id"]) for x in everything] == [
        ("list-a", 1, id1), ("list-a", 2, id2), ("list-b", 1, id1)]
    latest = await raw.ok("GET", "/schemas?subjectPrefix=list-&latestOnly=true")
    assert [(x["subject"], x["version"]) for x in latest] == [("list-a", 2), ("list-b", 1)]
    assert len(await raw.ok("GET", "/schemas?subjectPrefix=list-&offset=1&limit=1")) == 1
    assert await raw.ok("GET", f"/schemas/ids/{id1}/versions") == [
        {"subject": "list-a", "version": 1}, {"subject": "list-b", "version": 1}]
    assert await raw.ok("GET", f"/schemas/ids/{id1}/versions?subject=list-b") == [{"subject": "list-b", "version": 1}]
    await raw.ok("DELETE", "/subjects/list-b")
    assert [x["subject"] for x in await raw.ok("GET", "/schemas?subjectPrefix=list-b")] == []
    assert [x["subject"] for x in await raw.ok("GET", "/schemas?subjectPrefix=list-b&deleted=true")] == ["list-b"]
    assert await raw.ok("GET", f"/schemas/ids/{id1}/subjects?deleted=true") == ["list-a", "list-b"]
