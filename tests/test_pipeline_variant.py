"""The archive's VARIANT payload: the JSON view of the data, in Spark's binary encoding.

Checked against PySpark's own pure-Python decoder, so no Spark session is needed;
tests/test_pipeline_archive.py reads the column back through Spark SQL.
"""

from __future__ import annotations

import decimal
import json
import math
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_values import values
from tidings.core.jsonview import json_view
from tidings.pipeline._variant import encode, encode_text, native

pa = pytest.importorskip("pyarrow")
from tidings.pipeline._arrow import payload_array  # noqa: E402 - needs pyarrow

variant_utils = pytest.importorskip("pyspark.sql.variant_utils")


def decoded(wire: Any) -> Any:
    metadata, value = encode(wire)
    with decimal.localcontext() as ctx:  # PySpark's decoder computes decimals in the current context
        ctx.prec = 60
        return variant_utils.VariantUtils.to_python(value, metadata)


def same(view: Any, got: Any) -> bool:
    """The view and the decoded VARIANT agree (big integers come back as decimals or doubles)."""
    if isinstance(view, bool) or view is None:
        return view is got or view == got
    if isinstance(view, int):
        if -(2**63) <= view < 2**63 or abs(view) < 10**38:
            return isinstance(got, (int, Decimal)) and got == view and not isinstance(got, bool)
        try:
            as_double = float(view)
        except OverflowError:  # past a double: null, as an infinite float is
            return got is None
        return isinstance(got, float) and got == as_double
    if isinstance(view, float):
        return got is None if not math.isfinite(view) else isinstance(got, float) and got == view
    if isinstance(view, dict):
        return isinstance(got, dict) and got.keys() == view.keys() and all(same(view[k], got[k]) for k in view)
    if isinstance(view, list):
        return isinstance(got, list) and len(got) == len(view) and all(map(same, view, got))
    return bool(view == got)


@settings(max_examples=400)
@given(values(max_leaves=20))
def test_variant_is_the_json_view(wire: Any) -> None:
    assert same(json_view(wire), decoded(wire))


@pytest.mark.parametrize("x", [10**38, 2**1024 - 1, 2**1024, 10**4299 * 9, -(10**4299 - 1)],
                         ids=["39-digits", "2^1024-1", "2^1024", "4300-digits", "minus-4299-digits"])
def test_integers_up_to_the_longest_read_are_encoded(x: int) -> None:
    """ICRC-16 integers reach 4,300 digits (core.long_ints); one past a double's range
    raised OverflowError, failing the archive of its whole batch."""
    for wire in ({"Nat": abs(x)}, {"Int": x}, {"Map": [["n", {"Int": x}]]}):
        assert same(json_view(wire), decoded(wire))
        assert encode_text(msgspec.json.encode(wire)) == encode(wire)


def test_large_objects_arrays_and_strings() -> None:
    """Past 255 elements, 255 keys and 64-byte strings the encoding widens its fields."""
    many = {"Map": [[f"k{i:04d}", {"Nat": i * 1000}] for i in range(300)] + [["k0000", {"Text": "é" * 40}]]}
    wire = {"Array": [many, {"Text": "x" * 70_000}, {"Nats": list(range(400))}, {"Int": -(2**70)}]}
    assert same(json_view(wire), decoded(wire))
    assert decoded(wire)[0]["k0000"] == "é" * 40  # the last of a repeated key counts, as in the view


# -- the C encoder (``_variantc``): the same bytes as the Python one, from the JSON text --


def texts_of(wire: Any) -> list[bytes]:
    """The forms a wire value's JSON text takes: compact, ASCII with escapes, indented."""
    indented = json.dumps(wire, ensure_ascii=False, indent=1)
    return [msgspec.json.encode(wire), json.dumps(wire).encode(), indented.encode()]


def test_the_native_encoder_is_built() -> None:
    """A default install compiles it; without it the archive runs at a fraction of its speed."""
    assert native is not None


@settings(max_examples=1500, deadline=None)
@given(values(max_leaves=20))
def test_native_encoder_gives_the_same_bytes(wire: Any) -> None:
    want = encode(wire)
    for text in texts_of(wire):
        assert encode_text(text) == want
        column = pa.array([text.decode()] * 3, pa.string()).slice(1)
        for texts in (column, pa.chunked_array([column, column]), column.cast(pa.large_string())):
            assert [(p["metadata"], p["value"]) for p in payload_array(texts).to_pylist()] == [want] * len(texts)


@pytest.mark.parametrize(
    "wire",
    [
        {"Int": -(2**127)},  # decimal(38, 0) edges, then doubles
        {"Nat": 10**38 - 1},
        {"Nat": 10**38},
        {"Int": -(10**300)},
        {"Map": [["a", {"Map": [["b", {"Nat": 1}]]}], ["a", {"Nat": 2}]]},  # the left-out value's names
        {"Array": [{"Map": [["a", {"Nat": 1}]]}, {"Map": [["a", {"Nat": 2}]]}]},
        {"Map": [[f"k{i}", {"Nat": i}] for i in range(300)]},
        {"Class": [{"value": {"Text": "v"}, "immutable": True, "name": "n"}]},
        {"Text": "\u00e9\U0001f600" * 40},
        {"Option": {"Option": None}},
    ],
)
def test_native_encoder_at_the_edges(wire: Any) -> None:
    for text in texts_of(wire):
        assert encode_text(text) == encode(wire)


@pytest.mark.parametrize(
    "text",
    [
        '{"Nat": 1e400}',  # numbers in forms the wire does not use
        '{"Float": 1e400}',
        '{"Nat": 5.0}',
        '{"Text": "\\udc00"}',  # a lone surrogate
        '{"Nat": 1' + "0" * 400 + "}",  # past a double
        '{"Nope": 1}',
        '{"Nat": 1, "Int": 2}',
        '{"Map": [["a"]]}',
        '{"ValueMap": [[{"Nat": 1}]]}',
        '{"Option": ' * 300 + "null" + "}" * 300,  # deeper than the C encoder goes
        '{"Nat": 1} trailing',
    ],
)
def test_native_encoder_hands_rare_and_bad_input_to_python(text: str) -> None:
    """What the C encoder does not take is encoded, or refused, exactly as in Python."""
    try:
        want: Any = encode(msgspec.json.decode(text))
    except Exception as e:
        want = type(e)
    column = pa.array(['{"Nat": 1}', text, '{"Nat": 2}'], pa.string())
    if isinstance(want, tuple):
        assert encode_text(text) == want
        assert payload_array(column).to_pylist()[1] == {"metadata": want[0], "value": want[1]}
    else:
        with pytest.raises(want):
            encode_text(text)
        with pytest.raises(want):
            payload_array(column)


@settings(max_examples=1000, deadline=None)
@given(values(max_leaves=8), st.data())
def test_native_encoder_never_takes_what_python_refuses(wire: Any, data: st.DataObject) -> None:
    """Cut, spliced or flipped texts: where the C encoder answers, Python gives the same
    bytes; where Python refuses, the C encoder hands the text back rather than answer."""
    text = bytearray(json.dumps(wire, ensure_ascii=data.draw(st.booleans())).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        how = data.draw(st.sampled_from(["cut", "insert", "flip"]))
        if how == "cut":
            del text[at : at + data.draw(st.integers(1, 4))]
        elif how == "insert":
            text[at:at] = data.draw(st.sampled_from([bytes([c]) for c in b'{}[],"\\-0e ']))
        elif at < len(text):
            text[at] ^= 1 << data.draw(st.integers(0, 7))
    got = native.encode_json(bytes(text)) if native is not None else None
    if got is not None:
        assert got == encode(msgspec.json.decode(bytes(text)))

