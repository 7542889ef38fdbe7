"""The one int64 rule both faces hold requests to (``tidings.core.int64``)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.int64 import INT64_MAX, INT64_MIN, out_of_range
from tidings.core.wire_stream import Confirm, Listen

inside = st.integers(INT64_MIN, INT64_MAX)
outside = st.integers(INT64_MAX + 1, 2**200) | st.integers(-(2**200), INT64_MIN - 1)


@given(st.lists(inside, max_size=20), st.integers(0, 20), outside)
def test_the_first_integer_past_int64_is_named_by_its_path(ids: list[int], at: int, bad: int) -> None:
    assert out_of_range(Confirm(ref=1, ids=ids)) is None
    at = min(at, len(ids))
    got = out_of_range(Confirm(ref=1, ids=[*ids[:at], bad, *ids[at:], bad]))
    assert got == f"$.ids[{at}]"
    assert out_of_range(Listen(ref=bad, subscriptions=ids)) == "$.ref"


@given(st.recursive(st.integers() | st.text(), lambda c: st.dictionaries(st.text(), c, max_size=3), max_leaves=8))
def test_icrc16_values_are_not_entered(value: Any) -> None:
    # Dicts are ICRC-16 values on the wire: their Nat and Int are unbounded.
    assert out_of_range({"Nat": value}) is None
    assert out_of_range([True, False, 1.5e300, "9" * 40]) is None


def test_a_struct_nested_in_a_list_is_entered() -> None:
    class Inner(msgspec.Struct):
        n: int

    assert out_of_range([Inner(1), Inner(INT64_MAX + 1)]) == "$[1].n"
    assert out_of_range((Inner(INT64_MIN),)) is None
