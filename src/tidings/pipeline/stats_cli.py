"""``tidings pipeline stats``: run the statistics job and write its HTML report.

Progress goes to stderr; stdout gets a JSON summary: the report's path, the window, the
totals and the figures per publication, publisher and subscriber (not the time series,
which is in the report).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import msgspec

__all__ = ["run_stats"]


def run_stats(args: argparse.Namespace, data_dir: Path | str, archive_dir: Path) -> int:
    """Run ``stats`` with the parsed ``args`` on the hot log at ``data_dir`` (a data dir or a
    PostgreSQL address); the exit status (errors are raised)."""
    from ._backend import hot_log
    from ._human import fmt_bytes, fmt_count, fmt_seconds
    from .report import write_report
    from .session import build, shown_master
    from .stats import parse_bucket, stats

    started = time.monotonic()

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:7.1f} s] {msg}", file=sys.stderr, flush=True)

    bucket_s = parse_bucket(args.bucket)
    hot_log(data_dir).check()  # no store: say so before Spark takes seconds to start
    since_ns = None if args.since is None else time.time_ns() - int(args.since * 1e9)
    progress("starting Spark" + (f" on {shown_master(args.master)}" if args.master else " (local[*])"))
    show_bars = "true" if (not args.quiet and sys.stderr.isatty()) else "false"
    spark = build(args.master, app_name="tidings-stats", conf={"spark.ui.showConsoleProgress": show_bars})
    try:
        spark.sparkContext.setLogLevel("WARN")
    except Exception:  # Spark Connect sessions have no SparkContext
        pass
    try:
        result = stats(
            spark, data_dir=data_dir, archive_dir=archive_dir if archive_dir.exists() else None,
            since_ns=since_ns, bucket=bucket_s, progress=progress,
        )
    finally:
        spark.stop()
    out = write_report(result, args.out).resolve()
    t = result.totals
    progress(f"wrote {out} ({fmt_count(t.events or 0)} events, {fmt_count(t.notifications or 0)} notifications, "
             f"{fmt_bytes(out.stat().st_size)}) in {fmt_seconds(time.monotonic() - started)}")
    summary = msgspec.to_builtins(result)
    del summary["series"]
    print(json.dumps({"report": str(out), **summary}, indent=2))
    return 0
