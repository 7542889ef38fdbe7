"""``df.write.format("tidings")`` and ``writeStream``: rows published through the real broker.

The executor side (:class:`BrokerPublisher`) is tested on its own first, against the
real server, for what Spark cannot easily provoke: a broker that is down, a batch the
broker refuses as a whole. Then a few Spark jobs, end to end.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tidings.core.wire import Event
from tidings.pipeline._publish import Backoff, BrokerPublisher, Tally
from tidings.pipeline.errors import PipelineError

from .conftest import ServerProcess

pytest.importorskip("pyspark")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers must import tidings

pytestmark = pytest.mark.e2e

ORDER = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 0}, "sku": {"type": "string"}},
    "required": ["amount", "sku"],
}


def api(server: ServerProcess, method: str, arg: Any, token: str | None = None) -> Any:
    req = urllib.request.Request(
        f"{server.url}/v1/{method}", data=json.dumps(arg).encode(),
        headers={"authorization": f"Bearer {token or server.admin_token}"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def register(server: ServerProcess, namespace: str, config: list[Any] | None = None, token: str | None = None) -> None:
    assert api(server, "icrc72_register_publication", [{"namespace": namespace, "config": config or []}], token) == [
        {"Ok": namespace}
    ]


def logged(spark: Any, server: ServerProcess, namespace: str) -> list[Any]:
    """The events of ``namespace`` in the server's log, by id, read through the tidings source."""
    df = spark.read.format("tidings").load(str(server.data_dir)).where(f"namespace = '{namespace}'")
    return sorted(df.select("id", "data", "headers", "source").collect(), key=lambda r: r.id)


def event(ns: str, n: int, size: int = 0) -> Event:
    return Event(namespace=ns, data={"Map": [["n", {"Nat": n}], ["pad", {"Text": "x" * size}]]})


# -- the executor side ------------------------------------------------------------------


def test_publisher_retries_a_broker_that_is_down_and_isolates_what_it_refuses(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory(max_body_bytes="4000")
    register(server, "known")
    server.stop()
    waited: list[float] = []

    def sleep(delay: float) -> None:  # the broker comes back during the first back-off
        waited.append(delay)
        if server.proc is None:
            server.start()

    pub = BrokerPublisher(server.url, server.admin_token, backoff=Backoff(retries=3, initial_s=0.25), sleep=sleep)
    tally = Tally(partition=0)
    # One unknown namespace and one event over the body limit: the broker refuses each
    # batch holding them as a whole (404, 413); only those rows may be refused.
    batch = [(i, event("known", i)) for i in range(6)]
    batch.insert(2, (100, event("unknown", 100)))
    batch.insert(5, (101, event("known", 101, size=5000)))
    pub.publish(batch, tally)
    pub.close()
    assert waited == [0.25]
    assert (tally.published, tally.refused) == (6, 2)
    assert {(r.row, r.code) for r in tally.refusals} == {(100, "namespace_not_found"), (101, "payload_too_large")}
    published = api(server, "icrc72_get_publications", {})
    (known,) = [p for p in published if p["namespace"] == "known"]
    assert ["icrc72:publication:stats:events", {"Nat": 6}] in known["stats"]

    server.stop()
    waited.clear()
    down = BrokerPublisher(server.url, server.admin_token, backoff=Backoff(retries=2), sleep=waited.append)
    with pytest.raises(PipelineError) as e:
        down.publish([(0, event("known", 0))], Tally(partition=0))
    assert e.value.code == "broker_unavailable"
    assert waited == [0.5, 1.0]


# -- Spark jobs ---------------------------------------------------------------------------


def test_batch_write_publishes_each_partition_in_order_and_round_trips(spark: Any, server: ServerProcess) -> None:
    from pyspark.sql import functions as F

    from tidings.pipeline.session import prepare

    prepare(spark)
    register(server, "shop.orders")
    register(server, "shop.copy")
    n = 300
    rows = spark.range(0, n, 1, numPartitions=3).select(
        F.col("id").alias("n"),
        F.concat(F.lit("sku-"), F.col("id").cast("string")).alias("sku"),
        F.array(F.lit(1.5), (F.col("id") / 2).cast("double")).alias("sizes"),
        F.when(F.col("id") % 2 == 0, F.lit('[["trace", {"Text": "even"}]]')).alias("headers"),
    )
    (rows.write.format("tidings").option("url", server.url).option("token", server.admin_token)
     .option("namespace", "shop.orders").option("batchSize", "16").mode("append").save())

    events = logged(spark, server, "shop.orders")
    assert len(events) == n
    data = [json.loads(e.data) for e in events]
    numbers = [d["Map"][0][1]["Nat"] for d in data]
    assert sorted(numbers) == list(range(n))
    # Partitions publish concurrently; each one's rows are events in row order.
    for lo in range(0, n, 100):
        mine = [x for x in numbers if lo <= x < lo + 100]
        assert mine == list(range(lo, lo + 100))
    by_n = dict(zip(numbers, events, strict=True))
    assert json.loads(by_n[7].data) == {"Map": [
        ["n", {"Nat": 7}], ["sku", {"Text": "sku-7"}], ["sizes", {"Array": [{"Float": 1.5}, {"Float": 3.5}]}],
    ]}
    assert json.loads(by_n[8].headers)[0] == ["trace", {"Text": "even"}]
    assert all(e.source == "admin" for e in events)

    # What the reader gives writes back as is: data and the publisher's headers, not the
    # broker's (the new events get their own).
    (spark.read.format("tidings").load(str(server.data_dir)).where("namespace = 'shop.orders'").drop("namespace")
     .write.format("tidings").option("url", server.url).option("token", server.admin_token)
     .option("namespace", "shop.copy").mode("append").save())
    copies = logged(spark, server, "shop.copy")
    assert sorted(c.data for c in copies) == sorted(e.data for e in events)
    copied_headers = {c.data: [h for h in json.loads(c.headers) if h[0] == "trace"] for c in copies}
    assert copied_headers[by_n[8].data] == [["trace", {"Text": "even"}]]
    assert copied_headers[by_n[7].data] == []


def test_rows_the_schema_refuses_fail_the_job_after_the_valid_ones_are_published(
    spark: Any, server: ServerProcess,
) -> None:
    from pyspark.errors.exceptions.captured import CapturedException

    from tidings.pipeline.session import prepare

    prepare(spark)
    (schema,) = api(server, "register_schema", [{"model": json.dumps(ORDER), "name": "shop.order"}])
    register(server, "shop.orders", [["tidings:publication:schema", {"Nat": schema["Ok"]["id"]}]])
    # Every tenth order has a negative amount.
    rows = spark.range(0, 50, 1, numPartitions=2).selectExpr(
        "IF(id % 10 = 3, -id, id) AS amount", "concat('sku-', id) AS sku"
    )

    def write(on_error: str) -> None:
        (rows.write.format("tidings").option("url", server.url).option("token", server.admin_token)
         .option("namespace", "shop.orders").option("onError", on_error).mode("append").save())

    with pytest.raises(CapturedException) as e:
        write("fail")
    text = str(e.value)
    assert "write_refused" in text
    assert "5 of 50 rows were refused (45 published; GenericError 5)" in text
    assert "$.amount: -3 is less than the minimum of 0" in text
    assert len(logged(spark, server, "shop.orders")) == 45
    write("skip")  # the same refusals, logged instead of failing the job
    assert len(logged(spark, server, "shop.orders")) == 90


def test_a_caller_without_publish_rights_gets_a_clear_error(spark: Any, server: ServerProcess) -> None:
    from pyspark.errors.exceptions.captured import CapturedException

    from tidings.pipeline.session import prepare

    prepare(spark)
    register(server, "shop.orders")
    bob = api(server, "tidings_create_principal", {"name": "bob"})["token"]
    rows = spark.range(4).selectExpr("id AS n")

    def write(token: str) -> str:
        with pytest.raises(CapturedException) as e:
            (rows.write.format("tidings").option("url", server.url).option("token", token)
             .option("namespace", "shop.orders").mode("append").save())
        return str(e.value)

    # A known principal that is not a publisher of the namespace: every row is refused.
    text = write(bob)
    assert "write_refused" in text and "4 of 4 rows were refused" in text
    assert "Unauthorized: bob is not a registered publisher of 'shop.orders'" in text
    # A token the broker does not know: the tasks fail at the first call.
    text = write("not-a-token")
    assert "write_unauthorized" in text and "401 unauthenticated" in text
    assert logged(spark, server, "shop.orders") == []


def test_stream_publishes_each_micro_batch(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    from tidings.pipeline.session import prepare

    prepare(spark)
    register(server, "sensor.readings")
    inbox, chk = tmp_path / "inbox", tmp_path / "chk"
    inbox.mkdir()

    def drop(name: str, readings: list[dict[str, Any]]) -> None:
        (inbox / name).write_text("".join(json.dumps(r) + "\n" for r in readings))

    def run() -> None:
        q = (spark.readStream.schema("namespace string, sensor string, value double").json(str(inbox))
             .writeStream.format("tidings").option("url", server.url).option("token", server.admin_token)
             .option("checkpointLocation", str(chk)).trigger(availableNow=True).start())
        q.awaitTermination(240)
        assert q.exception() is None

    drop("a.json", [{"namespace": "sensor.readings", "sensor": "s1", "value": v / 4} for v in range(5)])
    drop("b.json", [{"namespace": "sensor.readings", "sensor": "s2", "value": 9.0}])
    run()
    assert len(logged(spark, server, "sensor.readings")) == 6
    drop("c.json", [{"namespace": "sensor.readings", "sensor": "s3", "value": -1.0}])
    run()  # from the checkpoint: only the new file's row
    events = logged(spark, server, "sensor.readings")
    assert len(events) == 7
    assert json.loads(events[-1].data) == {"Map": [["sensor", {"Text": "s3"}], ["value", {"Float": -1.0}]]}
