"""The ``tidings`` Spark data source reads the hot log: every column, partitions, pushdown.

The helpers here make small stores that the other pipeline tests use too.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

# Python data sources run in Python workers, which must import tidings: use this
# interpreter. Set at collection, before the shared session (and its JVM) starts.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import functions as F

from tidings.core.jsonview import json_view_bytes
from tidings.pipeline.session import prepare
from tidings.pipeline.source import EVENT_SCHEMA
from tidings.store import SQLiteStore
from tidings.store._base import NewEvent, StoredEvent

DAY_NS = 86_400 * 10**9
T0 = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
NAMESPACES = ("shop.orders", "a:b/c=d", "quiet")


def wire(i: int, ns: str) -> dict[str, Any]:
    return {"Map": [["amount", {"Nat": i}], ["ns", {"Text": ns}], ["even", {"Bool": i % 2 == 0}]]}


def make_store(path: Path, counts: dict[str, int], *, step_ns: int = 3_600 * 10**9, t0: int = T0) -> list[StoredEvent]:
    """A store at ``path`` (a data dir) with ``counts[ns]`` events per namespace, interleaved,
    the k-th event of the log stamped ``t0 + k * step_ns``. Returns what was stored."""
    path.mkdir(parents=True, exist_ok=True)

    async def go() -> list[StoredEvent]:
        store = SQLiteStore(path / "tidings.db")
        await store.open()
        try:
            out: list[StoredEvent] = []
            left = dict(counts)
            k = 0
            batch: list[NewEvent] = []
            while any(left.values()):
                for ns in counts:
                    if left[ns]:
                        left[ns] -= 1
                        i = counts[ns] - left[ns]
                        headers = json.dumps([["test:k", {"Nat": k}]]).encode()
                        batch.append(NewEvent(
                            namespace=ns, source="gen", timestamp=t0 + k * step_ns,
                            data=json.dumps(wire(i, ns)).encode(), headers=headers,
                        ))
                        k += 1
                if len(batch) >= 500:
                    out += await store.append(batch)
                    batch = []
            if batch:
                out += await store.append(batch)
            return out
        finally:
            await store.close()

    return asyncio.run(go())


def row_key(r: Any) -> tuple[str, int]:
    return (r["namespace"], r["id"])


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[StoredEvent]]:
    d = tmp_path_factory.mktemp("source")
    return d, make_store(d, {"shop.orders": 300, "a:b/c=d": 40, "quiet": 3})


def test_reads_every_event_with_every_column(spark: Any, events: tuple[Path, list[StoredEvent]]) -> None:
    prepare(spark)
    d, stored = events
    df = spark.read.format("tidings").option("partitionSize", "64").load(str(d))
    assert df.schema == EVENT_SCHEMA
    assert df.rdd.getNumPartitions() == -(-len(stored) // 64)
    rows = sorted(df.collect(), key=lambda r: r["seq"])
    assert len(rows) == len(stored)
    for r, e in zip(rows, stored, strict=True):
        assert (r.seq, r.namespace, r.id, r.prev_id, r.timestamp, r.source) == (
            e.seq, e.namespace, e.id, e.prev_id, e.timestamp, e.source,
        )
        assert r.data.encode() == e.data and r.headers.encode() == e.headers
        assert r.data_json == json_view_bytes(json.loads(e.data)).decode()
        assert int(r.time.timestamp() * 10**6) == e.timestamp // 1000
    # The JSON view parses into a VARIANT that Spark queries.
    total = (
        df.where("namespace = 'quiet'")
        .select(F.try_variant_get(F.parse_json("data_json"), "$.amount", "long").alias("a"))
        .agg(F.sum("a")).first()[0]
    )
    assert total == 1 + 2 + 3
    # Or the source gives the VARIANT itself when the schema asks for it; filters query it.
    from tidings.core.filters import compile_predicate
    from tidings.pipeline.filters import to_column

    view = spark.read.format("tidings").schema("namespace string, id long, data_view variant").load(str(d))
    text = "even == true & amount > 30"
    got = view.where(to_column(text, "data_view")).collect()
    passes = compile_predicate(text)
    assert sorted(row_key(r) for r in got) == sorted((e.namespace, e.id) for e in stored if passes(json.loads(e.data)))
    with pytest.raises(Exception, match="has no columns"):
        spark.read.format("tidings").schema("id string").load(str(d)).collect()


def test_pushdown_narrows_partitions_and_rows(spark: Any, events: tuple[Path, list[StoredEvent]]) -> None:
    prepare(spark)
    d, stored = events
    df = spark.read.format("tidings").option("partitionSize", "10").load(str(d))
    ts_lo = stored[100].timestamp
    q = df.where(
        (F.col("namespace") == "shop.orders") & (F.col("id") > 50) & (F.col("id") <= 120)
        & (F.col("timestamp") >= ts_lo) & (F.col("source") == "gen")
    )
    want = sorted(
        (e.namespace, e.id) for e in stored
        if e.namespace == "shop.orders" and 50 < e.id <= 120 and e.timestamp >= ts_lo
    )
    assert sorted(row_key(r) for r in q.collect()) == want
    # Only the id range 51..120 of one namespace was planned: 7 partitions of 10.
    assert q.rdd.getNumPartitions() == 7
    plan = q._jdf.queryExecution().executedPlan().toString()
    assert "source#" in plan.split("BatchScan")[0]  # the one filter the source left to Spark
    # IN over namespaces, a narrower schema, an empty range.
    two = spark.read.format("tidings").schema("namespace string, id long").load(str(d))
    got = two.where(F.col("namespace").isin("quiet", "a:b/c=d")).collect()
    assert sorted(row_key(r) for r in got) == sorted(
        (e.namespace, e.id) for e in stored if e.namespace in ("quiet", "a:b/c=d")
    )
    assert df.where("namespace = 'quiet' AND id > 3").count() == 0


def test_load_reads_a_single_partition_in_the_driver_and_the_same_rows(
    spark: Any, events: tuple[Path, list[StoredEvent]]
) -> None:
    """``load`` (what the stats job reads with) hands a one-partition read to Spark as Arrow,
    without Python workers, and a larger one to the source: the same rows either way."""
    from tidings.pipeline.source import load

    prepare(spark)
    d, _stored = events
    columns = "seq, namespace, id, prev_id, timestamp, time, source, headers, data, data_json"
    via_source = sorted(spark.read.format("tidings").load(str(d)).selectExpr(*columns.split(", ")).collect())
    small = load(spark, str(d))
    assert small.schema == EVENT_SCHEMA
    assert small._jdf.queryExecution().executedPlan().toString().startswith("LocalTableScan")
    assert sorted(small.selectExpr(*columns.split(", ")).collect()) == via_source
    split = load(spark, str(d), {"partitionSize": "64"})
    assert "BatchScan tidings" in split._jdf.queryExecution().executedPlan().toString()
    assert sorted(split.selectExpr(*columns.split(", ")).collect()) == via_source
    for table in ("deliveries", "pending"):  # the other tables read the same way
        assert load(spark, str(d), {"table": table}).collect() == spark.read.format("tidings").option(
            "table", table).load(str(d)).collect()
