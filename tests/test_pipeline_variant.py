"""The archive's VARIANT payload: the JSON view of the data, in Spark's binary encoding.

Checked against PySpark's own pure-Python decoder, so no Spark session is needed;
tests/test_pipeline_archive.py reads the column back through Spark SQL.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings

from tests.test_values import values
from tidings.core.jsonview import json_view
from tidings.pipeline._variant import encode

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
        return isinstance(got, float) and got == float(view)
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


def test_large_objects_arrays_and_strings() -> None:
    """Past 255 elements, 255 keys and 64-byte strings the encoding widens its fields."""
    many = {"Map": [[f"k{i:04d}", {"Nat": i * 1000}] for i in range(300)] + [["k0000", {"Text": "é" * 40}]]}
    wire = {"Array": [many, {"Text": "x" * 70_000}, {"Nats": list(range(400))}, {"Int": -(2**70)}]}
    assert same(json_view(wire), decoded(wire))
    assert decoded(wire)[0]["k0000"] == "é" * 40  # the last of a repeated key counts, as in the view
