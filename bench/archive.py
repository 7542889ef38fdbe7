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
            conn.executemany("INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, headers, data) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch)
            conn.execute("COMMIT")
            batch = []
    if batch:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, headers, data) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch)
        conn.execute("COMMIT")
    for k, ns in enumerate(names):
        conn.execute(
            "INSERT INTO publications(namespace, owner, config, last_event_id, created_at) "
            "VALUES (?, 'bench', '[]', ?, 0)",
            (ns, last[k]),
        )
    conn.close()
    return time.monotonic() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--namespaces", type=int, default=4)
    p.add_argument("--dir", type=Path, default=Path("/tmp/tidings-bench-archive"))
    p.add_argument("--workers", type=int, default=None, help="staging processes (default: one per core)")
    p.add_argument("--keep", action="store_true", help="keep the store and the archive afterwards")
    args = p.parse_args()

    from tidings.pipeline.archive import archive

    shutil.rmtree(args.dir, ignore_errors=True)
    data, root = args.dir / "var", args.dir / "archive"
    gen_s = generate(data, args.events, args.namespaces)
    db_mb = (data / "tidings.db").stat().st_size / 2**20
    print(f"generated {args.events:,} events ({db_mb:,.0f} MiB) in {gen_s:.1f} s", file=sys.stderr)

    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"  [{time.monotonic() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

    run = archive(data_dir=data, archive_dir=root, older_than_s=0, workers=args.workers, progress=progress)
    parquet_mb = sum(f.stat().st_size for f in root.rglob("*.parquet")) / 2**20
    result = {
        "events": run.events,
        "cores": os.cpu_count(),
        "archive_total_s": round(run.total_s, 2),
        "events_per_s": round(run.events / run.total_s),
        "stage_s": round(run.stage_s, 2),
        "stage_events_per_s": round(run.events / run.stage_s) if run.stage_s else None,
        "trim_s": round(run.trim_s, 2),
        "hot_log_mib": round(db_mb),
        "parquet_mib": round(parquet_mb),
        "files": sum(n.files for n in run.namespaces),
        "trimmed": sum(n.trimmed for n in run.namespaces),
    }
    print(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
