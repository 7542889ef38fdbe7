"""``readStream.format("tidings")``: offsets by seq, rate limits, restart from the checkpoint."""

from __future__ import annotations

import json
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


def test_one_logical_log_and_data_loss(spark: Any, tmp_path: Path) -> None:
    """Batch and stream reads serve archived and hot events as one log; a stream whose
    position was trimmed away (not archived) fails with data_loss, or counts the gap."""
    import sqlite3

    from pyspark.errors import StreamingQueryException

    from tidings.pipeline.archive import archive
    from tidings.pipeline.session import prepare

    prepare(spark)
    data = tmp_path / "var"
    stored = make_store(data, {"orders": 30, "other": 10})
    hour = 3_600 * 10**9
    run = archive(data_dir=data, archive_dir=data / "archive", older_than_s=0, now_ns=T0 + 20 * hour)
    hwm = {n.namespace: n.to_id for n in run.namespaces}
    assert run.events == 20 and sum(n.trimmed for n in run.namespaces) == 20

    # Batch: every event once, the same columns either side of the seam, filters across it.
    df = (spark.read.format("tidings")
          .schema("seq long, namespace string, id long, time timestamp, data string, data_json string, "
                  "data_view variant").load(str(data)))
    rows = df.select("namespace", "id", "seq", "data", "time", "data_view").collect()
    assert sorted((r.namespace, r.id, r.seq, r.data) for r in rows) == sorted(
        (e.namespace, e.id, e.seq, e.data.decode()) for e in stored
    )
    seam = df.where(f"namespace = 'orders' AND id BETWEEN {hwm['orders'] - 2} AND {hwm['orders'] + 2}")
    got = seam.selectExpr("id", "data_view:amount::long AS amount", "data_json").orderBy("id").collect()
    assert [(r.id, r.amount) for r in got] == [(i, i) for i in range(hwm["orders"] - 2, hwm["orders"] + 3)]
    assert all('"amount":' in r.data_json for r in got)

    # Stream from the earliest event: archived ones included, once.
    def stream(name: str, start: str, **options: str) -> Any:
        reader = spark.readStream.format("tidings").option("startingOffsets", start)
        for k, v in options.items():
            reader = reader.option(k, v)
        q = (reader.load(str(data)).select("namespace", "id").writeStream.format("memory").queryName(name)
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(240)
        except StreamingQueryException:
            pass
        return q

    q = stream("all_events", "earliest")
    assert q.exception() is None
    assert sorted(tuple(r) for r in spark.table("all_events").collect()) == sorted(
        (e.namespace, e.id) for e in stored
    )

    # Retention trims three hot orders (never archived); a query that had not read them yet.
    lost = [e for e in stored if e.namespace == "orders" and hwm["orders"] < e.id <= hwm["orders"] + 3]
    with sqlite3.connect(data / "tidings.db") as c:
        c.executemany("DELETE FROM events WHERE seq = ?", [(e.seq,) for e in lost])
    start = str(lost[0].seq - 1)
    q = stream("orders_fail", start, namespace="orders")
    assert q.exception() is not None and "data_loss: 3 events" in str(q.exception())
    q = stream("after_loss", start, failOnDataLoss="false")
    assert q.exception() is None
    assert json.loads(q.lastProgress["sources"][0]["endOffset"]) == {"seq": stored[-1].seq, "lost": 3}
    want = sorted((e.namespace, e.id) for e in stored if e.seq > lost[0].seq - 1 and e not in lost)
    assert sorted(tuple(r) for r in spark.table("after_loss").collect()) == want
