"""The Spark column of a filter agrees with the Python predicate (docs/filters.md).

Spark jobs are slow to start, so every job evaluates many filters over many events:
one DataFrame of events, one column per filter, one collect.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_filters import REFERENCE_EXAMPLES, A, B, C, M, N, O, T, events, filters, pairs
from tidings.core.filters import Filter, compile_predicate, parse
from tidings.core.jsonview import json_view_bytes

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tidings.pipeline.filters import to_column, to_sql


def frame(spark: Any, data: list[Any]) -> DataFrame:
    """Events as rows: ``id`` and ``data``, the VARIANT of their JSON view."""
    rows = [(i, json_view_bytes(d).decode()) for i, d in enumerate(data)]
    return spark.createDataFrame(rows, "id int, json string").select("id", F.parse_json("json").alias("data"))


def spark_results(spark: Any, data: list[Any], fs: list[Filter | str]) -> list[list[bool]]:
    """results[event][filter], from one Spark job."""
    df = frame(spark, data).select("id", *(to_column(f).alias(f"f{k}") for k, f in enumerate(fs)))
    rows = sorted(df.collect(), key=lambda r: r["id"])
    return [[r[f"f{k}"] for k in range(len(fs))] for r in rows]


def assert_agree(spark: Any, data: list[Any], fs: list[Filter | str]) -> None:
    got = spark_results(spark, data, fs)
    predicates = [compile_predicate(f) for f in fs]
    mismatches = [
        (str(f), d, want, have)
        for d, row in zip(data, got, strict=True)
        for f, p, have in zip(fs, predicates, row, strict=True)
        if (want := p(d)) != have
    ]
    assert not mismatches, "\n".join(f"{f!r} on {d!r}: python {w}, spark {h}" for f, d, w, h in mismatches[:10])
    assert all(type(v) is bool for row in got for v in row)  # never NULL


@pytest.fixture
def interpreted(spark: Any) -> Iterator[None]:
    """Spark without code generation: twenty filter columns in one projection outgrow
    Janino's 64 KB method limit, and compiling them costs more than 50 rows ever will."""
    conf = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    yield
    for k, v in before.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


HAND_EVENTS = [
    M(
        books=A(
            M(author=M(name=T("John Smith")), year=N(1999)),
            M(author=M(name=T("Mary Johnson")), year=N(2005)),
        ),
        host=A(M(name=T("alpha")), M(name=T("Johnny"))),
        amount={"Float": 100.5},
        status=T("shipped"),
        total=N(80),
        priority=T("high"),
        items=A(M(sku=T("B-2")), M(sku=T("A-17"))),
        tags=A(T("x"), T("urgent")),
    ),
    M(amount=N(100), status=T("shipped"), total=N(120), priority=T("low"), tags=A(), books=A()),
    pairs(("a", N(1)), ("a", N(2)), ('q\'"', T("both")), ("0", T("zero")), ("-1", T("minus"))),
    M(a=O(), b=B(False), c=O(B(True)), vm={"ValueMap": [[T("k"), N(1)]]}, ns={"Nats": [4, 5]}),
    M(cls=C(("x", N(1)), ("x", N(3)))),
    M(blob={"Blob": "AQI="}, who={"Principal": "aaaaa-aa"}, big=N(2**64), neg={"Int": -(2**53)}, e=T("Straße")),
    pairs(("a]b", N(1)), ("back\\slash", N(2)), ("new\nline", N(3)), ("it's", N(4)), ('say "x"', N(5)), ("*", N(6))),
    O(),
    A(N(1), T("1"), O(), A(N(2))),
    N(7),
]

HAND_FILTERS = [
    *REFERENCE_EXAMPLES,
    "books.-1.year > 2000", "books[year < 2000].author.name ~~= SMITH", "books.*.author.name !~= Mary",
    "a == 2", "a == 1", "* == 1", "* == 2", "q'\" == both", "0 == zero", "-1 == minus", "0 == 1", "-1 == ?",
    "a", "b", "c", "a == ?", "a != ?", "b == false", "b != true", "c == true", "vm.0.0 == k", "vm.*.1 == 1",
    "vm[@.0 == k].1 > 0", "ns.-1 == 5", "ns[@ > 4] == 5", "cls.x == 3", "cls.* == 1", "blob == AQI=",
    "who ~= aaaa", "big == 18446744073709551616", "big > 1e19", "neg <= -9007199254740992", "e ~~= ß",
    "e ~~= STRASSE", "e > Strasse", "$ == ?", "$", "@", "$.0 == 1", "1 == 1", r"1 == \1", "-1.0 == 2",
    "* == 1 & *.0 == 2", "*.* == 2", "$ == 7", "$ > 6.5", "$.a | $.0", "a.99999999999999999999",
    "tags[@ == urgent] & (total >= 100 | priority == high)", "items[sku ~= A].sku == A-17",
    r"a\]b == 1", r"back\\slash == 2", "new\nline == 3", "it's == 4", r'say\ "x" == 5', r"\* == 6", "* == 6",
    r"x == it\'s", r"name ~= \\", "name ~~= 'Q'",
]


def test_hand_written_filters_agree(spark: Any, interpreted: None) -> None:
    assert_agree(spark, HAND_EVENTS, list(HAND_FILTERS))


def test_reference_examples_through_spark(spark: Any) -> None:
    got = spark_results(spark, HAND_EVENTS[:2], list(REFERENCE_EXAMPLES))
    by_text = dict(zip(REFERENCE_EXAMPLES, zip(*got, strict=True), strict=False))
    assert by_text["books.0.author.name == John"] == (False, False)  # the name is "John Smith"
    assert by_text["books[author.name ~= John].author.name"] == (True, False)
    assert by_text["host[name ~= John]"] == (True, False)
    assert by_text["$.amount > 100"] == (True, False)
    assert by_text["status == shipped & (total >= 100 | priority == high)"] == (True, True)
    assert by_text["items.*.sku == A-17"] == (True, False)
    assert by_text["tags[@ == urgent]"] == (True, False)


def test_to_column_takes_text_filters_expressions_and_columns(spark: Any) -> None:
    df = frame(spark, [M(a=N(1)), M(a=N(2))]).withColumnRenamed("data", "d")
    f = parse("a == 1")
    cols = [to_column("a == 1", "d"), to_column(f, F.col("d")), to_column(f.expr, "d")]
    rows = sorted(df.select("id", *(c.alias(f"c{i}") for i, c in enumerate(cols))).collect())
    assert [tuple(r)[1:] for r in rows] == [(True, True, True), (False, False, False)]
    nulls = spark.createDataFrame([(None,)], "json string").select(F.parse_json("json").alias("data"))
    assert nulls.select(to_column("$ != ?"), to_column("a != 1"), to_column("*")).first() == (False, False, False)
    raw = spark.createDataFrame([('{"a": 1}',), ('{"a": 2}',)], "json string")
    both = raw.select(F.expr(to_sql("a == 1", "parse_json(json)")), to_column("a == 1", F.parse_json("json")))
    assert [tuple(r) for r in both.collect()] == [(True, True), (False, False)]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(st.lists(events(), min_size=50, max_size=50), st.lists(filters(1), min_size=16, max_size=16))
def test_spark_agrees_with_the_python_predicate(
    spark: Any, interpreted: None, data: list[Any], fs: list[Filter]
) -> None:
    """50 random events x 16 random filters per Spark job.

    Conditions nest one deep here: Spark's SQL parser is slow on each new deeply nested
    shape, and deeper nesting is checked against the spec in tests/test_filters.py."""
    assert_agree(spark, data, list(fs))
