"""The global id rule in Python (tidings.core.global_id) and as a Spark Column
(tidings.pipeline.global_id) agree on every string, escapes in any position included."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.core.global_id import GlobalIdError, global_id
from tidings.pipeline.global_id import global_id_column

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# Pieces that matter to the rule, mixed with arbitrary text: separators, escapes of any
# byte (valid UTF-8 or not), lone and broken escapes, the parameter name spelled and
# escaped, the replacement character spelled both ways.
_bytes = st.binary(min_size=1, max_size=4).map(lambda b: "".join(f"%{x:02{'X' if x % 2 else 'x'}}" for x in b))
_piece = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["?", "&", "=", "#", "+", "%", "%2", "%zz", "%%", "hl", "hl=", "h%6C=", "%68l=", "HL=",
                     "\ufffd", "%EF%BF%BD", "%ef%bf%bd", "%C3", "%C3%A9", "é", "%F0%9F%98%80", "😀", "%ED%A0%80",
                     "%25", "%2B", "%26", "%3D", "%23", "%3F", " ", "\\", "'", "`"]),
    _bytes,
)
_location = st.one_of(
    st.text(),
    st.lists(_piece, max_size=12).map("".join),
    st.lists(_piece, max_size=8).map(lambda ps: "https://h/e?hl=" + "".join(ps)),
    st.lists(_piece, max_size=8).map(lambda ps: "https://h/e?x=1&" + "".join(ps) + "&hl=z"),
)

_FIXED = [
    "https://h/e?hl=a%20b", "https://h/e?hl=a+b", "https://h/e?hl=%C3%A9t%C3%A9", "https://h/e?hl=%C3", "https://h/e?hl=100%",
    "https://h/e?hl=%ED%A0%80", "https://h/e?hl=\ufffd%EF%BF%BD", "https://h/e?hl=%EF%BF%BD%C3", "https://h/e?hl=",
    "https://h/e?hl=&hl=second", "https://h/e#?hl=1", "https://h/e?h%6C=zz", "https://h/e?hl", "no query", "",
    "https://h/e?hl=%26%3D%23%3F", "https://h/e?a=b?hl=x", "https://h/e?x=hl=1&hl=%2", "?hl==", "?hl=a=b",
]


def _python(location: str) -> str | None:
    try:
        return global_id(location)
    except GlobalIdError:
        return None


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(_location, min_size=300, max_size=300))
def test_python_and_spark_derive_the_same_global_id(spark: Any, generated: list[str]) -> None:
    rows = _FIXED + generated
    df = spark.createDataFrame([(i, s) for i, s in enumerate(rows)], "i int, loc string")
    got = {r["i"]: r["gid"] for r in df.select("i", global_id_column("loc").alias("gid")).collect()}
    wrong = [(rows[i], _python(rows[i]), got[i]) for i in range(len(rows)) if _python(rows[i]) != got[i]]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize(("location", "gid", "code"), [
    ("https://h/e?hl=a+b%2Bc", "a b+c", None),
    ("https://h/e?hl=100%", "100%", None),
    ("https://h/e?hl=&hl=second", "second", None),
    ("https://h/e?hl=\ufffd%EF%BF%BD", "\ufffd\ufffd", None),
    ("https://h/e?hl=%C3", None, "invalid_global_id"),
    ("https://h/e?hl=%ED%A0%80", None, "invalid_global_id"),
    ("https://h/e?hl", None, "missing_global_id"),
])
def test_the_rule_on_edges(location: str, gid: str | None, code: str | None) -> None:
    if code is None:
        assert global_id(location) == gid
    else:
        with pytest.raises(GlobalIdError) as e:
            global_id(location)
        assert e.value.code == code
