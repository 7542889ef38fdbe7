"""ICRC-16 values: the wire form, :class:`Value`, and plain Python conversions."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.values import (
    TAGS,
    InvalidValue,
    Principal,
    Value,
    check,
    from_python,
    to_python,
)

# -- strategies -------------------------------------------------------------------------

_SIZED = {
    "Nat8": (0, 2**8 - 1),
    "Nat16": (0, 2**16 - 1),
    "Nat32": (0, 2**32 - 1),
    "Nat64": (0, 2**64 - 1),
    "Int8": (-(2**7), 2**7 - 1),
    "Int16": (-(2**15), 2**15 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "Int64": (-(2**63), 2**63 - 1),
}


def _edgy(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], with the range edges drawn often."""
    edges = sorted({lo, lo + 1, hi - 1, hi, max(lo, min(hi, 0))})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


nats = st.one_of(
    st.integers(min_value=0, max_value=2**64),
    st.integers(min_value=2**64, max_value=2**512),  # beyond any fixed-width type
    st.sampled_from([0, 2**64 - 1, 2**64, 2**128 + 1]),
)
ints = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.integers(min_value=-(2**512), max_value=2**512),
    st.sampled_from([-(2**64) - 1, -(2**63) - 1, -1, 0, 2**64]),
)
finite_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([-0.0, 0.0, 5e-324, -1.7976931348623157e308]),
)
# A few fixed keys so that Maps often repeat one (duplicates are legal on the wire).
map_keys = st.one_of(st.sampled_from(["a", "b", ""]), st.text(max_size=8))


def _tagged(tag: str, payload: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return payload.map(lambda x: {tag: x})


SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "Nat": nats,
    "Int": ints,
    **{tag: _edgy(lo, hi) for tag, (lo, hi) in _SIZED.items()},
    "Text": st.text(),
    "Bool": st.booleans(),
    "Float": finite_floats,
    "Blob": st.binary(max_size=32).map(lambda b: base64.b64encode(b).decode()),
    "Principal": st.text(min_size=1, max_size=64),
    "Bytes": st.lists(st.integers(0, 255), max_size=16),
    "Floats": st.lists(finite_floats, max_size=6),
    "Nats": st.lists(nats, max_size=6),
}


def _containers(children: st.SearchStrategy[Any]) -> dict[str, st.SearchStrategy[Any]]:
    few = {"max_size": 4}
    return {
        "Array": st.lists(children, **few),
        "Set": st.lists(children, **few),
        "Map": st.lists(st.tuples(map_keys, children).map(list), **few),
        "ValueMap": st.lists(st.tuples(children, children).map(list), **few),
        "Class": st.lists(
            st.fixed_dictionaries({"name": map_keys, "value": children, "immutable": st.booleans()}),
            **few,
        ),
        "Option": st.one_of(st.none(), children),
    }


def _one_of_tags(strategies: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    return st.one_of(*(_tagged(tag, s) for tag, s in strategies.items()))


def values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Well-formed wire values of every ICRC-16 variant, nested to a bounded size."""
    return st.recursive(
        _one_of_tags(SCALARS),
        lambda children: _one_of_tags(_containers(children)),
        max_leaves=max_leaves,
    )


def plain() -> st.SearchStrategy[Any]:
    """Plain Python data that from_python/to_python carry both ways unchanged."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        ints,
        finite_floats,
        st.text(max_size=16),
        st.binary(max_size=16),
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(max_size=8), children, max_size=4),
        ),
        max_leaves=12,
    )


def same(a: Any, b: Any) -> bool:
    """Strict structural equality: types must match, floats compare bit for bit."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return struct.pack("<d", a) == struct.pack("<d", b)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def test_strategy_covers_every_variant() -> None:
    assert set(SCALARS) | set(_containers(st.nothing())) == TAGS


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(values())
def test_generated_values_check_and_round_trip(v: Any) -> None:
    check(v)
    value = Value.from_wire(v)
    assert same(value.to_wire(), v)
    assert Value.from_wire(value.to_wire()) == value


@settings(max_examples=200, deadline=None)
@given(values())
def test_json_round_trip_is_lossless(v: Any) -> None:
    raw = msgspec.json.encode(v)
    decoded = msgspec.json.decode(raw)
    assert same(decoded, v)
    a, b = Value.from_wire(decoded), Value.from_wire(v)
    assert a == b
    assert hash(a) == hash(b)
    assert same(a.to_wire(), v)


@settings(max_examples=60, deadline=None)
@given(values(max_leaves=6), st.data())
def test_equality_follows_the_wire_form(v: Any, data: st.DataObject) -> None:
    w = data.draw(st.one_of(st.just(msgspec.json.decode(msgspec.json.encode(v))), values(max_leaves=6)))
    a, b = Value.from_wire(v), Value.from_wire(w)
    assert (a == b) == same(v, w)
    if a == b:
        assert hash(a) == hash(b)


@settings(max_examples=200, deadline=None)
@given(plain())
def test_plain_python_round_trip(x: Any) -> None:
    value = from_python(x)
    check(value.to_wire())
    assert same(value.to_python(), x)
    assert same(to_python(value.to_wire()), x)


@settings(max_examples=50, deadline=None)
@given(values())
def test_to_python_accepts_every_generated_value(v: Any) -> None:
    try:
        to_python(v)
    except TypeError as e:
        # A ValueMap key that renders as a dict (Map, Class) cannot be a dict key.
        assert "unhashable" in str(e)


# -- normalization ------------------------------------------------------------------------


def test_float_given_as_integer_becomes_float() -> None:
    assert same(Value.from_wire({"Float": 5}).to_wire(), {"Float": 5.0})
    assert same(Value.from_wire({"Floats": [1, 2.5]}).to_wire(), {"Floats": [1.0, 2.5]})
    assert same(to_python({"Float": 5}), 5.0)


def test_negative_zero_stays_distinct() -> None:
    assert Value.from_wire({"Float": -0.0}) != Value.from_wire({"Float": 0.0})
    assert Value.from_wire({"Floats": [-0.0]}) != Value.from_wire({"Floats": [0.0]})
    assert Value.from_wire({"Array": [{"Float": -0.0}]}) != Value.from_wire({"Array": [{"Float": 0.0}]})


def test_values_are_immutable_and_reject_unknown_tags() -> None:
    v = Value("Nat", 1)
    with pytest.raises(AttributeError):
        v.tag = "Int"  # type: ignore[misc]
    with pytest.raises(InvalidValue):
        Value("Natural", 1)


# -- rejection ----------------------------------------------------------------------------


def _rejected(obj: Any) -> InvalidValue:
    with pytest.raises(InvalidValue) as info:
        check(obj)
    with pytest.raises(InvalidValue):
        Value.from_wire(obj)
    return info.value


@pytest.mark.parametrize(
    "obj",
    [
        {"Nat": True},
        {"Nat": False},
        {"Int": True},
        {"Nat8": True},
        {"Float": True},
        {"Nat": -1},
        {"Nat": 1.0},
        {"Nat": "1"},
        {"Nat8": 256},
        {"Nat8": -1},
        {"Int8": 128},
        {"Int8": -129},
        {"Nat16": 2**16},
        {"Nat32": 2**32},
        {"Nat64": 2**64},
        {"Int64": 2**63},
        {"Int64": -(2**63) - 1},
        {"Float": float("inf")},
        {"Float": float("-inf")},
        {"Float": float("nan")},
        {"Float": "1.5"},
        {"Float": 10**400},  # an integer no double can hold
        {"Floats": [1.0, float("inf")]},
        {"Floats": [10**400]},
        {"Floats": [True]},
        {"Blob": "not base64!"},
        {"Blob": "QQ"},  # missing padding
        {"Blob": "é"},
        {"Blob": b"QQ=="},
        {"Text": 1},
        {"Bool": 1},
        {"Principal": ""},
        {"Principal": 5},
        {"Nat": 1, "Int": 1},
        {},
        {"Natural": 1},
        [],
        None,
        5,
        {"Map": [[1, {"Nat": 1}]]},
        {"Map": [["a", {"Nat": 1}, "extra"]]},
        {"Map": {"a": {"Nat": 1}}},
        {"Array": {"Nat": 1}},
        {"Class": [{"name": "a", "value": {"Nat": 1}}]},
        {"Class": [{"name": 1, "value": {"Nat": 1}, "immutable": False}]},
        {"Class": [{"name": "a", "value": {"Nat": 1}, "immutable": 0}]},
        {"Option": 5},
        {"Bytes": [0, 256]},
        {"Bytes": [-1]},
        {"Bytes": [True]},
        {"Nats": [-1]},
        {"Nats": [False]},
    ],
)
def test_malformed_values_are_rejected(obj: Any) -> None:
    err = _rejected(obj)
    assert isinstance(err, ValueError)
    assert err.path.startswith("$")
    assert err.reason in str(err)


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({"Nat": True}, "$"),
        ({"Nat": -1}, "$"),
        ({"Nat8": 256}, "$"),
        ({"Float": float("inf")}, "$"),
        ({"Blob": "***"}, "$"),
        ({"Nat": 1, "Int": 1}, "$"),
        ({"Natural": 1}, "$"),
        ({"Map": [["a", {"Nat": 1}], [2, {"Nat": 1}]]}, "$[1]"),
        ({"Class": [{"name": "a", "value": {"Nat": 1}}]}, "$[0]"),
        ({"Bytes": [1, 256]}, "$"),
        ({"Array": [{"Nat": 1}, {"Nat": -1}]}, "$[1]"),
        ({"Map": [["a", {"Array": [{"Nat": 1}, {"Nat": -1}]}]]}, "$.a[1]"),
        ({"Map": [["a", {"Map": [["b", {"Nat8": 300}]]}]]}, "$.a.b"),
        ({"Set": [{"Option": {"Int": "x"}}]}, "$[0]?"),
        ({"ValueMap": [[{"Text": "k"}, {"Nat": 1}], [{"Nat": -1}, {"Nat": 1}]]}, "$[1][0]"),
        ({"ValueMap": [[{"Text": "k"}, {"Bool": 0}]]}, "$[0][1]"),
        ({"Class": [{"name": "p", "value": {"Array": [{"Blob": "!"}]}, "immutable": True}]}, "$.p[0]"),
        ({"Map": [["a", {"Array": [{"Map": [[0, {"Nat": 1}]]}]}]]}, "$.a[0][0]"),
    ],
)
def test_error_path_points_at_the_culprit(obj: Any, path: str) -> None:
    err = _rejected(obj)
    assert err.path == path
    assert str(err).endswith(f" at {path}")


def test_error_message_names_the_problem() -> None:
    assert "Nat8" in _rejected({"Nat8": 256}).reason
    assert "unknown ICRC-16 variant 'Natural'" in _rejected({"Natural": 1}).reason
    assert "base64" in _rejected({"Blob": "***"}).reason
    assert "exactly one" in _rejected({"Nat": 1, "Int": 1}).reason


def test_check_custom_root_path() -> None:
    with pytest.raises(InvalidValue) as info:
        Value.from_wire({"Array": [{"Nat": -1}]}, path="$.data")
    assert info.value.path == "$.data[0]"


@pytest.mark.parametrize(
    "obj",
    [
        {"Nat8": 0},
        {"Nat8": 255},
        {"Int8": -128},
        {"Int8": 127},
        {"Nat64": 2**64 - 1},
        {"Int64": -(2**63)},
        {"Nat": 2**200},
        {"Int": -(2**200)},
        {"Float": -0.0},
        {"Float": 2**1023},
        {"Blob": ""},
        {"Option": None},
        {"Map": [["a", {"Nat": 1}], ["a", {"Nat": 2}]]},
        {"Class": []},
        {"Bytes": [0, 255]},
    ],
)
def test_edge_values_are_accepted(obj: Any) -> None:
    check(obj)
    Value.from_wire(obj)


# -- from_python / to_python --------------------------------------------------------------


def test_from_python_tags() -> None:
    assert from_python(None) == Value("Option", None)
    assert from_python(True) == Value("Bool", True)
    assert from_python(3) == Value("Nat", 3)
    assert from_python(-3) == Value("Int", -3)
    assert from_python(1.5) == Value("Float", 1.5)
    assert from_python("x") == Value("Text", "x")
    assert from_python(Principal("aaaaa-aa")) == Value("Principal", "aaaaa-aa")
    assert from_python(b"\x00") == Value("Blob", b"\x00")
    assert from_python((1,)) == Value("Array", (Value("Nat", 1),))
    assert from_python(frozenset({1})) == Value("Set", (Value("Nat", 1),))
    assert from_python({"a": 1}) == Value("Map", (("a", Value("Nat", 1)),))
    assert from_python({1: "a"}) == Value("ValueMap", ((Value("Nat", 1), Value("Text", "a")),))
    v = Value("Nat8", 1)
    assert from_python(v) is v


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), object(), 1j])
def test_from_python_rejects(bad: Any) -> None:
    with pytest.raises(InvalidValue):
        from_python(bad)


def test_to_python_principal_is_a_str_subclass() -> None:
    p = to_python({"Principal": "aaaaa-aa"})
    assert type(p) is Principal
    assert isinstance(p, str)
    assert p == "aaaaa-aa"
    assert repr(p) == "Principal('aaaaa-aa')"
    assert type(to_python({"Text": "aaaaa-aa"})) is str
    # and it goes back out as a Principal, not as Text
    assert from_python(p) == Value("Principal", "aaaaa-aa")


def test_to_python_blob_bytes_option() -> None:
    assert to_python({"Blob": base64.b64encode(b"\x00\xff").decode()}) == b"\x00\xff"
    assert type(to_python({"Blob": ""})) is bytes
    assert to_python({"Bytes": [0, 255]}) == b"\x00\xff"
    assert to_python({"Option": None}) is None
    assert to_python({"Option": {"Nat": 4}}) == 4
    assert to_python({"Option": {"Option": None}}) is None


def test_to_python_value_map_array_keys_become_tuples() -> None:
    wire = {
        "ValueMap": [
            [{"Array": [{"Nat": 1}, {"Array": [{"Text": "x"}]}]}, {"Nat": 2}],
            [{"Text": "k"}, {"Bool": True}],
        ]
    }
    assert to_python(wire) == {(1, ("x",)): 2, "k": True}


def test_to_python_containers() -> None:
    assert to_python({"Map": [["a", {"Nat": 1}], ["a", {"Nat": 2}]]}) == {"a": 2}  # last wins
    assert to_python({"Class": [{"name": "n", "value": {"Int": -1}, "immutable": True}]}) == {"n": -1}
    assert to_python({"Set": [{"Nat8": 7}]}) == [7]
    assert same(to_python({"Floats": [1, 2.5]}), [1.0, 2.5])
    assert to_python({"Nats": [2**70]}) == [2**70]
    assert to_python({"Int64": -(2**63)}) == -(2**63)
    assert Value.from_wire({"Nat8": 1}).to_python() == 1


def test_float_payload_is_float() -> None:
    assert math.copysign(1.0, Value.from_wire({"Float": -0.0}).payload) == -1.0
    assert type(Value.from_wire({"Float": 3}).payload) is float


def test_nesting_is_limited_to_max_depth() -> None:
    from tidings.core.values import MAX_DEPTH, InvalidValue, check

    def nested(n: int) -> dict:
        v: dict = {"Nat": 1}
        for _ in range(n - 1):
            v = {"Array": [v]}
        return v

    check(nested(MAX_DEPTH))  # MAX_DEPTH - 1 Arrays around a Nat
    with pytest.raises(InvalidValue) as e:
        check(nested(MAX_DEPTH + 1))
    assert "nest" in e.value.reason
    assert e.value.path.startswith("$[0][0]")
