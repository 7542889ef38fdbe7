"""The pipeline's figures side by side: archive, replay from the archive, statistics over it.

    .venv/bin/python -m bench.pipeline [--events 1000000] [--stats-events 10000000] [--dir /tmp/tidings-bench-pipeline]

1. **archive**: a store of ``--events`` events (``bench.archive.generate``: 4 namespaces,
   30 days, ~200-byte ICRC-16 Maps), then the real command ``tidings pipeline archive
   --older-than 0`` as a subprocess: its wall time (interpreter start included) and the
   job's own split (staging: SQLite to typed Parquet in worker processes; trimming).
2. **replay read side**: the archive just written, read back as a replay reads it
   (``tidings.broker.replay._source``: windows of 25 x 1,000 ids through
   ``read_archived``, each made into ``StoredEvent`` s), one namespace after another.
3. **stats**: an archive of ``--stats-events`` events written directly with pyarrow in the
   archive's layout (4 namespaces, 30 days; the payload is one repeated value, the job
   never reads it), an empty hot log, then ``stats()`` in a local Spark session; Spark's
   start is reported apart.

Figures are printed as JSON (``--json`` for the harness), never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DAY_NS = 86_400 * 10**9
T0 = 1_767_225_600 * 10**9


def archive_run(root: Path, events: int) -> dict[str, Any]:
    from bench.archive import generate

    data, arch = root / "var", root / "archive"
    gen_s = generate(data, events, 4)
    db_mib = (data / "tidings.db").stat().st_size / 2**20
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tidings", "pipeline", "archive", "--data-dir", str(data), "--archive-dir", str(arch),
         "--older-than", "0", "--quiet", "--no-retention"],
        capture_output=True, text=True, check=True,
    )
    wall = time.monotonic() - t
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)  # the command and its workers
    out = json.loads(proc.stdout)
    return {
        "events": out["events"], "generate_s": round(gen_s, 1), "hot_log_mib": round(db_mib),
        "command_s": round(wall, 2), "command_events_per_s": round(out["events"] / wall),
        "command_cpu_s": round(cpu, 2), "events_per_cpu_s": round(out["events"] / cpu),
        "job_s": out["total_s"], "job_events_per_s": round(out["events"] / out["total_s"]),
        "stage_s": out["stage_s"], "stage_events_per_s": round(out["events"] / out["stage_s"]),
        "trim_s": out["trim_s"],
        "parquet_mib": round(sum(f.stat().st_size for f in arch.rglob("*.parquet")) / 2**20),
        "files": sum(n["files"] for n in out["namespaces"]),
        "hot_log_mib_after": round(sum(f.stat().st_size for f in data.glob("tidings.db*")) / 2**20),
    }


def replay_read(root: Path, window: int = 25_000) -> dict[str, Any]:
    from tidings.broker.replay import ReplaySource
    from tidings.pipeline.layout import Manifest
    from tidings.settings import Settings

    arch = root / "archive"
    src = ReplaySource(None, Settings.from_env(data_dir=root / "var", archive_dir=arch))  # type: ignore[arg-type]
    n = 0
    t = time.monotonic()
    cpu = time.process_time()
    for ns, state in Manifest.load(arch).namespaces.items():
        lo = 1
        while lo <= state.hwm:
            n += len(src._read_archive(ns, lo, lo + window, None))
            lo += window
    took, cpu = time.monotonic() - t, time.process_time() - cpu
    return {"events": n, "seconds": round(took, 2), "events_per_s": round(n / took), "cpu_s": round(cpu, 2),
            "events_per_cpu_s": round(n / cpu), "window_ids": window}


def synthetic_archive(root: Path, events: int, namespaces: int = 4, days: int = 30) -> float:
    """An archive of ``events`` rows in the real layout, written with pyarrow; seconds taken."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tidings.pipeline import _arrow, layout
    from tidings.pipeline._variant import encode
    from tidings.pipeline.layout import Manifest, NamespaceState

    t = time.monotonic()
    per_part = events // (namespaces * days)
    meta, value = encode({"Map": [["amount", {"Nat": 12}], ["currency", {"Text": "EUR"}]]})
    data = '{"Map":[["amount",{"Nat":12}],["currency",{"Text":"EUR"}]]}'
    manifest = Manifest()
    payload_type = _arrow.FILE_SCHEMA.field("payload").type
    for k in range(namespaces):
        ns = f"bench.ns{k}"
        for d in range(days):
            ids = pa.array(range(d * per_part + 1, (d + 1) * per_part + 1), pa.int64())
            n = len(ids)
            ts = pc.add(pc.multiply(pa.array(range(n), pa.int64()), DAY_NS // per_part), T0 + d * DAY_NS)
            table = pa.Table.from_arrays(
                [
                    pc.add(pc.multiply(ids, namespaces), k), ids, pc.subtract(ids, 1), ts,
                    pc.divide(ts, 1000).cast(pa.timestamp("us", tz="UTC")),
                    pa.array([f"publisher-{k}", f"publisher-{k + 1}"] * (n // 2) + [f"publisher-{k}"] * (n % 2)),
                    pa.repeat(pa.scalar("[]"), n), pa.repeat(pa.scalar(data), n),
                    pa.repeat(pa.scalar({"metadata": meta, "value": value}, payload_type), n),
                ],
                schema=_arrow.FILE_SCHEMA,
            )
            day = time.strftime("%Y-%m-%d", time.gmtime((T0 + d * DAY_NS) // 10**9))
            path = layout.namespace_dir(root, ns) / f"date={day}" / layout.file_name(1, days * per_part, d)
            _arrow.write_file(table, path)
        manifest.namespaces[ns] = NamespaceState(hwm=days * per_part, archived_at=T0)
    manifest.save(root)
    return time.monotonic() - t


def stats_run(root: Path, events: int) -> dict[str, Any]:
    from bench.stats import _create
    from tidings.pipeline.session import build
    from tidings.pipeline.stats import stats

    data, arch = root / "var-stats", root / "archive-stats"
    _create(data)
    gen_s = synthetic_archive(arch, events)
    t = time.monotonic()
    spark = build(app_name="tidings-bench-stats")
    spark.sparkContext.setLogLevel("ERROR")
    start_s = time.monotonic() - t
    try:
        t = time.monotonic()
        result = stats(spark, data_dir=data, archive_dir=arch, bucket="1h")
        took = time.monotonic() - t
    finally:
        spark.stop()
    return {
        "archived_events": result.totals.events, "generate_s": round(gen_s, 1), "spark_start_s": round(start_s, 1),
        "job_s": round(took, 2), "events_per_s": round(result.totals.events / took),
        "parquet_mib": round(sum(f.stat().st_size for f in arch.rglob("*.parquet")) / 2**20),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--stats-events", type=int, default=10_000_000)
    p.add_argument("--dir", type=Path, default=Path("/tmp/tidings-bench-pipeline"))
    p.add_argument("--only", default="archive,replay,stats")
    args = p.parse_args(argv)
    only = set(args.only.split(","))
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    out: dict[str, Any] = {"cores": os.cpu_count(), "load_average": os.getloadavg()[0]}
    try:
        if only & {"archive", "replay"}:
            out["archive"] = archive_run(args.dir, args.events)
            print(json.dumps(out["archive"]), file=sys.stderr)
        if "replay" in only:
            out["replay"] = replay_read(args.dir)
            print(json.dumps(out["replay"]), file=sys.stderr)
        if "stats" in only:
            out["stats"] = stats_run(args.dir, args.stats_events)
        out["load_average_end"] = os.getloadavg()[0]
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
