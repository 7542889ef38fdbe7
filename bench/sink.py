"""Sink throughput: rows/s a Spark job publishes through the broker with ``format("tidings")``.

    .venv/bin/python -m bench.sink [--rows 200000] [--partitions 2] [--batch-size 500] [--master local[2]]

Starts a real ``tidings serve``, registers a namespace, and writes ``--rows`` rows of
plain columns (three fields, a ~100-byte Map each) once untimed (the Python workers
start), then timed, and once more as the wire JSON the reader gives (a round trip of
the log). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench._harness import Server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from tidings.pipeline.session import build

    spark = build(args.master, conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp, Server(Path(tmp)) as server:
        for ns in ("bench.warmup", "bench.plain", "bench.wire"):
            req = urllib.request.Request(
                f"{server.url}/v1/icrc72_register_publication",
                data=json.dumps([{"namespace": ns, "config": []}]).encode(),
                headers={"authorization": f"Bearer {server.token}"},
            )
            urllib.request.urlopen(req, timeout=30).read()

        def write(df: Any, ns: str) -> float:
            started = time.monotonic()
            (df.write.format("tidings").option("url", server.url).option("token", server.token)
             .option("namespace", ns).option("batchSize", str(args.batch_size)).mode("append").save())
            return time.monotonic() - started

        rows = spark.range(0, args.rows, 1, numPartitions=args.partitions).select(
            F.col("id").alias("order"),
            F.concat(F.lit("customer-"), (F.col("id") % 9973).cast("string")).alias("customer"),
            (F.col("id") * 0.25).alias("amount"),
        )
        write(rows.limit(1000), "bench.warmup")
        plain = write(rows, "bench.plain")
        log = (spark.read.format("tidings").schema("namespace string, data string, headers string")
               .load(tmp).where("namespace = 'bench.plain'").drop("namespace")
               .repartition(args.partitions))
        wire = write(log, "bench.wire")
    print(f"rows {args.rows:,}, {args.partitions} partitions, batchSize {args.batch_size}, {args.master}")
    print(f"{'plain columns':<28} {plain:>7.1f} s  {args.rows / plain:>10,.0f} rows/s")
    print(f"{'wire JSON (read the log back)':<28} {wire:>7.1f} s  {args.rows / wire:>10,.0f} rows/s")
    spark.stop()


if __name__ == "__main__":
    main()
