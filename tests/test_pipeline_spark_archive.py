"""``tidings archive --master``: the archive of a PostgreSQL store as a Spark job.

Both writers (worker processes, and Spark tasks) must leave archives no reader can tell
apart, through the same exactly-once seam: a killed executor or driver, run again,
leaves no gap, no duplicate and no process behind; failures end in one line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tidings.pipeline import layout
from tidings.pipeline.archive import archive
from tidings.pipeline.errors import PipelineError
from tidings.pipeline.layout import Manifest
from tidings.store import PostgresStore, StoredEvent

from .pg_support import schema_address
from .test_pipeline_postgresql import COUNTS, HOUR_NS, fill, owe, pg_rows

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
NOW = 1_767_225_600 * 10**9 + 200 * HOUR_NS


def make_store(url: str, counts: dict[str, int] = COUNTS, t0: int = NOW - 160 * HOUR_NS) -> list[StoredEvent]:
    """``counts`` events per namespace, an hour apart; a subscriber still owes ids 5 and 6 of shop.orders."""

    async def go() -> list[StoredEvent]:
        store = PostgresStore(url)
        await store.open()
        try:
            stored = await fill(store, counts, t0)
            orders = [e for e in stored if e.namespace == "shop.orders"]
            if orders:
                await owe(store, orders[2:6], settle=2)
            return stored
        finally:
            await store.close()

    return asyncio.run(go())


def files(root: Path) -> dict[str, Any]:
    """Every archive file by its path under ``root``: its rows and its schema (footer metadata included)."""
    out = {}
    for _, d in layout.namespace_dirs(root):
        for _, dd in layout.date_dirs(d):
            for f in sorted(dd.iterdir()):
                t = pq.read_table(f)
                out[str(f.relative_to(root))] = (t.to_pylist(), t.schema.metadata, pq.ParquetFile(f).metadata.num_rows)
    return out


def hot_rows(url: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in pg_rows(url, "SELECT seq, namespace, id FROM events"))


def test_both_writers_read_alike_through_every_reader(spark: Any, pg_database: str, tmp_path: Path) -> None:
    from tidings.pipeline.archive_read import read_archived
    from tidings.pipeline.history import events
    from tidings.pipeline.session import prepare
    from tidings.pipeline.stats import stats

    prepare(spark)
    arrow_url, spark_url = schema_address(pg_database), schema_address(pg_database)
    stored = make_store(arrow_url)
    assert [(e.seq, e.id) for e in make_store(spark_url)] == [(e.seq, e.id) for e in stored]
    arrow_root, spark_root = tmp_path / "by-arrow", tmp_path / "by-spark"
    kw: dict[str, Any] = {"older_than_s": 50 * 3600, "now_ns": NOW, "chunk_size": 25}

    # An executor killed mid-job (local mode: the job fails at once): one line, and
    # the archive and the hot log as they were.
    before = hot_rows(spark_url)
    os.environ["TIDINGS_PIPELINE_CRASH_AT"] = "executor"
    try:
        with pytest.raises(PipelineError) as err:
            archive(data_dir=spark_url, archive_dir=spark_root, spark=lambda: spark, **kw)
    finally:
        del os.environ["TIDINGS_PIPELINE_CRASH_AT"]
    assert err.value.code == "archive_task_failed" and "\n" not in err.value.line()
    assert Manifest.load(spark_root).namespaces == {} and files(spark_root) == {}
    assert not (spark_root / layout.META / "staging").exists()
    assert hot_rows(spark_url) == before

    by_arrow = archive(data_dir=arrow_url, archive_dir=arrow_root, workers=2, **kw)
    by_spark = archive(data_dir=spark_url, archive_dir=spark_root, spark=lambda: spark, **kw)
    assert by_spark.namespaces == by_arrow.namespaces and by_arrow.events > 100
    assert sum(n.trimmed for n in by_arrow.namespaces) > 0

    # The same files, rows, footers and statistics; the same manifest and the same hot log left.
    got, want = files(spark_root), files(arrow_root)
    assert got == want and len(want) > 3
    for name in want:
        a, b = pq.ParquetFile(arrow_root / name).metadata, pq.ParquetFile(spark_root / name).metadata
        assert [a.row_group(i).column(j).statistics == b.row_group(i).column(j).statistics
                for i in range(a.num_row_groups) for j in range(a.num_columns)] == [True] * (
            a.num_row_groups * a.num_columns)
    assert Manifest.load(spark_root).namespaces.keys() == Manifest.load(arrow_root).namespaces.keys()
    assert {k: v.hwm for k, v in Manifest.load(spark_root).namespaces.items()} == {
        k: v.hwm for k, v in Manifest.load(arrow_root).namespaces.items()}
    assert hot_rows(spark_url) == hot_rows(arrow_url)
    assert ("shop.orders", 5) in {(r[1], r[2]) for r in hot_rows(spark_url)}  # still owed: kept

    # Every reader: replay's (pyarrow), history, the data source (with the VARIANT view), stats.
    for ns in COUNTS:
        assert read_archived(spark_root, ns, 1, 10**9) == read_archived(arrow_root, ns, 1, 10**9)

    def everything(url: str, root: Path) -> tuple[Any, ...]:
        hist = sorted(tuple(map(str, r)) for r in events(spark, "shop.orders", data_dir=url, archive_dir=root,
                                               filter="amount > 3").collect())
        src = spark.read.format("tidings").schema(
            "seq long, namespace string, id long, timestamp long, source string, headers string, data string, "
            "data_json string, data_view variant").option("archive", str(root)).load(url)
        rows = sorted((r.seq, r.namespace, r.id, r.data, r.data_json, str(r.data_view)) for r in src.collect())
        st = stats(spark, data_dir=url, archive_dir=root)  # latencies differ: the stores were settled apart
        return hist, rows, st.totals.events, {k: r.events for k, r in st.of("publication").items()}

    a, b = everything(arrow_url, arrow_root), everything(spark_url, spark_root)
    assert a == b and len(a[1]) == len(stored)


def cli(*args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidings", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, **kw)


def session_processes(sid: int) -> list[str]:
    """The processes of session ``sid`` still alive (zombies aside): what a killed job left."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rpartition(")")[2].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(text[:80])
    return out


def wait_gone(sid: int) -> None:
    deadline = time.monotonic() + 60
    while session_processes(sid):
        assert time.monotonic() < deadline, f"left behind: {session_processes(sid)}"
        time.sleep(0.2)


def one_line(stderr: str, code: str) -> None:
    """The job's last word is one line that starts with ``code``; no stack trace before it
    (what the JVM prints as it starts may be)."""
    lines = _without_daemon_noise(stderr.strip().splitlines())
    assert lines[-1].startswith(f"{code}: "), stderr[-3000:]
    assert not [ln for ln in lines if "Traceback" in ln or ln.lstrip().startswith("at ")], stderr[-3000:]


def _without_daemon_noise(lines: list[str]) -> list[str]:
    """Leave out a ``BrokenPipeError`` or ``ConnectionResetError`` that PySpark's worker
    daemon (an executor's process, like the JVM that prints as it starts) writes when the
    job it served is aborted mid-handshake: it is not the job's word, and the job cannot
    silence a process of Spark's (seen in CI: both, by when the abort comes)."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("Traceback"):
            j = i + 1
            while j < len(lines) and lines[j].startswith(" "):
                j += 1
            block = lines[i:j + 1]
            daemon = any("pyspark/daemon.py" in x for x in block)
            if j < len(lines) and lines[j].startswith(("BrokenPipeError", "ConnectionResetError")) and daemon:
                i = j + 1
                continue
        out.append(lines[i])
        i += 1
    return out


def exactly_once(url: str, root: Path, stored: list[StoredEvent]) -> None:
    """Archive (ids up to each mark) plus hot log (ids above it) hold every event once."""
    m = Manifest.load(root)
    got = [(ns, r["id"], r["data"]) for ns, d in layout.namespace_dirs(root) for _, dd in layout.date_dirs(d)
           for f in dd.glob("*.parquet") for r in pq.read_table(f).to_pylist() if r["id"] <= m.hwm(ns)]
    got += [(r[0], r[1], bytes(r[2]).decode()) for r in pg_rows(url, "SELECT namespace, id, data FROM events")
            if r[1] > m.hwm(r[0])]
    assert sorted(got) == sorted((e.namespace, e.id, e.data.decode()) for e in stored)


def test_a_killed_executor_or_driver_leaves_no_gap_no_duplicate_no_process(pg_database: str, tmp_path: Path) -> None:
    url, root = schema_address(pg_database), tmp_path / "archive"
    stored = make_store(url)
    cmd = ["archive", "--data-dir", url, "--archive-dir", str(root), "--older-than", "0", "--chunk-size", "20",
           "--master", "local[2,3]", "--quiet"]
    # An executor's Python worker killed in its first attempt: Spark runs the task again.
    done = cli(*cmd, env={"TIDINGS_PIPELINE_CRASH_AT": "executor"})
    assert done.returncode == 0, done.stderr[-3000:]
    exactly_once(url, root, stored)
    marks = {k: v.hwm for k, v in Manifest.load(root).namespaces.items()}
    assert json.loads(done.stdout)["events"] == sum(marks.values()) > 100

    # The driver killed while its tasks stage: nothing moved, no process left; run again.
    async def more() -> list[StoredEvent]:
        store = PostgresStore(url)
        await store.open()
        try:
            return await fill(store, {"shop.orders": 40, "new.one": 10}, NOW - 10 * HOUR_NS, step_ns=10**9)
        finally:
            await store.close()

    stored += asyncio.run(more())
    proc = subprocess.Popen([sys.executable, "-m", "tidings", *cmd], env={**os.environ,
                            "TIDINGS_PIPELINE_CRASH_AT": "driver"}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert proc.wait(600) == -signal.SIGKILL
    wait_gone(proc.pid)
    assert {k: v.hwm for k, v in Manifest.load(root).namespaces.items()} == marks
    exactly_once(url, root, stored)
    done = cli(*cmd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["events"] == 50
    exactly_once(url, root, stored)
    assert not (root / layout.META / "staging").exists()


def test_a_killed_arrow_archive_leaves_no_process(tmp_path: Path) -> None:
    """SIGKILL while worker processes stage: they and multiprocessing's resource tracker go too."""
    from .test_pipeline_source import make_store as sqlite_store

    data = tmp_path / "var"
    sqlite_store(data, {"a": 300, "b": 300})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidings", "archive", "--data-dir", str(data), "--older-than", "0",
         "--workers", "2", "--chunk-size", "10", "--quiet"],
        env={**os.environ, "TIDINGS_PIPELINE_CRASH_AT": "staging"}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert proc.wait(300) == -signal.SIGKILL
    wait_gone(proc.pid)


def test_unreachable_master_is_one_line_within_the_connect_timeout(pg_database: str, tmp_path: Path) -> None:
    url = schema_address(pg_database)
    make_store(url, {"a": 3})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for master, code in ((f"spark://127.0.0.1:{port}", "master_unreachable"),
                         (f"sc://127.0.0.1:{port}", "connect_unreachable")):
        started = time.monotonic()
        done = cli("archive", "--data-dir", url, "--archive-dir", str(tmp_path / "a"), "--older-than", "0",
                   "--master", master, "--quiet", env={"TIDINGS_CONNECT_TIMEOUT_S": "2"})
        assert done.returncode == 2
        assert done.stderr.startswith(f"{code}: ") and done.stderr.count("\n") == 1, done.stderr
        assert time.monotonic() - started < 60  # not the standalone client's minute of retries
    assert not (tmp_path / "a" / layout.META / "manifest.json").exists()
    assert len(pg_rows(url, "SELECT 1 FROM events")) == 3


def test_executors_without_tidings_or_the_database_end_in_one_line(pg_database: str, tmp_path: Path) -> None:
    """Executors that cannot import tidings; then a database that goes away once the job has planned."""
    url, root = schema_address(pg_database), tmp_path / "archive"
    make_store(url, {"a": 30, "b": 30})
    before = hot_rows(url)
    # The executors' Python, with tidings hidden from it (the driver's is whole).
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'tidings':\n"
        "            raise ModuleNotFoundError(f\"No module named {name!r}\", name=name)\n"
        "sys.meta_path.insert(0, Hide())\n")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={hide} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    cmd = ["archive", "--data-dir", url, "--archive-dir", str(root), "--older-than", "0", "--master", "local[1]"]
    done = cli(*cmd, "--quiet", env={"PYSPARK_PYTHON": str(python)})
    assert done.returncode == 2
    one_line(done.stderr, "executor_import")
    assert hot_rows(url) == before and Manifest.load(root).namespaces == {}
    assert not (root / layout.META / "staging").exists()


def test_a_database_that_goes_away_mid_job_ends_it_in_one_line(tmp_path: Path) -> None:
    """A throwaway PostgreSQL stopped once the job has planned: the executors cannot read; run again."""
    from bench.chaos._pg import PgNode, base_dir

    node = PgNode(base_dir("tidings-sparkarchive-") / "pg")
    try:
        node.init()
        node.start()
        url, root = node.dsn, tmp_path / "archive"
        stored = make_store(url, {"a": 30, "b": 30})
        before = hot_rows(url)
        cmd = [sys.executable, "-m", "tidings", "archive", "--data-dir", url, "--archive-dir", str(root),
               "--older-than", "0", "--master", "local[1]"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        seen = []
        for ln in proc.stderr:  # the plan is made; Spark starts next and its tasks read
            seen.append(ln)
            if "archiving 60 events" in ln:
                break
        node.stop("immediate")
        _, rest = proc.communicate(timeout=600)
        assert proc.returncode == 2, "".join(seen) + rest
        one_line(rest, "store_unreachable")
        node.start()
        assert hot_rows(url) == before and Manifest.load(root).namespaces == {}
        assert not (root / layout.META / "staging").exists()
        done = cli(*cmd[3:], "--quiet")
        assert done.returncode == 0, done.stderr[-3000:]
        exactly_once(url, root, stored)
    finally:
        node.destroy()
        node.root.parent.rmdir()
