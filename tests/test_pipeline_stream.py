"""``readStream.format("tidings")``: offsets by seq, rate limits, restart from the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_pipeline_source import T0, make_store

pytest.importorskip("pyspark")


def run_available_now(spark: Any, data: Path, out: Path, chk: Path) -> Any:
    q = (
        spark.readStream.format("tidings")
        .option("startingOffsets", "earliest")
        .option("namespace", "orders")
        .option("maxEventsPerTrigger", "25")
        .load(str(data))
        .select("seq", "namespace", "id", "data")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(240)
    return q


def test_stream_reads_new_events_once_across_restarts(spark: Any, tmp_path: Path) -> None:
    from tidings.pipeline.session import prepare

    prepare(spark)
    data, out, chk = tmp_path / "var", tmp_path / "out", tmp_path / "chk"
    stored = make_store(data, {"orders": 40, "other": 20})
    q = run_available_now(spark, data, out, chk)
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    assert len(batches) >= 3  # 60 events at most 25 a batch; only the 40 orders pass the namespace filter
    stored += make_store(data, {"orders": 10, "other": 5}, t0=T0 + 10**15)
    q2 = run_available_now(spark, data, out, chk)  # restarts from the checkpointed offset
    assert q2.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.namespace, r.id, r.seq) for r in rows) == sorted(
        (e.namespace, e.id, e.seq) for e in stored if e.namespace == "orders"
    )
