"""Numbers in schemas (docs/schemas.md, "Identical"): JSON Schema compares them by
mathematical value, so the canonical form writes each value one way, exactly; and a
number no double can hold is refused as malformed, never turned into infinity."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tidings.schemas.formats import MalformedSchema, parse_model
from tidings.schemas.formats import json_canonical as canonical_of_text

MANTISSAS = st.integers(min_value=-(10**20), max_value=10**20)
EXPONENTS = st.integers(min_value=-30, max_value=30)


@st.composite
def spelled(draw: st.DrawFn, mantissa: int, exponent: int) -> str:
    """A JSON literal for ``mantissa * 10**exponent``, written one of the many ways."""
    if mantissa == 0:
        return draw(st.sampled_from(["0", "-0", "0.0", "-0.000", "0e7", "0E-3"]))
    shift = draw(st.integers(0, 3))
    m, e = mantissa * 10**shift, exponent - shift
    sign, digits = ("-" if m < 0 else ""), str(abs(m))
    if draw(st.booleans()):
        plus = draw(st.sampled_from(["", "+"])) if e >= 0 else ""
        return f"{sign}{digits}{draw(st.sampled_from('eE'))}{plus}{e}"
    if e >= 0:
        return sign + digits + "0" * e + draw(st.sampled_from(["", ".0", ".000"]))
    digits = digits.rjust(-e + 1, "0")
    return f"{sign}{digits[:e]}.{digits[e:]}"


def canonical(text: str) -> str:
    return parse_model("JSON", text).canonical


@given(st.lists(st.tuples(MANTISSAS, EXPONENTS), min_size=1, max_size=6), st.data())
def test_equal_numbers_give_one_canonical_form(values: list[tuple[int, int]], data: st.DataObject) -> None:
    """However each number is written, and in whatever key order, one canonical text."""

    def text() -> str:
        numbers = [data.draw(spelled(m, e)) for m, e in values]
        keys = data.draw(st.permutations(["type", "minimum", "const", "properties"]))
        parts = {
            "type": '"number"',
            "minimum": numbers[0],
            "const": "[" + ",".join(numbers) + "]",
            "properties": '{"a": {"default": ' + numbers[-1] + "}}",
        }
        return "{" + ", ".join(f'"{k}": {parts[k]}' for k in keys) + "}"

    first, second = text(), text()
    assert canonical(first) == canonical(second) == canonical_of_text(second), (first, second)


@given(MANTISSAS, EXPONENTS, MANTISSAS, EXPONENTS, st.data())
@example(9007199254740993, 0, 90071992547409920, -1, None)  # 2**53 + 1 and 2**53.0: one double, two numbers
@example(9007199254740993, 0, 90071992547409930, -1, None)  # 2**53 + 1 and 2**53 + 1.0: one number
@example(1, -1, 10000000000000001, -17, None)  # 0.1 and 0.10000000000000001
def test_canonical_forms_are_equal_exactly_when_the_numbers_are(
    m1: int, e1: int, m2: int, e2: int, data: st.DataObject | None
) -> None:
    a, b = Decimal(m1).scaleb(e1), Decimal(m2).scaleb(e2)
    if data is None:
        first, second = str(a), str(b)
    else:
        first, second = data.draw(spelled(m1, e1)), data.draw(spelled(m2, e2))
    same = canonical(f'{{"const": {first}}}') == canonical(f'{{"const": {second}}}')
    assert same == (a == b), (first, second)


def test_canonical_numbers_are_plain_json() -> None:
    text = '{"const": [1.0e2, -0.0, 0.50, 1e-25, 12.30, -7E+1, 3]}'
    assert canonical(text) == '{"const":[100,0,0.5,1e-25,12.3,-70,3]}'
    assert json.loads(canonical(text))["const"] == [100, 0, 0.5, 1e-25, 12.3, -70, 3]


@pytest.mark.parametrize(
    ("number", "message"),
    [
        ("1e400", "out of range"),
        ("-1.8e308", "out of range"),
        ("1" + "0" * 400, "out of range"),
        ("1" + "0" * 5000, "characters long"),  # Python's int would refuse it with a ValueError
    ],
)
@pytest.mark.parametrize("fmt", ["JSON", "AVRO"])
def test_numbers_past_a_double_are_malformed(number: str, message: str, fmt: str) -> None:
    doc: Any = (
        f'{{"maximum": {number}}}'
        if fmt == "JSON"
        else f'{{"type": "record", "name": "R", "fields": [{{"name": "d", "type": "double", "default": {number}}}]}}'
    )
    with pytest.raises(MalformedSchema, match=message):
        parse_model(fmt, doc)
    with pytest.raises(MalformedSchema, match=message):
        canonical_of_text(doc)
