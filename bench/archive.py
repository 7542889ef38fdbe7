"""Archive throughput: events/s moved from the hot log into Parquet, and where the time goes.

    .venv/bin/python bench/archive.py [--events 10000000] [--namespaces 4] [--dir /tmp/tidings-bench-archive]
                                      [--master local[*]] [--partition-size 1000000]

Writes a store of ``--events`` events (about 200-byte ICRC-16 Maps, spread over 30 days,
inserted with bulk SQL, not through the broker), then runs the archive job once over
all of it and reports:

* events/s end to end (planning, Spark, publishing the files, the manifest, trimming);
* the time in the Spark job (JVM plus the Python workers of the ``tidings`` source) and
  in the job's own Python on the driver (planning, renames, fsyncs, trimming SQLite);
* the Python cost of the source alone: the same rows read and turned into Arrow
  batches in this process, one core, no Spark, which bounds what the workers add.

Figures are printed, never asserted. The store is kept (``--keep``) or removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

DAY_NS = 86_400 * 10**9
T0 = 1_767_225_600 * 10**9


def generate(data: Path, events: int, namespaces: int) -> float:
    """A store with ``events`` events round-robin over ``namespaces``; seconds taken."""
    import asyncio

    from tidings.store import SQLiteStore

    data.mkdir(parents=True, exist_ok=True)

    async def create() -> None:
        s = SQLiteStore(data / "tidings.db")
        await s.open()
        await s.close()

    asyncio.run(create())
    started = time.monotonic()
    conn = sqlite3.connect(data / "tidings.db", isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    names = [f"bench.ns{k}" for k in range(namespaces)]
    step = 30 * DAY_NS // max(events, 1)
    last = [0] * namespaces
    batch = []
    for seq in range(1, events + 1):
        k = seq % namespaces
        last[k] += 1
        i = last[k]
        data_json = (
            f'{{"Map":[["order",{{"Nat":{i}}}],["customer",{{"Text":"customer-{i % 9973}"}}],'
            f'["amount",{{"Nat":{i * 7 % 100000}}}],["currency",{{"Text":"EUR"}}],["paid",{{"Bool":true}}],'
            f'["note",{{"Text":"benchmark event number {seq}"}}]]}}'
        )
        batch.append((seq, names[k], i, i - 1 or None, T0 + seq * step, "bench", b'[]', data_json.encode()))
        if len(batch) == 50_000:
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch)
            conn.execute("COMMIT")
            batch = []
    if batch:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch)
        conn.execute("COMMIT")
    for k, ns in enumerate(names):
        conn.execute(
            "INSERT INTO publications(namespace, owner, config, last_event_id, created_at) "
            "VALUES (?, 'bench', '[]', ?, 0)",
            (ns, last[k]),
        )
    conn.close()
    return time.monotonic() - started


def python_read_cost(data: Path, limit: int) -> tuple[int, float]:
    """Rows read from SQLite and made into Arrow batches in this process: (rows, seconds)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from tidings.pipeline import _sqlite
    from tidings.pipeline.archive import STAGING_COLUMNS
    from tidings.pipeline.source import to_batch

    fields = [f.strip().split(" ") for f in STAGING_COLUMNS.split(",")]

    schema = StructType([StructField(n, LongType() if t == "long" else StringType()) for n, t in fields])
    arrow = to_arrow_schema(schema, timezone="UTC")
    cols = schema.fieldNames()
    n = 0
    started = time.monotonic()
    with _sqlite.connect(data) as conn:
        for ns in _sqlite.namespaces(conn):
            bounds = _sqlite.id_bounds(conn, ns)
            if bounds is None:
                continue
            for rows in _sqlite.read_range(conn, _sqlite.IdRange(ns, bounds[0], bounds[1])):
                to_batch(rows, cols, arrow)
                n += len(rows)
                if n >= limit:
                    return n, time.monotonic() - started
    return n, time.monotonic() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--namespaces", type=int, default=4)
    p.add_argument("--dir", type=Path, default=Path("/tmp/tidings-bench-archive"))
    p.add_argument("--master", default=None)
    p.add_argument("--partition-size", type=int, default=1_000_000)
    p.add_argument("--keep", action="store_true", help="keep the store and the archive afterwards")
    args = p.parse_args()

    from tidings.pipeline.archive import archive
    from tidings.pipeline.session import build

    shutil.rmtree(args.dir, ignore_errors=True)
    data, root = args.dir / "var", args.dir / "archive"
    gen_s = generate(data, args.events, args.namespaces)
    db_mb = (data / "tidings.db").stat().st_size / 2**20
    print(f"generated {args.events:,} events ({db_mb:,.0f} MiB) in {gen_s:.1f} s", file=sys.stderr)

    py_rows, py_s = python_read_cost(data, min(args.events, 1_000_000))
    print(f"source in Python alone: {py_rows / py_s:,.0f} rows/s on one core", file=sys.stderr)

    t = time.monotonic()
    spark = build(args.master, app_name="tidings-bench-archive")
    spark.sparkContext.setLogLevel("WARN")
    start_s = time.monotonic() - t

    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"  [{time.monotonic() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

    try:
        run = archive(
            spark, data_dir=data, archive_dir=root, older_than_s=0, partition_size=args.partition_size,
            progress=progress,
        )
    finally:
        spark.stop()
    py_rate = py_rows / py_s
    cores = os.cpu_count() or 1
    parquet_mb = sum(f.stat().st_size for f in root.rglob("*.parquet")) / 2**20
    result = {
        "events": run.events,
        "cores": os.cpu_count(),
        "spark_start_s": round(start_s, 2),
        "archive_total_s": round(run.total_s, 2),
        "events_per_s": round(run.events / run.total_s),
        "spark_job_s": round(run.spark_s, 2),
        "driver_python_s": round(run.total_s - run.spark_s, 2),
        "source_python_rows_per_s_one_core": round(py_rate),
        # The part of the Spark job's wall time the source's Python accounts for, its
        # work spread over every core.
        "source_python_share_of_spark_job": (
            round(run.events / py_rate / cores / run.spark_s, 2) if run.spark_s else None
        ),
        "hot_log_mib": round(db_mb),
        "parquet_mib": round(parquet_mb),
        "trimmed": sum(n.trimmed for n in run.namespaces),
    }
    print(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
