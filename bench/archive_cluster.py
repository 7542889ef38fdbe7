"""The archive of a PostgreSQL store: worker processes beside Spark, local[1] and a standalone cluster.

    nice -n 19 .venv/bin/python -m bench.archive_cluster [--events 1000000] [--pg postgresql://postgres@127.0.0.1:5432]
                                                         [--runs arrow-1,arrow-2,local-1,cluster-2]

Fills a throwaway database with ``--events`` events (4 namespaces, about 200-byte ICRC-16
Maps, one SQL statement on the server), then archives all of it with ``tidings archive
--no-trim`` (so every run reads the same log) into a fresh archive folder per run:

* ``arrow-N``: the default path, ``--workers N`` processes on this machine;
* ``local-N``: ``--master local[N]``;
* ``cluster-N``: a standalone cluster started here from the installed PySpark's own
  classes (a master and N workers of one core each; nothing downloaded), ``--master spark://...``.

Prints, per run, the events, the seconds staging (what the executors do) and in all, and
events/s per executor core of the staging. Figures are printed, never asserted; the
database and the cluster are removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench._harness import free_port

T0 = 1_767_225_600 * 10**9
FILL = """
INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, headers, data)
SELECT s, 'bench.ns' || ((s - 1) % 4), (s - 1) / 4 + 1, NULLIF((s - 1) / 4, 0), {t0} + s * {step}, 'bench',
       convert_to('[]', 'UTF8'),
       convert_to(format('{{"Map":[["order",{{"Nat":%s}}],["customer",{{"Text":"customer-%s"}}],'
                         '["amount",{{"Nat":%s}}],["currency",{{"Text":"EUR"}}],["paid",{{"Bool":true}}],'
                         '["note",{{"Text":"benchmark event number %s"}}]]}}',
                         (s - 1) / 4 + 1, s % 9973, s * 7 % 100000, s), 'UTF8')
FROM generate_series(1::bigint, {events}) s
"""


def psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, capture_output=True)


def fill(url: str, events: int) -> float:
    import asyncio

    from tidings.store import PostgresStore

    async def migrate() -> None:
        s = PostgresStore(url)
        await s.open()
        await s.close()

    asyncio.run(migrate())
    started = time.monotonic()
    psql(url, FILL.format(t0=T0, step=30 * 86_400 * 10**9 // events, events=events))
    psql(url, "VACUUM ANALYZE events")
    return time.monotonic() - started


@contextlib.contextmanager
def cluster(workers: int, work: Path) -> Iterator[str]:
    """A standalone master and ``workers`` one-core workers from PySpark's jars; the master URL."""
    import pyspark

    work.mkdir(parents=True, exist_ok=True)
    home = os.path.dirname(pyspark.__file__)
    # SPARK_SCALA_VERSION: the launcher that builds the executors' command looks for a source
    # build's directories without it; a pip-installed PySpark has only jars/.
    env = {**os.environ, "SPARK_HOME": home, "SPARK_SCALA_VERSION": "2.13", "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_WORKER_DIR": str(work / "work")}
    java = [shutil.which("java") or "java", "-Xmx512m", "-cp", f"{home}/jars/*"]
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    procs = [subprocess.Popen(
        [*java, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(free_port())], env=env, stdout=subprocess.DEVNULL,
        stderr=open(work / "master.log", "w"), start_new_session=True)]
    try:
        for k in range(workers):
            procs.append(subprocess.Popen(
                [*java, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                 "--memory", "1g", "--webui-port", str(free_port()), master], env=env, stdout=subprocess.DEVNULL,
                stderr=open(work / f"worker{k}.log", "w"), start_new_session=True))
        deadline = time.monotonic() + 120
        while sum("Successfully registered with master" in (work / f"worker{k}.log").read_text()
                  for k in range(workers)) < workers:
            if time.monotonic() > deadline:
                raise SystemExit(f"the cluster did not start; see {work}")
            time.sleep(0.5)
        yield master
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 15)
            p.wait(30)


def archive(url: str, root: Path, extra: list[str]) -> dict[str, float]:
    cmd = [sys.executable, "-m", "tidings", "archive", "--data-dir", url, "--archive-dir", str(root),
           "--older-than", "0", "--no-trim", "--no-retention", *extra]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    out = json.loads(proc.stdout)
    return {"events": out["events"], "stage_s": out["stage_s"], "spark_s": out.get("spark_s", 0.0),
            "total_s": out["total_s"], "wall_s": round(wall, 2)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    ap.add_argument("--runs", default="arrow-1,arrow-2,local-1,cluster-2")
    ap.add_argument("--chunk-size", type=int, default=125_000)
    args = ap.parse_args()
    db = f"tidings_bench_archive_{os.getpid()}"
    psql(f"{args.pg}/postgres", f'CREATE DATABASE "{db}"')
    work = Path(tempfile.mkdtemp(prefix="tidings-bench-archive-"))
    url = f"{args.pg}/{db}"
    results = {}
    try:
        print(f"filled {args.events:,} events in {fill(url, args.events):.1f} s", file=sys.stderr)
        for run in args.runs.split(","):
            kind, _, n = run.partition("-")
            cores = int(n or 1)
            root = work / f"archive-{run}"
            chunk = ["--chunk-size", str(args.chunk_size)]
            if kind == "arrow":
                r = archive(url, root, ["--workers", str(cores), *chunk])
            elif kind == "local":
                r = archive(url, root, ["--master", f"local[{cores}]", *chunk])
            else:
                with cluster(cores, work / run) as master:
                    r = archive(url, root, ["--master", master, *chunk])
            r["cores"] = cores
            r["stage_events_per_s_per_core"] = round(r["events"] / r["stage_s"] / cores)
            results[run] = r
            print(run, json.dumps(r), file=sys.stderr, flush=True)
            shutil.rmtree(root, ignore_errors=True)
    finally:
        psql(f"{args.pg}/postgres", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
