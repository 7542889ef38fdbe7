"""Protobuf schemas: parsing .proto text and base64 descriptors, Confluent's compatibility rules,
event validation (src/tidings/schemas/formats/_protobuf*.py, REFERENCE §10)."""

from __future__ import annotations

import base64
import pickle
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, json_format, message_factory
from hypothesis import given
from hypothesis import strategies as st

from tidings.schemas.formats import MalformedSchema, check_compatibility, parse_model
from tidings.schemas.formats._icrc16 import to_json_instance
from tidings.schemas.formats._protobuf import ProtobufModel


def proto(body: str, package: str = "shop", syntax: str = "proto3", imports: str = "") -> str:
    return f'syntax = "{syntax}";\npackage {package};\n{imports}\n{body}\n'


BASE = proto("""
message Order {
  int64 id = 1;
  string note = 2;
  repeated int32 counts = 3;
  repeated string tags = 4;
  Item item = 5;
  map<string, int32> stock = 6;
  oneof pay { string card = 7; string iban = 8; }
  Kind kind = 9;
  message Item { string sku = 1; }
}
message Other { string x = 1; }
enum Kind { A = 0; B = 1; }
""")


def rules(old: str, new: str, mode: str = "BACKWARD") -> set[str]:
    return {i.rule for i in check_compatibility(mode, parse_model("PROTOBUF", new), [parse_model("PROTOBUF", old)])}


@pytest.mark.parametrize(("old", "new"), [
    ("int64 id = 1;", "int64 order_id = 1;"),  # renamed
    ("int64 id = 1;", "int64 id = 1; string extra = 20;"),  # added
    ("string note = 2;", ""),  # removed
    ("int64 id = 1;", "uint32 id = 1;"),  # the same scalar group
    ("int64 id = 1;", "bool id = 1;"),
    ("Kind kind = 9;", "int32 kind = 9;"),  # enums are in the int group
    ("string note = 2;", "bytes note = 2;"),
    ("repeated string tags = 4;", "string tags = 4;"),  # label change on a length-delimited field
    ("enum Kind { A = 0; B = 1; }", "enum Kind { A = 0; B = 1; C = 2; }"),
    ("enum Kind { A = 0; B = 1; }", "enum Kind { A = 0; }"),
    ("oneof pay { string card = 7; string iban = 8; }", "string card = 7; string iban = 8;"),  # out of a oneof
    ("string note = 2;", "oneof n { string note = 2; }"),  # alone into a new oneof
    ("message Other { string x = 1; }", "message Other { string x = 1; } message New { int32 y = 1; }"),
])
def test_compatible_changes(old: str, new: str) -> None:
    assert old in BASE
    assert rules(BASE, BASE.replace(old, new)) == set()


@pytest.mark.parametrize(("old", "new", "rule"), [
    ("package shop;", "package store;", "package-changed"),
    ("message Other { string x = 1; }", "", "message-removed"),
    ("int64 id = 1;", "sint64 id = 1;", "field-scalar-kind-changed"),
    ("int64 id = 1;", "string id = 1;", "field-scalar-kind-changed"),
    ("int64 id = 1;", "fixed64 id = 1;", "field-scalar-kind-changed"),
    ("string note = 2;", "Other note = 2;", "field-kind-changed"),
    ("map<string, int32> stock = 6;", "repeated Other stock = 6;", "field-kind-changed"),
    ("Item item = 5;", "Other item = 5;", "field-named-type-changed"),
    ("repeated int32 counts = 3;", "int32 counts = 3;", "field-numeric-label-changed"),
    ("oneof pay { string card = 7; string iban = 8; }", "oneof pay { string card = 7; }", "oneof-field-removed"),
    ("int64 id = 1;\n  string note = 2;", "oneof both { int64 id = 1; string note = 2; }", "field-moved-to-oneof"),
])
def test_incompatible_changes(old: str, new: str, rule: str) -> None:
    assert old in BASE
    assert rule in rules(BASE, BASE.replace(old, new))


def test_required_fields_in_proto2() -> None:
    old = proto("message M { optional int32 a = 1; }", syntax="proto2")
    added = proto("message M { optional int32 a = 1; required int32 b = 2; }", syntax="proto2")
    assert "required-field-added" in rules(old, added)
    assert "required-field-removed" in rules(added, old)
    assert rules(old, added, "NONE") == set()


def test_a_moved_message_is_compatible() -> None:
    nested = proto("message Order { Item item = 1; message Item { string sku = 1; } }")
    top = proto("message Order { Item item = 1; } message Item { string sku = 1; }")
    assert rules(nested, top) - {"field-named-type-changed"} == set()


@pytest.mark.parametrize(("text", "why"), [
    (proto("message A { int32 a = 1; int32 b = 1; }"), "duplicate field number"),
    (proto("message A { Nope a = 1; }"), "Nope"),
    (proto("message A { int32 a = 1 }"), "line"),
    (proto("message A {}", imports='import "other.proto";'), "other.proto"),
    (proto("enum E { A = 0; }"), "no message"),
    (proto("message A { int32 a = 1; string a = 2; }"), "a"),
    ("not a proto at all", "line"),
    ("QUJD", "base64"),
])
def test_malformed(text: str, why: str) -> None:
    with pytest.raises(MalformedSchema, match=why):
        parse_model("PROTOBUF", text)


def test_text_and_base64_descriptor_are_the_same_schema() -> None:
    text = proto("""
// comments and layout do not matter
message Order { int64 id = 1;   google.protobuf.Timestamp at = 2; repeated string tags = 3; }
""", imports='import "google/protobuf/timestamp.proto";')
    fdp = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3",
                                             dependency=["google/protobuf/timestamp.proto"])
    m = fdp.message_type.add(name="Order")
    m.field.add(name="id", number=1, type=3, label=1)
    m.field.add(name="at", number=2, type=11, label=1, type_name=".google.protobuf.Timestamp")
    m.field.add(name="tags", number=3, type=9, label=3)
    serialized = base64.b64encode(fdp.SerializeToString()).decode()
    a, b = parse_model("PROTOBUF", text), parse_model("PROTOBUF", serialized)
    assert a == b
    assert isinstance(a, ProtobufModel)
    assert parse_model("PROTOBUF", a.serialized()) == a
    assert pickle.loads(pickle.dumps(a)) == a


def test_imports_come_from_references() -> None:
    dep = proto("message Customer { string name = 1; }", package="crm")
    main = proto("message Order { crm.Customer customer = 1; }", imports='import "crm/customer.proto";')
    m = ProtobufModel(main, {"crm/customer.proto": dep})
    assert m.validate({"Map": [["customer", {"Map": [["name", {"Text": "ann"}]]}]]}) is None
    assert m.validate({"Map": [["customer", {"Map": [["name", {"Nat": 3}]]}]]}) is not None


def test_events_are_validated_against_the_first_message() -> None:
    m = parse_model("PROTOBUF", BASE)
    ok = {"Map": [["id", {"Nat": 5}], ["note", {"Text": "x"}], ["counts", {"Array": [{"Int": -1}]}],
                  ["item", {"Map": [["sku", {"Text": "s"}]]}], ["kind", {"Text": "B"}], ["card", {"Text": "c"}]]}
    assert m.validate(ok) is None
    assert m.validate({"Map": [["id", {"Text": "five"}]]}) is not None
    assert m.validate({"Map": [["nope", {"Nat": 1}]]}) is not None
    assert m.validate({"Map": [["kind", {"Text": "Z"}]]}) is not None
    assert m.validate({"Map": [["card", {"Text": "c"}], ["iban", {"Text": "i"}]]}) is not None  # one of a oneof
    nested = m.validate({"Map": [["item", {"Map": [["sku", {"Nat": 1}]]}], ["stock", {"Map": [["x", {"Text": "y"}]]}]]})
    assert nested is not None and nested.path == "$.item.sku"
    in_map = m.validate({"Map": [["stock", {"Map": [["x", {"Text": "y"}]]}]]})
    assert in_map is not None and in_map.path == "$.stock.x"
    in_list = m.validate({"Map": [["counts", {"Array": [{"Nat": 1}, {"Text": "two"}]}]]})
    assert in_list is not None and in_list.path == "$.counts[1]"


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_int32_fields_take_every_int32(n: int) -> None:
    m = _INT32
    assert m.validate({"Map": [["v", {"Int": n}]]}) is None
    assert m.validate({"Map": [["v", {"Int": n + 2**32}]]}) is not None


_INT32 = parse_model("PROTOBUF", proto("message V { int32 v = 1; }"))


_RICH = parse_model("PROTOBUF", proto("""
message R {
  int32 i32 = 1; int64 i64 = 2; uint32 u32 = 3; sint64 s64 = 4; double d = 5; float f = 6; bool b = 7;
  string s = 8; bytes by = 9; Kind k = 10; repeated int32 ri = 11; map<string, int64> m = 12;
  map<int32, string> mi = 13; Inner inner = 14; repeated Inner inners = 15;
  oneof o { string oa = 16; int32 ob = 17; }
  optional string maybe = 18; google.protobuf.Timestamp at = 19;
  message Inner { string x = 1; R back = 2; }
}
enum Kind { A = 0; B = 1; }
""", imports='import "google/protobuf/timestamp.proto";'))
_FIELDS = ["i32", "i64", "u32", "s64", "d", "f", "b", "s", "by", "k", "ri", "m", "mi", "inner", "inners", "oa", "ob",
           "maybe", "at", "nope"]
_scalar = st.one_of(
    st.integers(-(2**65), 2**65).map(lambda n: {"Nat": n} if n >= 0 else {"Int": n}),
    st.floats(allow_nan=False, width=64).map(lambda x: {"Float": x}),
    st.sampled_from(["A", "B", "C", "1", "-7", "1.5", "QUJD", "2026-01-01T00:00:00Z", "", "true"]).map(
        lambda t: {"Text": t}),
    st.booleans().map(lambda b: {"Bool": b}),
    st.just({"Option": None}),
)
_value = st.recursive(_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3).map(lambda xs: {"Array": xs}),
    st.lists(st.tuples(st.sampled_from([*_FIELDS, "1", "x"]), inner), max_size=4).map(
        lambda kv: {"Map": [[k, v] for k, v in kv]}),
), max_leaves=12)
_message = st.lists(st.tuples(st.sampled_from(_FIELDS), _value), max_size=5).map(
    lambda kv: {"Map": [[k, v] for k, v in kv]})


@given(_message)
def test_the_compiled_check_agrees_with_protobufs_json_mapping(value: Any) -> None:
    """The fast check never accepts what ``json_format.ParseDict`` refuses. It is stricter in
    a few places only, where Python's parser is lenient: a boolean is not a number, an
    array or a string is not a message, an enum number is an int32, and bytes are strict
    base64 (Python's decoder skips characters outside the alphabet)."""
    assert isinstance(_RICH, ProtobufModel)
    cls = message_factory.GetMessageClass(_RICH.file.message_types_by_name["R"])
    try:
        json_format.ParseDict(to_json_instance(value), cls())
        accepted = True
    except json_format.ParseError:
        accepted = False
    found = _RICH.validate(value)
    assert accepted or found is not None
    if found is not None and accepted:
        lenient = ("True is not", "False is not", "is not an object", "out of range", "is not an integer",
                   "is not base64")
        assert any(x in found.reason for x in lenient), found


@pytest.mark.parametrize("text", [
    BASE,
    _RICH.text,
    proto("message M { optional int32 a = 1 [default = 5]; required string b = 2; repeated int32 c = 3 "
          "[packed = true]; } enum E { option allow_alias = true; X = 0; Y = 0; }", syntax="proto2"),
    proto("message M { optional string a = 1; reserved \"old\"; message N { map<int32, M> m = 1; } }",
          package="a.b", imports='import public "google/protobuf/empty.proto";'),
])
def test_a_base64_descriptor_is_written_back_as_proto_text(text: str) -> None:
    model = parse_model("PROTOBUF", text)
    assert isinstance(model, ProtobufModel) and model.as_text() == text  # text stays as registered
    from_base64 = parse_model("PROTOBUF", model.serialized())
    assert isinstance(from_base64, ProtobufModel) and from_base64.from_descriptor
    written = from_base64.as_text()
    assert "syntax" in written and parse_model("PROTOBUF", written) == model
