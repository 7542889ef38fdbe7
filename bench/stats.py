"""The statistics job: its cost on the hot path (delivery records) and its own run time.

    .venv/bin/python bench/stats.py [--events 1000000] [--subscribers 20] [--dir /tmp/tidings-bench-stats]
                                    [--master local[*]] [--bucket 1h] [--keep]

1. Hot path: settling notifications in batches of 100, each batch one committed
   transaction (``synchronous=FULL``, as the store's writer does), with and without the
   statement that copies them into ``deliveries``; the difference is what the record
   costs (best of 5 runs each).
2. The job: a store of ``--events`` events over 7 days, each delivered to two of
   ``--subscribers`` subscribers (so twice as many delivery records, some retried, some
   dead), written with bulk SQL; then ``stats()`` over all of it and the HTML report.

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sqlite3
import sys
import time
from pathlib import Path

DAY_NS = 86_400 * 10**9
T0 = 1_767_225_600 * 10**9


def _create(data: Path) -> Path:
    from tidings.store import SQLiteStore

    data.mkdir(parents=True, exist_ok=True)

    async def create() -> None:
        s = SQLiteStore(data / "tidings.db")
        await s.open()
        await s.close()

    asyncio.run(create())
    return data / "tidings.db"


def hot_path(root: Path, notes: int = 20_000, batch: int = 100, rounds: int = 5) -> None:
    """Best of ``rounds`` for each variant, alternating, so other load on the machine weighs less."""
    best = {False: float("inf"), True: float("inf")}
    for k in range(rounds):
        for with_record in (False, True):
            best[with_record] = min(best[with_record], _settle_all(root / f"hot-{k}-{with_record}", notes, batch,
                                                                  with_record))
    for with_record, took in best.items():
        label = "with the delivery record" if with_record else "without it             "
        print(f"settle {notes} notifications, batches of {batch}, {label}: best of {rounds} {took:6.2f} s, "
              f"{notes / took:9,.0f} notifications/s, {took / (notes / batch) * 1e3:6.2f} ms per batch")


def _settle_all(data: Path, notes: int, batch: int, with_record: bool) -> float:
    from tidings.store._sqlite_deliveries import record_settled

    db = _create(data)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("INSERT INTO subscriptions(id, subscriber, namespace, endpoint, mode, config, cursor, created_at)"
                 " VALUES (1, 'carol', 'bench.ns', NULL, 'trusted', X'5B5D', 0, 0)")
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, headers, data) "
        "VALUES (?, 'bench.ns', ?, NULL, ?, 'alice', X'5B5D', X'7B7D')",
        [(i, i, T0 + i) for i in range(1, notes + 1)],
    )
    conn.executemany(
        "INSERT INTO notifications(id, subscription_id, seq, namespace, attempts, created_at) "
        "VALUES (?, 1, ?, 'bench.ns', 0, ?)",
        [(i, i, T0 + i) for i in range(1, notes + 1)],
    )
    conn.execute("COMMIT")
    started = time.perf_counter()
    for lo in range(1, notes + 1, batch):
        ids = list(range(lo, min(lo + batch, notes + 1)))
        conn.execute("BEGIN IMMEDIATE")
        if with_record:
            record_settled(conn, ids, time.time_ns())
        for i in ids:  # as SQLiteStore.settle_notifications does
            conn.execute("DELETE FROM notifications WHERE id = ?", (i,))
        conn.execute("COMMIT")
    took = time.perf_counter() - started
    conn.close()
    return took


def generate(data: Path, events: int, subscribers: int) -> float:
    """Events over 7 days on 4 namespaces by 8 publishers; each delivered to 2 subscribers."""
    db = _create(data)
    started = time.monotonic()
    rng = random.Random(7)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    step = 7 * DAY_NS // max(events, 1)
    ev, dl = [], []
    last = [0] * 4
    serial = 0
    for seq in range(1, events + 1):
        k = seq % 4
        last[k] += 1
        ts = T0 + seq * step
        ns, source = f"bench.ns{k}", f"publisher-{seq % 8}"
        ev.append((seq, ns, last[k], last[k] - 1 or None, ts, source))
        for sub in (seq % subscribers, (seq + 1) % subscribers):
            serial += 1
            attempts = 1 if rng.random() < 0.97 else rng.randint(2, 3)
            dead = attempts == 3 and rng.random() < 0.3
            latency = int(rng.lognormvariate(2.5, 0.8) * 1e6) + (attempts - 1) * 200_000_000
            dl.append((serial, serial, sub + 1, f"subscriber-{sub}", ns, seq, last[k], source, ts,
                       ts + 1_000_000, ts + latency, attempts, "dead" if dead else "confirmed"))
        if len(ev) >= 50_000:
            _flush(conn, ev, dl)
    _flush(conn, ev, dl)
    conn.close()
    return time.monotonic() - started


def _flush(conn: sqlite3.Connection, ev: list[tuple[object, ...]], dl: list[tuple[object, ...]]) -> None:
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, headers, data) "
        "VALUES (?, ?, ?, ?, ?, ?, X'5B5D', X'7B224E6174223A317D')", ev)
    conn.executemany(f"INSERT INTO deliveries VALUES ({', '.join('?' * 13)}, 0)", dl)
    conn.execute("COMMIT")
    ev.clear()
    dl.clear()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--subscribers", type=int, default=20)
    p.add_argument("--dir", type=Path, default=Path("/tmp/tidings-bench-stats"))
    p.add_argument("--master")
    p.add_argument("--bucket", default="1h")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    try:
        hot_path(args.dir)
        took = generate(args.dir / "var", args.events, args.subscribers)
        print(f"generated {args.events:,} events and {2 * args.events:,} delivery records in {took:.1f} s")

        from tidings.pipeline.report import write_report
        from tidings.pipeline.session import build
        from tidings.pipeline.stats import stats

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        started = time.monotonic()
        spark = build(args.master, app_name="tidings-bench-stats", conf={"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        print(f"Spark session: {time.monotonic() - started:.1f} s")
        try:
            result = stats(spark, data_dir=args.dir / "var", bucket=args.bucket)
        finally:
            spark.stop()
        rows = args.events * 3
        print(f"stats job: {result.spark_s:.1f} s for {rows:,} rows read ({rows / result.spark_s:,.0f} rows/s); "
              f"{len(result.rows)} keys, {len(result.series)} series points")
        t = result.totals
        print(f"totals: events {t.events:,}, confirmations {t.confirmations:,}, dead {t.dead_letters:,}, "
              f"retries {t.retries:,}, latency p50/p90/p99 {t.p50_ms:.1f}/{t.p90_ms:.1f}/{t.p99_ms:.1f} ms")
        started = time.monotonic()
        out = write_report(result, args.dir / "report.html")
        print(f"report: {time.monotonic() - started:.2f} s, {out.stat().st_size / 1024:,.0f} KiB at {out}")
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
