"""Read the event log with Spark (``pip install -e '.[spark]'``, Java 17): the
``tidings`` data source reads the archive and the hot log as one (docs/pipeline.md).

    python examples/spark_read.py var
"""

from __future__ import annotations

import sys
from typing import Any

NAMESPACE = "com.example.orders"


def main(spark: Any, data_dir: str) -> list[Any]:
    from pyspark.sql import functions as F

    from tidings.pipeline.session import prepare

    prepare(spark)  # registers the data source on a session of one's own
    df = spark.read.format("tidings").load(data_dir)
    totals = (df.where(F.col("namespace") == NAMESPACE)
                .select("id", "source", F.get_json_object("data_json", "$.total").cast("double").alias("total"))
                .orderBy("id"))
    rows: list[Any] = totals.collect()
    for r in rows:
        print(f"#{r.id} from {r.source}: total {r.total}")
    return rows


if __name__ == "__main__":
    from tidings.pipeline.session import build

    session = build()
    try:
        main(session, sys.argv[1] if len(sys.argv) > 1 else "var")
    finally:
        session.stop()
