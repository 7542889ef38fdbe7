"""Schema formats: well-formedness, canonical forms, event validation, compatibility."""

from __future__ import annotations

import base64
import json
import pickle
from typing import Any

import fastavro
import pytest
from fastavro.validation import validate as fastavro_validate
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tidings.schemas.formats as formats
from tidings.core.values import Principal, from_python
from tidings.schemas.formats import (
    CompatibilityMode,
    Incompatibility,
    MalformedSchema,
    Model,
    SchemaFormat,
    Violation,
    check_compatibility,
    parse_model,
)
from tidings.schemas.formats._icrc16 import to_avro_instance, to_json_instance


def js(schema: Any) -> Model:
    return parse_model("JSON", json.dumps(schema))


def avro(schema: Any) -> Model:
    return parse_model("AVRO", json.dumps(schema))


def found(mode: str, new: Model, *previous: Model) -> set[tuple[str, str]]:
    return {(i.path, i.rule) for i in check_compatibility(mode, new, list(previous))}


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def wire_map(**items: Any) -> dict[str, Any]:
    return {"Map": [[k, v] for k, v in items.items()]}


# -- public surface ---------------------------------------------------------------------


def test_exported_names() -> None:
    assert sorted(formats.__all__) == sorted(
        [
            "CompatibilityMode",
            "Incompatibility",
            "MalformedSchema",
            "Model",
            "SchemaFormat",
            "Violation",
            "check_compatibility",
            "json_canonical",
            "parse_model",
        ]
    )
    assert [m.value for m in CompatibilityMode] == [
        "NONE",
        "BACKWARD",
        "BACKWARD_TRANSITIVE",
        "FORWARD",
        "FORWARD_TRANSITIVE",
        "FULL",
        "FULL_TRANSITIVE",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("JSON", SchemaFormat.JSON),
        ("json", SchemaFormat.JSON),
        (" JsonSchema ", SchemaFormat.JSON),
        ("JSON_SCHEMA", SchemaFormat.JSON),
        ("avro", SchemaFormat.AVRO),
        (None, SchemaFormat.AVRO),
    ],
)
def test_format_names(text: str | None, expected: SchemaFormat) -> None:
    assert SchemaFormat.parse(text) is expected


def test_unknown_format_and_mode() -> None:
    with pytest.raises(MalformedSchema, match="PROTOBUF"):
        SchemaFormat.parse("THRIFT")
    with pytest.raises(MalformedSchema):
        parse_model("parquet", "{}")
    assert CompatibilityMode.parse("full_transitive") is CompatibilityMode.FULL_TRANSITIVE
    with pytest.raises(ValueError, match="BACKWARD"):
        CompatibilityMode.parse("sideways")


def test_models_are_values() -> None:
    a = js({"type": "string"})
    b = parse_model(SchemaFormat.JSON, '{ "type" : "string" }')
    assert a == b and hash(a) == hash(b) and a.format is SchemaFormat.JSON
    assert a != avro("string")
    assert b.text == '{ "type" : "string" }'


def test_models_pickle() -> None:
    """Models travel to other processes (Spark executors) and come back whole."""
    for model, bad in ((js({"type": "string"}), {"Nat": 1}), (avro("string"), {"Nat": 1})):
        copy = pickle.loads(pickle.dumps(model))
        assert copy == model and copy.text == model.text
        violation = model.validate(bad)
        assert violation is not None and copy.validate(bad) == violation


# -- JSON Schema: well-formedness ---------------------------------------------------------

DRAFT_URIS = [
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft-07/schema",  # https and no "#": still draft-07
]


@pytest.mark.parametrize("uri", DRAFT_URIS)
def test_json_schema_of_every_draft(uri: str) -> None:
    model = js({"$schema": uri, "type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}})
    assert model.validate(wire_map(n={"Nat": 1})) is None
    assert model.validate(wire_map(n={"Int": -1})) == Violation("$.n", "-1 is less than the minimum of 0")


def test_json_drafts_differ_where_the_drafts_do() -> None:
    d4 = {"$schema": DRAFT_URIS[0], "minimum": 0, "exclusiveMinimum": True}
    assert js(d4).validate({"Nat": 0}) is not None
    with pytest.raises(MalformedSchema, match=r"\$\.exclusiveMinimum"):
        js({**d4, "$schema": DRAFT_URIS[4]})  # a boolean exclusiveMinimum is draft-04 only
    tuple_07 = {"$schema": DRAFT_URIS[2], "items": [{"type": "string"}], "additionalItems": False}
    assert js(tuple_07).validate({"Array": [{"Text": "a"}, {"Text": "b"}]}) is not None
    with pytest.raises(MalformedSchema, match=r"\$\.items"):
        js({"items": [{"type": "string"}]})  # 2020-12 spells tuples prefixItems


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"type": "object",\n "properties": {\n    "a": 1,,}}', "not valid JSON at line 3 column 12"),
        ('{"type": "string"', "not valid JSON at line 1"),
        ('{"properties": {"age": {"type": "integr"}}}', "$.properties.age.type: 'integr' is not valid under any"),
        ('{"required": "name"}', "$.required: 'name' is not of type 'array'"),
        ('{"$schema": "http://json-schema.org/draft-04/schema#", "minimum": "0"}', "$.minimum: '0' is not of type"),
        ('{"$schema": "https://example.com/my-meta", "type": "string"}', "unsupported meta-schema"),
        ('{"$schema": 7}', "$.$schema: must be a string"),
        ('{"$ref": "https://example.com/other.json"}', "unresolvable $ref"),
        ('{"properties": {"a": {"$ref": "#/$defs/missing"}}}', "unresolvable $ref"),
        ('{"pattern": "(["}', '$.pattern: "([" is not a "regex"'),
        ('{"type": "string", "type": "integer"}', "duplicate key 'type'"),
        ('{"maximum": NaN}', "NaN is not valid JSON"),
        ("[" * 70 + "]" * 70, "nests more than 64 levels"),
        ('{"$schema": "http://json-schema.org/draft-04/schema#"} ', None),
    ],
)
def test_malformed_json_schemas(text: str, message: str | None) -> None:
    if message is None:
        parse_model("JSON", text)  # control: well formed
        return
    with pytest.raises(MalformedSchema) as info:
        parse_model("JSON", text)
    assert message in info.value.message
    assert str(info.value) == info.value.message


def test_json_schema_text_must_be_text() -> None:
    with pytest.raises(MalformedSchema, match="must be text"):
        parse_model("JSON", b'{"type": "string"}')  # type: ignore[arg-type]


def test_boolean_and_local_ref_schemas_are_well_formed() -> None:
    assert js(True).validate({"Nat": 1}) is None
    assert js(False).validate({"Nat": 1}) is not None
    tree = {
        "$defs": {
            "node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
        },
        "$ref": "#/$defs/node",
    }
    model = js(tree)
    leaf = wire_map(kids={"Array": []})
    assert model.validate(wire_map(kids={"Array": [leaf, wire_map(kids={"Array": [leaf]})]})) is None
    bad = wire_map(kids={"Array": [leaf, wire_map(kids={"Text": "x"})]})
    assert model.validate(bad) == Violation("$.kids[1].kids", '"x" is not of type "array"')


# -- Avro: well-formedness ----------------------------------------------------------------

GOOD_AVRO: list[Any] = [
    "string",
    {"type": "long", "logicalType": "timestamp-millis"},
    ["null", "int", {"type": "enum", "name": "E", "symbols": ["A"]}],
    {"type": "map", "values": {"type": "array", "items": "bytes"}},
    {"type": "fixed", "name": "md5", "size": 16},
    {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
    record(
        "LinkedList",
        field("value", "int"),
        field("next", ["null", "LinkedList"], default=None),
        namespace="com.example",
        aliases=["OldList"],
        doc="A list.",
    ),
    record(
        "User",
        field("id", "long", default=2**40),
        field("tags", {"type": "array", "items": "string"}, default=["a"]),
        field("kind", {"type": "enum", "name": "Kind", "symbols": ["A", "B"], "default": "A"}, default="B"),
        field("blob", {"type": "fixed", "name": "F2", "size": 2}, default="\u00ff\u0000"),
        field("note", ["null", "string"], default=None),  # a union's default is of its first branch
        field("alt", ["string", "null"], default="x"),
        field("addr", record("Addr", field("zip", "string"), field("n", "int", default=0)), default={"zip": "x"}),
        field("custom", "string", order="descending", aliases=["c"], **{"x-extra": 1}),
        namespace="a.b",
    ),
    {"type": "error", "name": "Oops", "fields": []},
]


@pytest.mark.parametrize("schema", GOOD_AVRO, ids=lambda s: json.dumps(s)[:40])
def test_good_avro_schemas(schema: Any) -> None:
    model = avro(schema)
    assert model.format is SchemaFormat.AVRO
    assert json.loads(model.canonical)  # canonical text is JSON


BAD_AVRO: list[tuple[Any, str]] = [
    (record("R", field("a", "int"), field("b", "strng")), "Avro: unknown type 'strng' at fields[1].type"),
    ({"type": "strng"}, "unknown type 'strng' at the top level"),
    (record("1R"), "'1R' is not a valid Avro name"),
    (record("R", field("a-b", "int")), "'a-b' is not a valid Avro name ([A-Za-z_][A-Za-z0-9_]*) at fields[0]"),
    (record("R", field("a", "int"), field("a", "long")), "two fields named 'a' at fields[1]"),
    ({"type": "record", "name": "R"}, "record 'R' needs 'fields'"),
    ({"type": "record", "fields": []}, "a record needs a 'name'"),
    (record("R", {"name": "a"}), "field 'a' needs a 'type' at fields[0]"),
    (record("R", {"type": "int"}), "a field needs a 'name' at fields[0]"),
    ({"type": "array"}, "array needs 'items'"),
    ({"type": "map", "values": "nope"}, "unknown type 'nope' at values"),
    ({"type": "enum", "name": "E", "symbols": ["A", "A"]}, "repeats a symbol"),
    ({"type": "enum", "name": "E", "symbols": ["A", "1B"]}, "'1B' is not a valid Avro name"),
    ({"type": "enum", "name": "E", "symbols": ["A"], "default": "Z"}, "'Z' is not a symbol"),
    ({"type": "fixed", "name": "F", "size": -1}, "needs 'size'"),
    (record("R", field("a", "int", default="x")), 'default "x" does not match the field\'s type at fields[0].default'),
    (record("R", field("a", ["string", "null"], default=None)), "the union's first branch ('string')"),
    (record("R", field("a", ["int", "string"], default="x")), "list the branch it belongs to first"),
    (record("R", field("a", ["null", {"type": "record", "name": "S", "fields": []}], default={})),
     "the union's first branch ('null')"),
    (record("R", field("a", "int", default=2**31)), "at fields[0].default"),
    (record("R", field("a", "int", default=None)), "at fields[0].default"),
    (record("R", field("a", ["null", "int"], default="x")), "at fields[0].default"),
    (record("R", field("a", record("S", field("z", "int")), default={})), "at fields[0].default"),
    (record("R", field("a", "int", order="sideways")), "'order' must be"),
    (["null", ["int"]], "cannot directly contain another union at [1]"),
    (["int", "int"], "two branches of type 'int' at [1]"),
    ([], "a union needs at least one branch"),
    (record("R", field("a", record("R"))), "the name 'R' is defined twice at fields[0].type"),
    (record("int"), "'int' is a primitive type name"),
    (record("R", field("a", "S")), "unknown type 'S'"),
    ({"type": "bytes", "logicalType": "decimal", "precision": -1}, "Avro: decimal precision"),  # fastavro's verdict
    (42, "a schema is a type name, an object or an array"),
]


@pytest.mark.parametrize(("schema", "message"), BAD_AVRO, ids=lambda s: json.dumps(s)[:40])
def test_bad_avro_schemas(schema: Any, message: str) -> None:
    with pytest.raises(MalformedSchema) as info:
        avro(schema)
    assert message in info.value.message


def test_avro_text_must_be_json() -> None:
    with pytest.raises(MalformedSchema, match="not valid JSON at line 1 column 1"):
        parse_model("AVRO", "record R { int a; }")


def test_avro_names_resolve_in_the_enclosing_namespace() -> None:
    fixed_outside = [{"type": "fixed", "name": "F", "size": 2}, record("R", field("a", "F"), namespace="n")]
    with pytest.raises(MalformedSchema, match="unknown type 'F'"):
        avro(fixed_outside)  # "F" inside namespace n means n.F
    inside = record("R", field("f", {"type": "fixed", "name": "F", "size": 2}), field("g", "F"), namespace="n")
    assert json.loads(avro(inside).canonical)["fields"][1]["type"] == "n.F"


# -- canonical forms ---------------------------------------------------------------------


def test_json_canonical_ignores_whitespace_and_key_order() -> None:
    a = parse_model("JSON", '{"type":"object","properties":{"a":{"type":"string","minLength":1}},"required":["a"]}')
    b = parse_model(
        "JSON",
        '{\n  "required": ["a"],\n  "properties": {"a": {"minLength": 1, "type": "string"}},\n  "type": "object"\n}',
    )
    assert a.canonical == b.canonical and a == b


@pytest.mark.parametrize(
    "other",
    [
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}, "required": []},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 1, "default": "x"}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}, "required": ["a"], "title": "T"},
    ],
)
def test_json_canonical_keeps_every_keyword(other: Any) -> None:
    base = {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}, "required": ["a"]}
    assert js(base).canonical != js(other).canonical


def test_avro_canonical_ignores_qualification_whitespace_and_attribute_order() -> None:
    a = avro(record("User", field("id", "long"), field("m", {"type": "string"}), namespace="com.x"))
    b = parse_model(
        "AVRO",
        '{"fields": [{"type": "long", "name": "id"}, {"name": "m", "order": "ascending", "type": "string"}],\n'
        ' "name": "com.x.User", "type": "record"}',
    )
    assert a.canonical == b.canonical and a == b
    nested_a = avro(record("A", field("b", record("B", field("x", "int"))), namespace="ns"))
    nested_b = avro(record("ns.A", field("b", record("ns.B", field("x", "int")))))
    assert nested_a.canonical == nested_b.canonical


@pytest.mark.parametrize(
    "other",
    [
        record("User", field("id", "long", default=1), namespace="com.x"),  # defaults count (unlike PCF)
        record("User", field("id", "long"), namespace="com.y"),
        record("User", field("id", "long"), namespace="com.x", doc="Users."),
        record("User", field("id", "long"), namespace="com.x", aliases=["Person"]),
        record("User", field("id", "int"), namespace="com.x"),
    ],
)
def test_avro_canonical_keeps_meaning(other: Any) -> None:
    assert avro(record("User", field("id", "long"), namespace="com.x")).canonical != avro(other).canonical


# -- the ICRC-16 mapping -------------------------------------------------------------------

RAW = bytes([0, 1, 254, 255])
B64 = base64.b64encode(RAW).decode()

MAPPING: list[tuple[Any, Any, Any]] = [  # wire value, JSON instance, Avro datum
    ({"Nat": 5}, 5, 5),
    ({"Int": -5}, -5, -5),
    *(({t: 7}, 7, 7) for t in ("Nat8", "Nat16", "Nat32", "Nat64", "Int8", "Int16", "Int32", "Int64")),
    ({"Nat": 2**100}, 2**100, 2**100),
    ({"Float": 1.5}, 1.5, 1.5),
    ({"Float": 2}, 2.0, 2.0),
    ({"Text": "héllo"}, "héllo", "héllo"),
    ({"Bool": False}, False, False),
    ({"Principal": "aaaaa-aa"}, "aaaaa-aa", "aaaaa-aa"),
    ({"Blob": B64}, B64, RAW),
    ({"Bytes": list(RAW)}, B64, RAW),
    ({"Array": [{"Nat": 1}, {"Text": "x"}]}, [1, "x"], [1, "x"]),
    ({"Set": [{"Nat": 1}]}, [1], [1]),
    ({"Nats": [1, 2]}, [1, 2], [1, 2]),
    ({"Floats": [1, 2.5]}, [1.0, 2.5], [1.0, 2.5]),
    ({"Map": [["a", {"Nat": 1}], ["b", {"Map": [["c", {"Bool": True}]]}]]}, {"a": 1, "b": {"c": True}}, None),
    ({"Map": [["a", {"Nat": 1}], ["a", {"Nat": 2}]]}, {"a": 2}, {"a": 2}),
    ({"Class": [{"name": "a", "value": {"Text": "x"}, "immutable": True}]}, {"a": "x"}, {"a": "x"}),
    ({"ValueMap": [[{"Nat": 1}, {"Text": "one"}]]}, [[1, "one"]], [[1, "one"]]),
    ({"Option": None}, None, None),
    ({"Option": {"Option": {"Nat": 3}}}, 3, 3),
    ({"Array": [{"Blob": B64}, {"Option": {"Bytes": [1]}}]}, [B64, "AQ=="], [RAW, b"\x01"]),
]


@pytest.mark.parametrize(("wire", "as_json", "as_avro"), MAPPING, ids=lambda v: repr(v)[:30])
def test_icrc16_mapping(wire: Any, as_json: Any, as_avro: Any) -> None:
    assert to_json_instance(wire) == as_json
    assert type(to_json_instance(wire)) is type(as_json)
    assert to_avro_instance(wire) == (as_json if as_avro is None else as_avro)


def test_mapping_through_models() -> None:
    """Each variant reaches the schema as the documented instance (``const`` compares exactly)."""
    for wire, as_json, _ in MAPPING:
        assert js({"const": as_json}).validate(wire) is None, wire
    blob = avro(record("R", field("b", "bytes"), field("f", {"type": "fixed", "name": "F", "size": 4})))
    assert blob.validate(wire_map(b={"Blob": B64}, f={"Bytes": list(RAW)})) is None
    assert blob.validate(wire_map(b={"Text": B64}, f={"Blob": B64})) == Violation(
        "$.b", f"{B64!r} is not of type bytes"
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_plain_values_survive_the_round_trip(value: Any) -> None:
    """Python → ICRC-16 wire (the SDK's conversion) → JSON instance gives the value back."""
    assert to_json_instance(from_python(value).to_wire()) == value


def test_principal_is_a_string() -> None:
    assert to_json_instance(from_python(Principal("aaaaa-aa")).to_wire()) == "aaaaa-aa"


# -- JSON Schema: validation ---------------------------------------------------------------

ORDER = js(
    {
        "type": "object",
        "properties": {
            "amount": {"type": "integer", "minimum": 0},
            "email": {"type": "string", "format": "email"},
            "note": {"type": ["string", "null"]},
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            },
        },
        "required": ["amount"],
        "additionalProperties": False,
    }
)


@pytest.mark.parametrize(
    ("data", "violation"),
    [
        (wire_map(amount={"Nat": 5}), None),
        (wire_map(amount={"Nat64": 5}, note={"Option": None}), None),
        (wire_map(amount={"Nat": 5}, note={"Option": {"Text": "hi"}}, email={"Text": "a@b.org"}), None),
        (wire_map(amount={"Int": -5}), Violation("$.amount", "-5 is less than the minimum of 0")),
        (wire_map(amount={"Float": 1.5}), Violation("$.amount", '1.5 is not of type "integer"')),
        (wire_map(), Violation("$", '"amount" is a required property')),
        # 2020-12 (no $schema): "format" is an annotation (see test_format_assertion_follows_the_draft).
        (wire_map(amount={"Nat": 1}, email={"Text": "nope"}), None),
        (
            wire_map(amount={"Nat": 1}, items={"Array": [wire_map(name={"Text": "a"}), wire_map(), wire_map()]}),
            Violation("$.items[1]", '"name" is a required property'),
        ),
        (
            wire_map(amount={"Nat": 1}, items={"Array": [wire_map(name={"Text": "a"}), wire_map(name={"Nat": 3})]}),
            Violation("$.items[1].name", '3 is not of type "string"'),
        ),
        (
            wire_map(amount={"Nat": 1}, extra={"Nat": 1}),
            Violation("$", "Additional properties are not allowed ('extra' was unexpected)"),
        ),
        ({"Array": []}, Violation("$", '[] is not of type "object"')),
    ],
)
def test_json_validation(data: Any, violation: Violation | None) -> None:
    assert ORDER.validate(data) == violation


_DRAFT_URIS = {
    "draft-04": "http://json-schema.org/draft-04/schema#",
    "draft-06": "http://json-schema.org/draft-06/schema#",
    "draft-07": "http://json-schema.org/draft-07/schema#",
    "2019-09": "https://json-schema.org/draft/2019-09/schema",
    "2020-12": "https://json-schema.org/draft/2020-12/schema",
    "absent": None,
}
# Formats every draft since draft-04 defines.
_FORMAT_CASES = [("email", "nope"), ("ipv4", "999.1.1.1"), ("date-time", "yesterday"), ("ipv6", "1:::2")]


@pytest.mark.parametrize("draft", sorted(_DRAFT_URIS))
@pytest.mark.parametrize(("fmt", "bad"), _FORMAT_CASES)
def test_format_assertion_follows_the_draft(draft: str, fmt: str, bad: str) -> None:
    """Up to draft-07 ``format`` is asserted; in 2019-09 and 2020-12 (and with no $schema,
    which means 2020-12) it is an annotation unless $vocabulary or the registry asks."""
    schema: dict[str, Any] = {"type": "object", "properties": {"f": {"type": "string", "format": fmt}}}
    uri = _DRAFT_URIS[draft]
    if uri is not None:
        schema["$schema"] = uri
    data = wire_map(f={"Text": bad})
    asserted_by_draft = draft in ("draft-04", "draft-06", "draft-07")
    assert (js(schema).validate(data) is not None) == asserted_by_draft
    # The registry setting asserts formats in every draft.
    forced = parse_model("JSON", json.dumps(schema), assert_formats=True)
    assert forced.validate(data) is not None
    # Always an annotation or an assertion, never a refusal of a good value.
    good = {"email": "a@b.org", "ipv4": "10.1.2.3", "date-time": "2026-11-25T06:00:00Z", "ipv6": "::1"}
    assert forced.validate(wire_map(f={"Text": good[fmt]})) is None


@pytest.mark.parametrize(
    ("draft", "vocabulary", "asserted"),
    [
        ("2020-12", {"https://json-schema.org/draft/2020-12/vocab/format-assertion": True}, True),
        ("2020-12", {"https://json-schema.org/draft/2020-12/vocab/format-assertion": False}, True),
        ("2020-12", {"https://json-schema.org/draft/2020-12/vocab/format-annotation": True}, False),
        ("2019-09", {"https://json-schema.org/draft/2019-09/vocab/format": True}, True),
        ("2019-09", {"https://json-schema.org/draft/2019-09/vocab/format": False}, False),
    ],
)
def test_format_vocabulary_asks_for_assertion(draft: str, vocabulary: dict[str, bool], asserted: bool) -> None:
    schema = {
        "$schema": _DRAFT_URIS[draft],
        "$vocabulary": vocabulary,
        "properties": {"f": {"type": "string", "format": "email"}},
    }
    model = js(schema)
    assert (model.validate(wire_map(f={"Text": "nope"})) is not None) == asserted
    # The choice survives pickling (Spark ships models to executors that way).
    assert (pickle.loads(pickle.dumps(model)).validate(wire_map(f={"Text": "nope"})) is not None) == asserted
    forced = pickle.loads(pickle.dumps(parse_model("JSON", json.dumps(schema), assert_formats=True)))
    assert forced.validate(wire_map(f={"Text": "nope"})) is not None


def test_json_violation_paths_quote_odd_keys() -> None:
    model = js({"properties": {"a b": {"type": "string"}}})
    assert model.validate(wire_map(**{"a b": {"Nat": 1}})) == Violation("$['a b']", '1 is not of type "string"')


def test_json_validation_is_deterministic() -> None:
    model = js({"properties": {f"f{i}": {"type": "string"} for i in range(10)}})
    data = wire_map(**{f"f{i}": {"Nat": i} for i in range(10)})
    assert len({model.validate(data) for _ in range(20)}) == 1


# -- Avro: validation ----------------------------------------------------------------------

PAYMENT = avro(
    record(
        "Payment",
        field("id", "long"),
        field("count", "int"),
        field("amount", "double"),
        field("paid", "boolean"),
        field("currency", {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD"]}),
        field("hash", {"type": "fixed", "name": "Hash", "size": 4}),
        field("payload", "bytes"),
        field("note", ["null", "string"]),
        field("retries", "int", default=0),
        field("tags", {"type": "array", "items": "string"}),
        field("scores", {"type": "map", "values": "float"}),
        field("payer", ["null", record("Party", field("name", "string"), field("kind", ["string", "Currency"]))]),
        namespace="shop",
    )
)


def payment(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "id": {"Nat": 2**40},
        "count": {"Int": -3},
        "amount": {"Float": 9.5},
        "paid": {"Bool": True},
        "currency": {"Text": "EUR"},
        "hash": {"Blob": B64},
        "payload": {"Bytes": [1, 2]},
        "note": {"Option": None},
        "tags": {"Array": [{"Text": "a"}]},
        "scores": {"Map": [["x", {"Float": 1.0}]]},
        "payer": {"Option": wire_map(name={"Text": "ann"}, kind={"Text": "USD"})},
    }
    fields.update(overrides)
    return wire_map(**{k: v for k, v in fields.items() if v is not None})


@pytest.mark.parametrize(
    ("overrides", "violation"),
    [
        ({}, None),
        ({"note": {"Text": "plain text is a union branch too"}}, None),
        ({"note": None, "retries": None, "payer": None}, None),  # defaulted and nullable fields may be absent
        ({"amount": {"Nat": 10}}, None),  # a double accepts an integer
        ({"payer": {"Option": None}}, None),
        ({"payer": wire_map(name={"Text": "bob"}, kind={"Text": "anything"})}, None),
        ({"id": None}, Violation("$", "'id' is a required field of record shop.Payment")),
        (
            {"count": {"Nat": 2**31}},
            Violation("$.count", "2147483648 is out of range for int (-2147483648 to 2147483647)"),
        ),
        (
            {"id": {"Nat": 2**63}},
            Violation(
                "$.id", "9223372036854775808 is out of range for long (-9223372036854775808 to 9223372036854775807)"
            ),
        ),
        ({"count": {"Bool": True}}, Violation("$.count", "True is not of type int")),
        ({"amount": {"Text": "9.5"}}, Violation("$.amount", "'9.5' is not of type double")),
        (
            {"currency": {"Text": "GBP"}},
            Violation("$.currency", "'GBP' is not a symbol of enum shop.Currency (EUR, USD)"),
        ),
        ({"hash": {"Bytes": [1]}}, Violation("$.hash", "fixed shop.Hash holds exactly 4 bytes, not 1")),
        ({"payload": {"Text": "AQI="}}, Violation("$.payload", "'AQI=' is not of type bytes")),
        ({"note": {"Nat": 1}}, Violation("$.note", "1 matches no branch of union [null, string]")),
        ({"tags": {"Array": [{"Text": "a"}, {"Nat": 2}]}}, Violation("$.tags[1]", "2 is not of type string")),
        (
            {"scores": {"Map": [["ok", {"Float": 1.0}], ["bad key", {"Text": "x"}]]}},
            Violation("$.scores['bad key']", "'x' is not of type float"),
        ),
        (
            {"payer": wire_map(kind={"Text": "EUR"})},
            Violation("$.payer", "'name' is a required field of record shop.Party"),
        ),
        (
            {"payer": wire_map(name={"Nat": 1}, kind={"Text": "EUR"})},
            Violation("$.payer.name", "1 is not of type string"),
        ),
        (
            {"payer": wire_map(name={"Text": "a"}, kind={"Nat": 1})},
            Violation("$.payer.kind", "1 matches no branch of union [string, enum shop.Currency]"),
        ),
        ({"surprise": {"Nat": 1}}, Violation("$", "'surprise' is not a field of record shop.Payment")),
    ],
)
def test_avro_validation(overrides: dict[str, Any], violation: Violation | None) -> None:
    assert PAYMENT.validate(payment(**overrides)) == violation


def test_avro_float_range() -> None:
    model = avro(record("R", field("f", "float"), field("d", "double")))
    assert model.validate(wire_map(f={"Float": 3.0e38}, d={"Float": 1e308})) is None
    assert model.validate(wire_map(f={"Float": 1e39}, d={"Nat": 1})) == Violation(
        "$.f", "1e+39 is out of range for float"
    )
    assert model.validate(wire_map(f={"Nat": 1}, d={"Nat": 2**1100})) is not None


def test_avro_recursive_and_top_level_schemas() -> None:
    linked = avro(record("Node", field("v", "int"), field("next", ["null", "Node"])))
    chain = wire_map(v={"Nat": 1}, next=wire_map(v={"Nat": 2}, next=wire_map(v={"Nat": 3}, next={"Option": None})))
    assert linked.validate(chain) is None
    broken = wire_map(v={"Nat": 1}, next=wire_map(v={"Nat": 2}, next=wire_map(v={"Text": "3"})))
    assert linked.validate(broken) == Violation("$.next.next.v", "'3' is not of type int")
    assert avro("string").validate({"Text": "x"}) is None
    assert avro("string").validate({"Nat": 1}) == Violation("$", "1 is not of type string")
    assert avro({"type": "array", "items": "long"}).validate({"Nats": [1, 2]}) is None
    assert (
        avro({"type": "map", "values": "int"}).validate(
            {"Class": [{"name": "a", "value": {"Nat": 1}, "immutable": False}]}
        )
        is None
    )
    assert avro({"type": "int", "logicalType": "date"}).validate({"Nat": 19000}) is None


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "id": st.integers(-(2**64), 2**64),
            "name": st.one_of(st.text(max_size=3), st.integers(0, 3)),
            "score": st.one_of(
                st.floats(allow_nan=False, allow_infinity=False), st.integers(-5, 5), st.text(max_size=1)
            ),
            "tags": st.lists(st.one_of(st.text(max_size=2), st.integers(0, 2)), max_size=3),
            "maybe": st.one_of(st.none(), st.integers(-(2**32), 2**32), st.text(max_size=2)),
        },
    )
)
def test_avro_verdicts_agree_with_fastavro(datum: dict[str, Any]) -> None:
    """On records without undeclared keys, tidings and fastavro accept the same data."""
    schema = record(
        "R",
        field("id", "long"),
        field("name", "string"),
        field("score", "double"),
        field("tags", {"type": "array", "items": "string"}),
        field("maybe", ["null", "int"]),
    )
    ours = avro(schema).validate(from_python(datum).to_wire()) is None
    theirs = fastavro_validate(datum, fastavro.parse_schema(schema), raise_errors=False)
    assert ours == theirs


# -- compatibility: JSON Schema ------------------------------------------------------------

OBJ = {"type": "object"}

# (wider schema, narrower schema, path, rule when narrowing under BACKWARD, rule when widening under FORWARD)
JSON_NARROWINGS: list[tuple[Any, Any, str, str, str]] = [
    ({"type": ["string", "null"]}, {"type": "string"}, "$", "type-narrowed", "type-widened"),
    ({"type": "number"}, {"type": "integer"}, "$", "type-narrowed", "type-widened"),
    ({}, {"type": "object"}, "$", "type-narrowed", "type-widened"),
    ({"enum": [1, 2, 3]}, {"enum": [1, 2]}, "$", "enum-narrowed", "enum-widened"),
    ({"type": "string"}, {"const": "x"}, "$", "enum-narrowed", "enum-widened"),
    ({"type": "integer", "minimum": 0}, {"type": "integer", "minimum": 10}, "$", "min-increased", "min-decreased"),
    (
        {"type": "number", "minimum": 0},
        {"type": "number", "exclusiveMinimum": 0},
        "$",
        "min-increased",
        "min-decreased",
    ),
    ({"type": "number"}, {"type": "number", "maximum": 9}, "$", "max-decreased", "max-increased"),
    (
        {"type": "number", "multipleOf": 2},
        {"type": "number", "multipleOf": 4},
        "$",
        "multiple-of-changed",
        "multiple-of-changed",
    ),
    ({"type": "string"}, {"type": "string", "minLength": 1}, "$", "min-length-increased", "min-length-decreased"),
    (
        {"type": "string", "maxLength": 9},
        {"type": "string", "maxLength": 5},
        "$",
        "max-length-decreased",
        "max-length-increased",
    ),
    ({"type": "string"}, {"type": "string", "pattern": "^a"}, "$", "pattern-changed", "pattern-changed"),
    ({"type": "string"}, {"type": "string", "format": "email"}, "$", "format-changed", "format-changed"),
    ({"type": "array"}, {"type": "array", "minItems": 1}, "$", "min-items-increased", "min-items-decreased"),
    ({"type": "array"}, {"type": "array", "maxItems": 3}, "$", "max-items-decreased", "max-items-increased"),
    ({"type": "array"}, {"type": "array", "uniqueItems": True}, "$", "unique-items-added", "unique-items-removed"),
    ({**OBJ}, {**OBJ, "minProperties": 1}, "$", "min-properties-increased", "min-properties-decreased"),
    ({**OBJ}, {**OBJ, "maxProperties": 1}, "$", "max-properties-decreased", "max-properties-increased"),
    (
        {**OBJ, "properties": {"age": {"type": "integer"}}},
        {**OBJ, "properties": {"age": {"type": "integer"}}, "required": ["age"]},
        "$.properties.age",
        "required-added",
        "required-removed",
    ),
    (
        {**OBJ, "properties": {"a": {}}},
        {**OBJ, "properties": {"a": {}}, "additionalProperties": False},
        "$",
        "additional-properties-closed",
        "additional-properties-opened",
    ),
    (
        {**OBJ, "properties": {"a": {}, "b": {}}, "additionalProperties": False},
        {**OBJ, "properties": {"a": {}}, "additionalProperties": False},
        "$.properties.b",
        "property-removed",
        "property-added",
    ),
    (
        {**OBJ, "properties": {"a": {}}},
        {**OBJ, "properties": {"a": False}},
        "$.properties.a",
        "property-removed",
        "property-added",
    ),
    (  # a property the writer allowed as anything gets a narrower schema
        {**OBJ},
        {**OBJ, "properties": {"a": {"type": "string"}}},
        "$.properties.a",
        "type-narrowed",
        "type-widened",
    ),
    (
        {**OBJ, "properties": {"addr": {"properties": {"zip": {"type": ["string", "integer"]}}}}},
        {**OBJ, "properties": {"addr": {"properties": {"zip": {"type": "string"}}}}},
        "$.properties.addr.properties.zip",
        "type-narrowed",
        "type-widened",
    ),
    (
        {**OBJ, "additionalProperties": {"type": "number"}},
        {**OBJ, "additionalProperties": {"type": "integer"}},
        "$.additionalProperties",
        "type-narrowed",
        "type-widened",
    ),
    (
        {"type": "array", "items": {"type": "number"}},
        {"type": "array", "items": {"type": "integer"}},
        "$.items",
        "type-narrowed",
        "type-widened",
    ),
    (
        {"type": "array", "prefixItems": [{"type": "string"}]},
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
        "$.prefixItems[1]",
        "type-narrowed",
        "type-widened",
    ),
]


@pytest.mark.parametrize(("wide", "narrow", "path", "narrowed", "widened"), JSON_NARROWINGS)
def test_json_rule_both_ways(wide: Any, narrow: Any, path: str, narrowed: str, widened: str) -> None:
    w, n = js(wide), js(narrow)
    assert found("BACKWARD", n, w) == {(path, narrowed)}  # the new schema cannot read all old data
    assert found("FORWARD", w, n) == {(path, widened)}  # old readers cannot read all new data
    if narrowed != widened:  # a one-way change passes the other way
        assert found("FORWARD", n, w) == set()
        assert found("BACKWARD", w, n) == set()
    assert (path, narrowed) in found("FULL", n, w)


def test_json_type_change_is_refused_both_ways() -> None:
    a, b = (
        js({**OBJ, "properties": {"age": {"type": "string"}}}),
        js({**OBJ, "properties": {"age": {"type": "integer"}}}),
    )
    assert found("FULL", b, a) == {("$.properties.age", "type-changed")}
    issue = check_compatibility("BACKWARD", b, [a])[0]
    assert "'age'" in issue.message and "the new schema" in issue.message and issue.version == 0


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"type": "integer", "exclusiveMinimum": 0}, {"type": "integer", "minimum": 1}),  # the same integers
        (
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "type": "integer",
                "minimum": 0,
                "exclusiveMinimum": True,
            },
            {"type": "integer", "exclusiveMinimum": 0},
        ),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "string"}]},
            {"type": "array", "prefixItems": [{"type": "string"}]},
        ),
        (  # a $ref inlined
            {
                "$defs": {"A": {"type": "object", "properties": {"x": {"type": "string"}}}},
                "properties": {"a": {"$ref": "#/$defs/A"}},
            },
            {"properties": {"a": {"type": "object", "properties": {"x": {"type": "string"}}}}},
        ),
        (  # identical anyOf, other things changed only in annotations
            {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "old"},
            {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "new"},
        ),
        (  # recursion through $ref
            {"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}}, "$ref": "#/$defs/N"},
            {"$defs": {"M": {"type": "object", "properties": {"next": {"$ref": "#/$defs/M"}}}}, "$ref": "#/$defs/M"},
        ),
    ],
)
def test_json_equivalent_schemas_are_fully_compatible(old: Any, new: Any) -> None:
    assert check_compatibility("FULL", js(new), [js(old)]) == []


def test_json_finite_writer_values_are_checked_exactly() -> None:
    letters = js({"enum": ["a", "b"]})
    assert found("BACKWARD", js({"type": "string", "maxLength": 1}), letters) == set()
    assert found("BACKWARD", js({"type": "string", "pattern": "^a"}), letters) == {("$", "enum-narrowed")}
    assert found("BACKWARD", js({"anyOf": [{"const": "a"}, {"const": "b"}]}), letters) == set()


def test_json_what_cannot_be_proven_is_refused() -> None:
    old = js({"properties": {"v": {"allOf": [{"type": "string"}, {"maxLength": 3}]}}})
    new = js({"properties": {"v": {"allOf": [{"type": "string"}, {"maxLength": 4}]}}})
    assert found("BACKWARD", new, old) == {("$.properties.v.allOf", "unsupported-change")}
    assert found("BACKWARD", js({"properties": {"v": {"not": {"type": "string"}}}}), js({})) == {
        ("$.properties.v.not", "unsupported-change")
    }
    # Dropping a constraint the check cannot analyse only widens: fine under BACKWARD.
    assert found("BACKWARD", js({}), js({"not": {"type": "string"}})) == set()
    # Two different pattern texts cannot be proven to cover each other.
    assert found("BACKWARD", js({"patternProperties": {"^a": {"type": "string"}}}),
                 js({"patternProperties": {"^b": {"type": "string"}}})) == {
        ("$.patternProperties['^b']", "unsupported-change"),
        # and the writer is open: names matching ^a may hold anything there.
        ("$.patternProperties['^a']", "type-narrowed")}


def test_json_sum_types_are_judged_branch_by_branch() -> None:
    """anyOf/oneOf (docs/schemas.md): each writer branch must fit a reader branch."""
    two = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    three = {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}
    # A branch added to the reader, or a branch widened: backward compatible.
    assert found("BACKWARD", js(three), js(two)) == set()
    assert found("BACKWARD", js({"anyOf": [{"type": "string"}, {"type": "number"}]}), js(two)) == set()
    # Branches reordered: compatible both ways.
    assert found("FULL", js({"anyOf": [{"type": "integer"}, {"type": "string"}]}), js(two)) == set()
    # A branch removed: narrowed under BACKWARD, and under FORWARD the new writer is fine.
    assert found("BACKWARD", js(two), js(three)) == {("$.anyOf", "sum-type-narrowed")}
    assert found("FORWARD", js(two), js(three)) == set()
    # A branch added: FORWARD says the old reader cannot read it.
    assert found("FORWARD", js(three), js(two)) == {("$.anyOf", "sum-type-extended")}
    # A plain type turned into a union containing it, and back.
    assert found("BACKWARD", js(two), js({"type": "string"})) == set()
    assert found("BACKWARD", js({"type": ["string", "integer"]}), js(two)) == set()
    assert found("BACKWARD", js({"type": "string"}), js(two)) == {("$", "type-changed")}
    # The union's siblings still apply to every branch.
    assert found("BACKWARD", js({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}),
                 js({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}, {}]})) == {
        ("$.anyOf", "sum-type-narrowed")}
    # oneOf: a writer branch that fits two reader branches would match both: refused.
    assert found("BACKWARD", js({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}),
                 js({"oneOf": [{"type": "string"}, {"type": "integer"}]})) == set()
    assert found("BACKWARD", js({"oneOf": [{"type": "number"}, {"type": "integer"}]}),
                 js({"type": "integer"})) == {("$.oneOf", "sum-type-narrowed")}
    assert found("BACKWARD", js({"properties": {"v": {"oneOf": [{"type": "string"}]}}}), js({})) == {
        ("$.properties.v.oneOf", "sum-type-narrowed")
    }
    # References inside branches are followed to their targets.
    same_ref_other_target = (
        js({"$defs": {"A": {"type": "string"}}, "anyOf": [{"$ref": "#/$defs/A"}]}),
        js({"$defs": {"A": {"type": "integer"}}, "anyOf": [{"$ref": "#/$defs/A"}]}),
    )
    assert found("BACKWARD", same_ref_other_target[1], same_ref_other_target[0]) == {("$.anyOf", "sum-type-narrowed")}
    # A recursive union (a tree) compared with itself changed deep down.
    tree = {"$defs": {"T": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"$ref": "#/$defs/T"}}}]}}, "$ref": "#/$defs/T"}
    wider = json.loads(json.dumps(tree).replace('"integer"', '"number"'))
    assert found("BACKWARD", js(wider), js(tree)) == set()
    assert found("BACKWARD", js(tree), js(wider)) == {("$.anyOf[1].properties.v", "type-narrowed")}


def test_json_pattern_properties_are_judged_name_by_name() -> None:
    closed = {"type": "object", "additionalProperties": False}
    # A pattern added to a closed reader: names the writer may send are listed ones only.
    old = js({**closed, "properties": {"a1": {"type": "string"}}})
    new = js({**closed, "properties": {"a1": {"type": "string"}}, "patternProperties": {"^x_": {"type": "integer"}}})
    assert found("BACKWARD", new, old) == set()
    # ... but the old reader cannot read what the new writer may send under the pattern.
    assert found("FORWARD", new, old) == {("$.patternProperties['^x_']", "additional-properties-opened")}
    # The same pattern on both sides: its schemas are compared.
    p_str = js({"patternProperties": {"^x_": {"type": "string"}}})
    p_any = js({"patternProperties": {"^x_": {"type": ["string", "integer"]}}})
    assert found("BACKWARD", p_any, p_str) == set()
    assert found("BACKWARD", p_str, p_any) == {("$.patternProperties['^x_']", "type-narrowed")}
    # A pattern of the reader applies to a listed name of the writer that matches it.
    listed = js({**closed, "properties": {"x_1": {"type": "integer"}}})
    assert found("BACKWARD", js({"patternProperties": {"^x_": {"type": "string"}}}), listed) == {
        ("$.properties.x_1", "type-changed")}
    # A writer pattern the reader lacks: read by the reader's additionalProperties.
    w_closed = js({**closed, "patternProperties": {"^x_": {"type": "string"}}})
    assert found("BACKWARD", js(closed), w_closed) == {("$.patternProperties['^x_']", "additional-properties-closed")}
    assert found("BACKWARD", js({"additionalProperties": {"type": "string"}}), w_closed) == set()
    # An open writer: a new reader pattern reads whatever the writer may have sent.
    assert found("BACKWARD", p_str, js({})) == {("$.patternProperties['^x_']", "type-narrowed")}


def test_json_refs_are_followed() -> None:
    old = js(
        {
            "$defs": {"A": {"type": "object", "properties": {"x": {"type": "string"}}}},
            "properties": {"a": {"$ref": "#/$defs/A"}},
        }
    )
    new = js(
        {
            "$defs": {"A": {"type": "object", "properties": {"x": {"type": "integer"}}}},
            "properties": {"a": {"$ref": "#/$defs/A"}},
        }
    )
    assert found("BACKWARD", new, old) == {("$.properties.a.properties.x", "type-changed")}
    rec_old = js(
        {"$defs": {"N": {"properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/N"}}}}, "$ref": "#/$defs/N"}
    )
    rec_new = js(
        {"$defs": {"N": {"properties": {"v": {"type": "number"}, "next": {"$ref": "#/$defs/N"}}}}, "$ref": "#/$defs/N"}
    )
    assert found("FULL", rec_new, rec_old) == {("$.properties.v", "type-widened")}


def test_json_refs_escape_and_cycles() -> None:
    escaped = {"$defs": {"a/b": {"type": "string"}}, "properties": {"p": {"$ref": "#/$defs/a~1b"}}}
    assert found("FULL", js(escaped), js({"properties": {"p": {"type": "string"}}})) == set()
    # A reference that returns to itself with no structure in between proves nothing.
    loop = {"$defs": {"d": {"minimum": 0, "$ref": "#/$defs/d"}}, "$ref": "#/$defs/d"}
    old, new = js({**loop, "type": "boolean"}), js({**loop, "type": "null"})
    assert ("$", "unsupported-change") in found("FORWARD", new, old)


def test_json_finite_types_and_contradictions() -> None:
    booleans = js({"type": "boolean"})
    assert found("FULL", js({"enum": [True, False]}), booleans) == set()
    assert found("BACKWARD", js({"enum": [True, False]}), js({"type": ["boolean", "null"]})) == {("$", "enum-narrowed")}
    nothing = js({"const": None, "enum": [False]})  # const and enum disagree: no value is valid
    assert found("FORWARD", js({"const": None}), nothing) == {("$", "enum-widened")}
    assert found("BACKWARD", js({"const": None}), nothing) == set()


SCHEMA_KEYS = (
    "type name fields items values symbols size default properties required additionalProperties enum const "
    "$ref $defs minimum anyOf $schema logicalType"
).split()
schema_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2**64)
    | st.sampled_from("record enum fixed array map int string null R object integer # #/$defs/a".split()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(SCHEMA_KEYS), inner, max_size=4),
    max_leaves=15,
)


@settings(max_examples=300, deadline=None)
@given(schema_like, st.sampled_from(["JSON", "AVRO"]))
def test_bad_schemas_only_ever_raise_malformed_schema(doc: Any, fmt: str) -> None:
    try:
        model = parse_model(fmt, json.dumps(doc))
    except MalformedSchema:
        return
    for value in (None, 1, "x", [1.5], {"a": b"\x00"}):
        model.validate(from_python(value).to_wire())
    check_compatibility("FULL", model, [model])


# -- compatibility: Avro -------------------------------------------------------------------


def user(*fields: dict[str, Any], name: str = "User", **extra: Any) -> Model:
    return avro(record(name, field("id", "long"), *fields, namespace="com.x", **extra))


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"),
    [
        (user(field("n", "int")), user(field("n", "long")), set(), {("fields.n", "type-widened")}),
        (user(field("n", "long")), user(field("n", "int")), {("fields.n", "type-narrowed")}, set()),
        (user(field("n", "int")), user(field("n", "double")), set(), {("fields.n", "type-widened")}),
        (user(field("n", "float")), user(field("n", "double")), set(), {("fields.n", "type-widened")}),
        (user(field("n", "string")), user(field("n", "bytes")), set(), set()),
        (
            user(field("n", "int")),
            user(field("n", "string")),
            {("fields.n", "type-changed")},
            {("fields.n", "type-changed")},
        ),
        (user(), user(field("e", "string")), {("fields.e", "field-added-without-default")}, set()),
        (user(), user(field("e", "string", default="")), set(), set()),
        (user(field("e", "string")), user(), set(), {("fields.e", "field-removed")}),
        (user(field("e", "string", default="")), user(), set(), set()),
        (
            user(field("e", "string")),
            user(field("mail", "string", aliases=["e"])),
            set(),
            {("fields.e", "field-removed")},
        ),
        (
            user(field("c", {"type": "enum", "name": "C", "symbols": ["R", "G", "B"]})),
            user(field("c", {"type": "enum", "name": "C", "symbols": ["R", "G"]})),
            {("fields.c", "enum-symbol-removed")},
            set(),
        ),
        (
            user(field("c", {"type": "enum", "name": "C", "symbols": ["R", "G"]})),
            user(field("c", {"type": "enum", "name": "C", "symbols": ["R", "G", "B"]})),
            set(),
            {("fields.c", "enum-symbol-added")},
        ),
        (
            user(field("c", {"type": "enum", "name": "C", "symbols": ["R", "G"], "default": "R"})),
            user(field("c", {"type": "enum", "name": "C", "symbols": ["R", "G", "B"], "default": "R"})),
            set(),
            set(),
        ),
        (
            user(field("h", {"type": "fixed", "name": "H", "size": 4})),
            user(field("h", {"type": "fixed", "name": "H", "size": 8})),
            {("fields.h", "fixed-size-changed")},
            {("fields.h", "fixed-size-changed")},
        ),
        (
            user(field("u", ["null", "int", "string"])),
            user(field("u", ["null", "int"])),
            {("fields.u", "union-branch-removed")},
            set(),
        ),
        (
            user(field("u", ["null", "int"])),
            user(field("u", ["null", "int", "string"])),
            set(),
            {("fields.u", "union-branch-added")},
        ),
        (user(field("u", "int")), user(field("u", ["null", "int"])), set(), {("fields.u", "type-widened")}),
        (user(field("u", ["null", "int"])), user(field("u", "int")), {("fields.u", "type-narrowed")}, set()),
        (
            user(field("u", ["null", "int"])),
            user(field("u", ["null", "long"])),
            set(),
            {("fields.u", "union-branch-added")},
        ),
        (
            user(field("u", "string")),
            user(field("u", ["null", "int"])),
            {("fields.u", "type-changed")},
            {("fields.u", "type-changed")},
        ),
        (user(), user(name="Person"), {("$", "name-mismatch")}, {("$", "name-mismatch")}),
        (user(), user(name="Person", aliases=["User"]), set(), {("$", "name-mismatch")}),
        (user(), avro(record("other.ns.User", field("id", "long"))), set(), set()),  # unqualified names match
        (
            user(field("tags", {"type": "array", "items": "long"})),
            user(field("tags", {"type": "array", "items": "int"})),
            {("fields.tags.items", "type-narrowed")},
            set(),
        ),
        (
            user(field("m", {"type": "map", "values": "string"})),
            user(field("m", {"type": "map", "values": "int"})),
            {("fields.m.values", "type-changed")},
            {("fields.m.values", "type-changed")},
        ),
        (
            user(field("addr", record("Addr", field("zip", "string")))),
            user(field("addr", record("Addr", field("zip", "string"), field("city", "string")))),
            {("fields.addr.fields.city", "field-added-without-default")},
            set(),
        ),
        (
            user(field("addr", ["null", record("Addr", field("zip", "string"))])),
            user(field("addr", ["null", record("Addr", field("zip", "int"))])),
            {("fields.addr.fields.zip", "type-changed")},
            {("fields.addr.fields.zip", "type-changed")},
        ),
    ],
)
def test_avro_rules(old: Model, new: Model, backward: set[Any], forward: set[Any]) -> None:
    assert found("BACKWARD", new, old) == backward
    assert found("FORWARD", new, old) == forward
    assert found("FULL", new, old) == backward | forward


def test_avro_recursive_types_terminate() -> None:
    old = avro(record("Node", field("v", "int"), field("next", ["null", "Node"])))
    new = avro(record("Node", field("v", "long"), field("next", ["null", "Node"]), field("w", "int", default=0)))
    assert found("BACKWARD", new, old) == set()
    assert found("FORWARD", new, old) == {("fields.v", "type-widened")}


def test_avro_messages_name_the_field_and_the_sides() -> None:
    (issue,) = check_compatibility("BACKWARD", user(field("email", "string")), [user()])
    assert issue == Incompatibility("fields.email", "field-added-without-default", issue.message, version=0)
    assert "'email'" in issue.message and "default" in issue.message and "the new schema" in issue.message


# -- modes ---------------------------------------------------------------------------------


def test_transitive_modes_catch_drift() -> None:
    """A→B→C: each step is BACKWARD compatible, but C cannot read what A wrote."""
    a = user(field("score", "int"))
    b = user()  # score dropped: B ignores it in A's data
    c = user(field("score", "string", default=""))  # back, with another type and a default
    assert found("BACKWARD", b, a) == set()
    assert found("BACKWARD", c, a, b) == set()  # only the latest version is compared
    transitive = check_compatibility("BACKWARD_TRANSITIVE", c, [a, b])
    assert [(i.version, i.path, i.rule) for i in transitive] == [(0, "fields.score", "type-changed")]
    assert check_compatibility("FULL_TRANSITIVE", c, [a, b])[0].version == 0


def test_transitive_reports_every_version_it_conflicts_with() -> None:
    v0, v1, v2 = js({"type": "integer"}), js({"type": "number"}), js({"type": ["number", "string"]})
    new = js({"type": "integer", "minimum": 0})
    issues = check_compatibility("BACKWARD_TRANSITIVE", new, [v0, v1, v2])
    assert [(i.version, i.rule) for i in issues] == [
        (0, "min-increased"),
        (1, "type-narrowed"),
        (1, "min-increased"),
        (2, "type-narrowed"),
        (2, "min-increased"),
    ]
    latest_only = check_compatibility("BACKWARD", new, [v0, v1, v2])
    assert [(i.version, i.rule) for i in latest_only] == [(2, "type-narrowed"), (2, "min-increased")]


def test_forward_transitive() -> None:
    a, b = user(field("x", "int")), user(field("x", "int", default=0))
    c = user()  # x removed: fine for B's readers (default), not for A's
    assert found("FORWARD", c, a, b) == set()
    assert found("FORWARD_TRANSITIVE", c, a, b) == {("fields.x", "field-removed")}


def test_full_checks_both_directions_and_none_checks_nothing() -> None:
    old, new = js({"type": "integer"}), js({"type": ["integer", "null"]})
    assert found("BACKWARD", new, old) == set()
    assert found("FULL", new, old) == {("$", "type-widened")}
    assert check_compatibility(CompatibilityMode.NONE, new, [js({"type": "string"})]) == []
    assert check_compatibility("FULL_TRANSITIVE", new, []) == []


def test_formats_cannot_change() -> None:
    issues = check_compatibility("BACKWARD", avro("string"), [js({"type": "string"}), avro("string")])
    assert issues == []  # non-transitive: only the latest (Avro) version counts
    (issue,) = check_compatibility("FULL_TRANSITIVE", avro("string"), [js({"type": "string"}), avro("string")])
    assert (issue.version, issue.path, issue.rule) == (0, "$", "format-changed")


def test_findings_are_deduplicated_across_directions() -> None:
    old, new = user(field("n", "int")), user(field("n", "string"))
    issues = check_compatibility("FULL", new, [old])
    assert [(i.path, i.rule) for i in issues] == [("fields.n", "type-changed")]


def test_compatibility_is_deterministic() -> None:
    schemas = [js({**OBJ, "properties": {f"p{i}": {"type": "integer", "minimum": i}}}) for i in range(5)]
    first = check_compatibility("FULL_TRANSITIVE", schemas[-1], schemas[:-1])
    # Per earlier version: p4 is new and narrower than "anything" (type and minimum), and
    # p_i, gone from the new schema, is wider there than the old readers allow (the same two).
    assert len(first) == 16
    assert first == check_compatibility("FULL_TRANSITIVE", schemas[-1], schemas[:-1])


@given(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_registry_limits_stay_within_the_specification(max_count: int, min_size: int, max_size: int) -> None:
    from tidings.core.schemas import BOUNDS, Limits

    ok = Limits(max_count=max_count, min_size=min_size, max_size=max_size).problem() is None
    within = all(BOUNDS[k][0] <= v <= BOUNDS[k][1] for k, v in
                 (("max_count", max_count), ("min_size", min_size), ("max_size", max_size)))
    assert ok == (within and min_size <= max_size)


_KEYWORDS_WITH_NUMBERS = ["minimum", "maximum", "multipleOf", "minLength", "maxItems", "const", "default"]


@given(
    st.dictionaries(st.sampled_from(_KEYWORDS_WITH_NUMBERS), st.integers(min_value=1, max_value=2**52), min_size=1),
    st.sampled_from(["{}", "{}.0", "{}.00", "{}e0", "{}0e-1"]),
)
def test_numbers_equal_by_value_have_one_canonical_form(numbers: dict[str, int], spelling: str) -> None:
    """JSON Schema compares numbers by value: 1 and 1.0 are the same, so the schemas are too."""
    plain = {"type": "number", **numbers}
    text = "{" + ",".join(
        f'"{k}":{spelling.format(v) if k != "type" else json.dumps(v)}' for k, v in plain.items()
    ) + "}"
    assert js(plain).canonical == parse_model("JSON", text).canonical == formats.json_canonical(text)
    def record(default: float) -> Any:
        return {"type": "record", "name": "R", "fields": [{"name": "d", "type": "double", "default": default}]}

    assert avro(record(1.0)).canonical == avro(record(1)).canonical


_AVRO_SAMPLES = {"null": None, "boolean": True, "int": 7, "string": "s", "bytes": "\u00ff", "double": 1.5}


@given(st.permutations(sorted(_AVRO_SAMPLES)).map(lambda p: p[:3]), st.sampled_from(sorted(_AVRO_SAMPLES)))
def test_avro_union_default_is_of_the_first_branch(branches: list[str], value_of: str) -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "u", "type": list(branches), "default": _AVRO_SAMPLES[value_of]}]}
    fits_first = value_of == branches[0] or (branches[0] == "double" and value_of == "int") \
        or (branches[0] == "string" and value_of == "bytes") or (branches[0] == "bytes" and value_of == "string")
    try:
        avro(schema)
        accepted = True
    except MalformedSchema:
        accepted = False
    assert accepted == fits_first


_LEAF_SCHEMAS = st.sampled_from([
    {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "null"}, {"type": "boolean"},
    {"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 0}, {"const": 1}, {"enum": ["a", 2]}, {},
])
_SHAPED = st.recursive(
    _LEAF_SCHEMAS,
    lambda inner: (
        st.builds(lambda k, bs: {k: bs}, st.sampled_from(["anyOf", "oneOf"]), st.lists(inner, min_size=1, max_size=3))
        | st.builds(
            lambda props, pats, add: {"type": "object", "properties": props, "patternProperties": pats,
                                      **({} if add is None else {"additionalProperties": add})},
            st.dictionaries(st.sampled_from(["a", "x_1", "b"]), inner, max_size=2),
            st.dictionaries(st.sampled_from(["^x_", "^b", "1$"]), inner, max_size=2),
            st.none() | st.just(False) | inner,
        )
    ),
    max_leaves=6,
)
_INSTANCES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "abc", ""]) | st.just(1.5),
    lambda inner: st.dictionaries(st.sampled_from(["a", "x_1", "x_2", "b", "c1"]), inner, max_size=3),
    max_leaves=5,
)


@settings(max_examples=400, deadline=None)
@given(_SHAPED, _SHAPED, st.lists(_INSTANCES, min_size=1, max_size=8))
@example(  # {} matches both reader branches: a oneOf refuses it (found by this test)
    {"oneOf": [{"type": "object", "properties": {}, "patternProperties": {}},
               {"type": "object", "properties": {}, "patternProperties": {"^x_": {"type": "string"}}}]},
    {"type": "object", "properties": {}, "patternProperties": {}}, [{}],
)
def test_json_sum_and_pattern_rules_are_sound(reader: Any, writer: Any, instances: list[Any]) -> None:
    """Whenever the check finds nothing, every instance the writer accepts, the reader does."""
    import jsonschema

    r, w = js(reader), js(writer)
    if found("BACKWARD", r, w):
        return
    for x in instances:
        if jsonschema.Draft202012Validator(writer).is_valid(x):
            assert jsonschema.Draft202012Validator(reader).is_valid(x), (reader, writer, x)
