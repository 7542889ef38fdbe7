"""A reader's ``oneOf`` refuses a value matching two branches (docs/schemas.md,
"Evolution", the ``oneOf`` row): the check proves the writer's values apart from every
other reader branch, by type, constant or a discriminating property, and is sound."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidings.schemas.formats import Model, check_compatibility, parse_model
from tidings.schemas.formats._json_disjoint import disjoint


def js(schema: Any) -> Model:
    return parse_model("JSON", json.dumps(schema))


def found(mode: str, new: Any, old: Any) -> set[tuple[str, str]]:
    return {(i.path, i.rule) for i in check_compatibility(mode, js(new), [js(old)])}


OBJ = {"type": "object"}


def kind(value: str, **props: Any) -> dict[str, Any]:
    return {**OBJ, "properties": {"kind": {"const": value}, **props}, "required": ["kind"]}


def test_a_reader_branch_that_may_also_match_is_refused() -> None:
    # {} is valid under both branches: the new reader refuses data the old writer wrote.
    overlapping = {"oneOf": [{**OBJ, "properties": {}}, {**OBJ, "patternProperties": {"^x_": {"type": "string"}}}]}
    assert found("BACKWARD", overlapping, OBJ) == {("$.oneOf", "sum-type-narrowed")}
    issue = check_compatibility("BACKWARD", js(overlapping), [js(OBJ)])[0]
    assert "may also match branch 1" in issue.message
    # Partly overlapping constraints on one type: not provably apart.
    assert found("BACKWARD", {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]},
                 {"type": "string"}) == {("$.oneOf", "sum-type-narrowed")}
    # anyOf has no such rule: matching two branches is fine.
    assert found("BACKWARD", {"anyOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]},
                 {"type": "string"}) == set()


def test_branches_proven_apart_pass() -> None:
    # By type (integer is a number, so those two are not apart).
    assert found("BACKWARD", {"oneOf": [{"type": "string"}, {"type": "null"}]}, {"type": "string"}) == set()
    assert found("BACKWARD", {"oneOf": [{"type": "number"}, {"type": "integer"}]}, {"type": "integer"}) == {
        ("$.oneOf", "sum-type-narrowed")}
    # By constants.
    assert found("BACKWARD", {"oneOf": [{"enum": ["a", "b"]}, {"const": "c"}]}, {"const": "a"}) == set()
    assert found("BACKWARD", {"oneOf": [{"const": 1}, {"const": 1.0}]}, {"const": 1}) != set()  # 1 == 1.0
    # By a discriminating property, the writer's own type reaching branches without one.
    a, b = kind("a", n={"type": "integer"}), kind("b", s={"type": "string"})
    assert found("BACKWARD", {"oneOf": [a, b]}, a) == set()
    untyped = {**OBJ, "oneOf": [{k: v for k, v in x.items() if k != "type"} for x in (a, b)]}
    assert found("BACKWARD", untyped, a) == set()
    assert found("BACKWARD", {"oneOf": [a, b, kind("c")]}, {"oneOf": [a, b]}) == set()  # a branch added
    # By a required property that a closed branch does not list.
    closed_x = {**OBJ, "properties": {"x": {}}, "required": ["x"], "additionalProperties": False}
    closed_y = {**OBJ, "properties": {"y": {}}, "required": ["y"], "additionalProperties": False}
    assert found("BACKWARD", {"oneOf": [closed_x, closed_y]}, closed_x) == set()


def test_a_writer_oneof_keeps_its_values_out_of_its_other_branches() -> None:
    # number and integer overlap, but the writer's own oneOf already refused integers in
    # its number branch; a branch added to it changes nothing for old data.
    old = {"oneOf": [{"type": "number"}, {"type": "integer"}]}
    assert found("BACKWARD", {"oneOf": [{"type": "number"}, {"type": "integer"}, {"type": "null"}]}, old) == set()
    # An anyOf writer keeps nothing out: its integers match both reader branches.
    assert found("BACKWARD", {"oneOf": [{"type": "number"}, {"type": "integer"}]},
                 {"anyOf": [{"type": "number"}, {"type": "integer"}]}) == {("$.oneOf", "sum-type-narrowed")}


_LEAVES = st.sampled_from([
    {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "null"}, {"type": "boolean"},
    {"type": "string", "maxLength": 2}, {"const": 1}, {"const": 1.0}, {"const": "a"}, {"enum": ["a", 2, None]},
    {"enum": [True]}, {}, True, False,
])
_SCHEMAS = st.recursive(
    _LEAVES,
    lambda inner: st.builds(
        lambda props, req, add: {"type": "object", "properties": props, "required": req,
                                 **({} if add is None else {"additionalProperties": add})},
        st.dictionaries(st.sampled_from(["kind", "a", "b"]), inner, max_size=2),
        st.lists(st.sampled_from(["kind", "a", "b"]), unique=True, max_size=2),
        st.none() | st.just(False),
    ),
    max_leaves=5,
)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(["a", "abc", 1.0, 1.5]),
    lambda inner: st.dictionaries(st.sampled_from(["kind", "a", "b", "c"]), inner, max_size=3),
    max_leaves=5,
)


@settings(max_examples=300, deadline=None)
@given(_SCHEMAS, _SCHEMAS, st.lists(_VALUES, min_size=1, max_size=10))
@example({"const": 1}, {"const": 1.0}, [1])
def test_disjoint_is_sound(a: Any, b: Any, values: list[Any]) -> None:
    """Whatever ``disjoint`` calls apart, no value is valid under both."""
    if not disjoint(a, b):
        return
    va, vb = jsonschema.Draft202012Validator(a), jsonschema.Draft202012Validator(b)
    for v in values:
        assert not (va.is_valid(v) and vb.is_valid(v)), (a, b, v)


def test_disjoint_proves_the_usual_cases() -> None:
    assert disjoint({"type": "string"}, {"type": "integer"})
    assert not disjoint({"type": "number"}, {"type": "integer"})
    assert disjoint(kind("a"), kind("b")) and not disjoint(kind("a"), kind("a"))
    assert disjoint({"const": True}, {"const": 1}) and not disjoint({"const": 1}, {"enum": [1.0]})
    assert not disjoint({"$ref": "#/$defs/x", "type": "string"}, {"type": "integer"})  # not looked into


def pets(**extra: dict[str, Any]) -> dict[str, Any]:
    """A discriminated union through references, as pydantic writes one."""
    def pet(kind_: str) -> dict[str, Any]:
        return {**OBJ, "properties": {"kind": {"const": kind_}, "lives": {"type": "integer"}, **extra.get(kind_, {})},
                "required": ["kind"], "additionalProperties": False}
    return {"$defs": {"Cat": pet("cat"), "Dog": pet("dog")},
            "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}


def test_branches_behind_references_are_proven_apart() -> None:
    old = pets()
    both_changed = pets(cat={"name": {"type": "string"}}, dog={"breed": {"type": "string"}})
    assert found("BACKWARD", both_changed, old) == set()
    # The old closed models cannot read the new properties: no old branch fits.
    assert found("FORWARD", both_changed, old) == {("$.oneOf", "sum-type-extended")}
    # A branch added behind a reference, with its own discriminator value.
    with_bird = pets(cat={"name": {"type": "string"}})
    with_bird["$defs"]["Bird"] = {**with_bird["$defs"]["Cat"], "properties": {"kind": {"const": "bird"}}}
    with_bird["oneOf"].append({"$ref": "#/$defs/Bird"})
    assert found("BACKWARD", with_bird, old) == set()
    # ... but one that shares the cat's discriminator may also match a cat.
    with_bird["$defs"]["Bird"]["properties"]["kind"] = {"const": "cat"}
    assert ("$.oneOf", "sum-type-narrowed") in found("BACKWARD", with_bird, old)


def test_reference_cycles_prove_nothing() -> None:
    loop = {"$defs": {"L": {"$ref": "#/$defs/L"}}}
    assert disjoint({"$ref": "#/$defs/L"}, {"type": "string"}, lambda n: [loop["$defs"]["L"]], None) is False
    new = {**loop, "oneOf": [{"type": "string"}, {"$ref": "#/$defs/L"}]}
    assert found("BACKWARD", new, {"type": "string"})  # refused, and it terminates
