"""The archive job and the history read path: every event once, across the seam, after kills.

The invariant everything here checks: the archive's rows up to the manifest's mark plus
the hot log's rows above it are exactly the events ever appended, each once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_pipeline_source import T0, make_store
from tidings.pipeline import layout
from tidings.pipeline._backend import hot_log
from tidings.pipeline.archive import CRASH_ENV, DAY_NS, archive, expire
from tidings.pipeline.errors import PipelineError
from tidings.pipeline.layout import Manifest
from tidings.store import SQLiteStore
from tidings.store._base import StoredEvent

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

HOUR_NS = 3_600 * 10**9
Key = tuple[str, int, str, int]  # namespace, id, data, timestamp


def key(e: StoredEvent) -> Key:
    return (e.namespace, e.id, e.data.decode(), e.timestamp)


def archived(root: Path) -> list[Key]:
    """The archive's rows up to each namespace's mark, read with pyarrow alone."""
    m = Manifest.load(root)
    out: list[Key] = []
    for ns, d in layout.namespace_dirs(root):
        for _, dd in layout.date_dirs(d):
            for f in dd.glob("*.parquet"):
                t = pq.read_table(f, columns=["id", "data", "timestamp"]).to_pylist()
                out += [(ns, r["id"], r["data"], r["timestamp"]) for r in t if r["id"] <= m.hwm(ns)]
    return out


def hot(data_dir: Path, root: Path) -> list[Key]:
    m = Manifest.load(root)
    with sqlite3.connect(data_dir / "tidings.db") as c:
        rows = c.execute("SELECT namespace, id, data, timestamp FROM events").fetchall()
    return [(ns, i, bytes(d).decode(), ts) for ns, i, d, ts in rows if i > m.hwm(ns)]


def assert_exactly_once(data_dir: Path, root: Path, stored: list[StoredEvent]) -> None:
    got = archived(root) + hot(data_dir, root)
    assert sorted(got) == sorted(key(e) for e in stored)


def test_archive_then_history_reads_every_event_once(spark: Any, tmp_path: Path) -> None:
    from tidings.pipeline.history import events
    from tidings.pipeline.session import prepare

    prepare(spark)
    data, root = tmp_path / "var", tmp_path / "archive"
    stored = make_store(data, {"shop.orders": 120, "a:b/c=d": 30})
    owed = next(e for e in stored if e.namespace == "shop.orders" and e.id == 3)
    with sqlite3.connect(data / "tidings.db") as c:  # still owed to a subscriber: stays in the hot log
        c.execute(
            "INSERT INTO notifications(subscription_id, seq, namespace) VALUES (1, ?, ?)", (owed.seq, owed.namespace)
        )

    run = archive(data_dir=data, archive_dir=root, older_than_s=0, now_ns=T0 + 100 * HOUR_NS, chunk_size=40)
    old = [e for e in stored if e.timestamp < T0 + 100 * HOUR_NS]
    assert run.events == len(old)
    marks = {n.namespace: n.to_id for n in run.namespaces}
    assert marks == {ns: max(e.id for e in old if e.namespace == ns) for ns in ("shop.orders", "a:b/c=d")}
    assert (root / "namespace=a%3Ab%2Fc%3Dd" / "date=2026-01-03").is_dir()
    with sqlite3.connect(data / "tidings.db") as c:
        left = {(ns, i) for ns, i in c.execute("SELECT namespace, id FROM events")}
    assert left == {(e.namespace, e.id) for e in stored if e not in old} | {("shop.orders", 3)}
    assert_exactly_once(data, root, stored)

    def ids(df: Any) -> list[int]:
        return sorted(r.id for r in df.select("id").collect())

    for ns in ("shop.orders", "a:b/c=d"):
        df = events(spark, ns, data_dir=data, archive_dir=root)
        rows = sorted(df.collect(), key=lambda r: r.id)
        assert [(r.namespace, r.id, r.data, r.timestamp) for r in rows] == sorted(
            key(e) for e in stored if e.namespace == ns
        )
    hwm = marks["shop.orders"]
    assert ids(events(spark, "shop.orders", hwm - 3, hwm + 3, data_dir=data, archive_dir=root)) == list(
        range(hwm - 3, hwm + 3)
    )
    assert ids(events(spark, "shop.orders", data_dir=data, archive_dir=root, origin="archive")) == list(
        range(1, hwm + 1)
    )
    # The filter compiler prunes rows inside Spark, over the VARIANT of the JSON view.
    even = events(spark, "shop.orders", 10, 110, data_dir=data, archive_dir=root, filter="even == true & amount > 50")
    assert ids(even) == [i for i in range(52, 110, 2)]

    # A second run that does not trim: archived rows stay in the hot log, reads stay exact.
    run2 = archive(data_dir=data, archive_dir=root, older_than_s=0, now_ns=T0 + 140 * HOUR_NS, trim=False)
    assert run2.namespaces and all(n.from_id == marks[n.namespace] + 1 for n in run2.namespaces)
    assert ids(events(spark, "shop.orders", data_dir=data, archive_dir=root)) == list(range(1, 121))
    assert_exactly_once(data, root, stored)


def test_archive_survives_sigkill_at_every_step(tmp_path: Path) -> None:
    """Kill the job (a real subprocess) at each step in turn, events arriving in between; rerun."""
    data, root = tmp_path / "var", tmp_path / "archive"
    stored = make_store(data, {"shop.orders": 60, "x:y": 15})
    cmd = [
        sys.executable, "-m", "tidings.pipeline", "archive", "--data-dir", str(data), "--archive-dir", str(root),
        "--older-than", "0", "--chunk-size", "25", "--workers", "2", "--quiet",
    ]
    t = T0 + 10 * DAY_NS
    # Killed half way through moving files, then half way through trimming (the states
    # a kill at the other steps leaves are subsets of these: docs/pipeline.md), then clean.
    for step in ("moving", "trimming", None):
        stored += make_store(data, {"shop.orders": 12, "x:y": 5}, t0=t)
        t += DAY_NS
        env = {**os.environ, CRASH_ENV: step or ""}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == (-9 if step else 0), proc.stderr[-3000:]
        assert_exactly_once(data, root, stored)
    summary = json.loads(proc.stdout)  # the last, clean run: the events that arrived after the last kill
    assert summary["events"] == 17 and summary["expired"] == []
    m = Manifest.load(root)
    assert m.hwm("shop.orders") == 96 and m.hwm("x:y") == 30
    # Nothing left behind: no staging, no file above a mark; the hot log keeps only its last row.
    assert not (root / layout.META / "staging").exists()
    for ns, d in layout.namespace_dirs(root):
        for _, dd in layout.date_dirs(d):
            for f in dd.iterdir():
                parsed = layout.parse_file_name(f.name)
                assert parsed is not None and parsed[1] <= m.hwm(ns)
    with sqlite3.connect(data / "tidings.db") as c:
        assert c.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1


def _bind_schema(data: Path, namespace: str, ref: dict[str, Any], retention_s: int | None, name: str = "s") -> None:
    with sqlite3.connect(data / "tidings.db") as c:
        cur = c.execute(
            "INSERT INTO schemas(format, model, canonical, created_at, created_by, state, retention_s) "
            "VALUES ('json', '{}', '{}', 0, 'admin', 'Active', ?)",
            (retention_s,),
        )
        c.execute(
            "INSERT INTO schema_versions(name, version, schema_id, created_at) VALUES (?, "
            "(SELECT COALESCE(MAX(version), 0) + 1 FROM schema_versions WHERE name = ?), ?, 0)",
            (name, name, cur.lastrowid),
        )
        config = json.dumps([["tidings:publication:schema", ref]])
        c.execute(
            "INSERT OR REPLACE INTO publications(namespace, owner, config, created_at) VALUES (?, 'o', ?, 0)",
            (namespace, config),
        )


def test_retention_expires_whole_days_of_the_archive(tmp_path: Path) -> None:
    data, root = tmp_path / "var", tmp_path / "archive"
    make_store(data, {"kept": 1, "by-id": 1, "by-name": 1})
    _bind_schema(data, "by-id", {"Nat": 1}, 2 * 86_400)
    _bind_schema(data, "by-name", {"Text": "orders"}, None, name="orders")  # v1: for ever
    _bind_schema(data, "by-name", {"Text": "orders"}, 86_400, name="orders")  # v2, the latest Active: one day
    with hot_log(data).connect() as c:
        assert [c.retention_of(ns) for ns in ("kept", "by-id", "by-name")] == [None, 2 * 86_400, 86_400]
    for ns in ("kept", "by-id", "by-name"):
        for day in ("2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"):
            d = layout.namespace_dir(root, ns) / f"date={day}"
            d.mkdir(parents=True)
            (d / layout.file_name(1, 1, 0)).write_bytes(b"x")
    now = T0 + 4 * DAY_NS + 12 * HOUR_NS  # 2026-01-05 12:00
    gone = expire(data_dir=data, archive_dir=root, now_ns=now)
    assert sorted((g.namespace, g.date) for g in gone) == [
        ("by-id", "2026-01-01"), ("by-id", "2026-01-02"),  # the 3rd ends after now - 2 days
        ("by-name", "2026-01-01"), ("by-name", "2026-01-02"), ("by-name", "2026-01-03"),
    ]
    assert [day for day, _ in layout.date_dirs(layout.namespace_dir(root, "kept"))] == [
        "2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04",
    ]


def test_one_archive_job_at_a_time(tmp_path: Path) -> None:
    data, root = tmp_path / "var", tmp_path / "archive"
    make_store(data, {"a": 1})
    with layout.lock(root), pytest.raises(PipelineError) as e:
        archive(data_dir=data, archive_dir=root, older_than_s=0)
    assert e.value.code == "archive_busy"


@pytest.mark.parametrize("name", ["we#ird", "a?b=c", "100%25 sure", "sp ace"])
def test_a_data_dir_named_with_uri_syntax_is_archived_through_the_arrow_driver(tmp_path: Path, name: str) -> None:
    """The staging read opens the store as a SQLite URI: the dir's own ``#``, ``?`` and
    ``%`` are escaped, so the fast driver reads the right file (it read none before)."""
    data = tmp_path / name / "var"
    stored = make_store(data, {"a.b": 30})
    with hot_log(data).connect() as c:
        got = c._read_adbc("a.b", 1, 30)  # type: ignore[attr-defined]
        assert got is not None and got.column("id").to_pylist() == list(range(1, 31))
        assert c.read_arrow("a.b", 5, 9).column("id").to_pylist() == [5, 6, 7, 8, 9]
    run = archive(data_dir=data, archive_dir=tmp_path / name / "archive", older_than_s=0)
    assert run.events == len(stored)


def test_missing_java_is_named(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)
    make_store(tmp_path / "var", {"a": 1})
    proc = subprocess.run(
        [sys.executable, "-m", "tidings.pipeline", "stats", "--data-dir", str(tmp_path / "var")],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("java_missing: ") and "openjdk-17" in last


def test_missing_pyspark_is_named(tmp_path: Path) -> None:
    # The base install has no PySpark: the jobs say which extra to install, not a traceback.
    hide = "import sys; sys.modules['pyspark'] = None; from tidings.pipeline.cli import main; sys.exit(main())"
    make_store(tmp_path / "var", {"a": 1})
    proc = subprocess.run(
        [sys.executable, "-c", hide, "stats", "--data-dir", str(tmp_path / "var")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "tidings[spark]" in proc.stderr and "Traceback" not in proc.stderr


def test_sqlite_store_still_appends_after_trimming(tmp_path: Path) -> None:
    """Trimming archived rows never restarts a chain: the next event follows the last id."""
    data = tmp_path / "var"
    stored = make_store(data, {"a": 5})
    with hot_log(data).connect(write=True) as c:
        assert c.trim_archived("a", 5) == 4  # the log's last row stays

    async def more() -> list[StoredEvent]:
        from tidings.store._base import NewEvent

        s = SQLiteStore(data / "tidings.db")
        await s.open()
        try:
            return await s.append([NewEvent(namespace="a", source="t", timestamp=T0, data=b'{"Nat":1}')])
        finally:
            await s.close()

    (e,) = asyncio.run(more())
    assert (e.id, e.prev_id) == (stored[-1].id + 1, stored[-1].id)


def test_archive_parquet_is_typed_and_filters_push_down(spark: Any, tmp_path: Path) -> None:
    """Spark SQL reads the archive as it is: TIMESTAMP event time, the payload as a VARIANT
    (``payload:amount``), the lossless forms beside them; filters reach the scan."""
    from datetime import UTC, datetime

    data, root = tmp_path / "var", tmp_path / "archive"
    stored = make_store(data, {"shop.orders": 50, "x:y": 10})
    archive(data_dir=data, archive_dir=root, older_than_s=0, now_ns=T0 + 1000 * HOUR_NS, chunk_size=20)
    df = spark.read.parquet(str(root))
    types = dict(df.dtypes)
    assert (types["time"], types["payload"], types["timestamp"], types["data"]) == (
        "timestamp", "variant", "bigint", "string")
    assert (types["namespace"], types["date"]) == ("string", "date")
    df.createOrReplaceTempView("archive_t")
    rows = spark.sql(
        "SELECT id, time, payload:amount::long AS amount, payload:even::boolean AS even, payload:ns::string AS ns, "
        "data FROM archive_t WHERE namespace = 'shop.orders' ORDER BY id"
    ).collect()
    orders = [e for e in stored if e.namespace == "shop.orders"]
    assert [(r.id, r.amount, r.even, r.ns, r.data) for r in rows] == [
        (e.id, e.id, e.id % 2 == 0, "shop.orders", e.data.decode()) for e in orders
    ]
    assert [r.time for r in rows] == [datetime.fromtimestamp(e.timestamp / 1e9, UTC).replace(tzinfo=None)
                                      for e in orders]

    q = df.where("namespace = 'x:y' AND id BETWEEN 3 AND 7 AND time >= TIMESTAMP '2026-01-01 00:00:00' "
                 "AND date >= DATE '2026-01-01'")
    plan = q._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [isnotnull(namespace" in plan and "(namespace#" in plan and "date#" in plan
    pushed = plan[plan.index("PushedFilters:"):].split("]", 1)[0]
    assert "GreaterThanOrEqual(id,3)" in pushed and "LessThanOrEqual(id,7)" in pushed and "time" in pushed
    assert sorted(r.id for r in q.collect()) == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("rewrite", [True, False], ids=["rewritten-whole", "page-by-page"])
def test_archive_and_trim_give_disk_space_back(tmp_path: Path, rewrite: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's file (and WAL) shrink after archiving: trimmed pages go back to the filesystem,
    whether the little that is left is copied into a new file or the free pages are moved."""
    from tidings.pipeline import _sqlite

    if not rewrite:
        monkeypatch.setattr(_sqlite, "REWRITE_LIVE_MAX", 0)
    data, root = tmp_path / "var", tmp_path / "archive"
    make_store(data, {"big": 4_000, "small": 100})
    c = sqlite3.connect(data / "tidings.db", isolation_level=None)  # fatter events: many pages to trim
    c.execute("UPDATE events SET headers = CAST(printf('[[\"pad\",{\"Text\":\"%s\"}]]', hex(randomblob(200)))"
              " AS BLOB)")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    with hot_log(data).connect() as s:
        before = s.store_bytes()
    run = archive(data_dir=data, archive_dir=root, older_than_s=0, now_ns=T0 + 3_000 * HOUR_NS)
    assert run.store_bytes is not None and run.store_bytes[0] >= before * 0.9
    with hot_log(data).connect() as s:
        after = s.store_bytes()
    assert after == run.store_bytes[1] and after < before / 3, (before, after)


def test_compact_merges_small_files_and_recovers_a_killed_swap(tmp_path: Path) -> None:
    """Three archive runs leave several files per date; compaction leaves one, same rows;
    a swap killed between its renames is finished by the next run."""
    from tidings.pipeline.compact import compact

    data, root = tmp_path / "var", tmp_path / "archive"
    stored = make_store(data, {"a": 30}, step_ns=HOUR_NS // 4)  # all on 2026-01-01
    for k in (1, 2, 3):
        archive(data_dir=data, archive_dir=root, older_than_s=0, now_ns=T0 + k * 2 * HOUR_NS, trim=False)
    day = layout.namespace_dir(root, "a") / "date=2026-01-01"
    assert len(list(day.glob("*.parquet"))) == 3
    before = sorted(archived(root))
    # A swap killed between its two renames: the old partition moved away, the new one not in place.
    (day.parent / "_old-date=2026-01-01").mkdir()
    os.replace(day, day.parent / "_compact-date=2026-01-01")
    done = compact(root)
    assert [(c.namespace, c.date, c.files) for c in done] == [("a", "2026-01-01", 3)]
    files = list(day.glob("*.parquet"))
    assert [f.name for f in files] == [layout.file_name(1, 24, 0)]
    assert sorted(archived(root)) == before and len(before) == 24
    assert not list(day.parent.glob("_*"))
    assert_exactly_once(data, root, stored)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(20_000, 20_004), max_size=40))
def test_rows_split_per_day_keep_their_order(days: list[int]) -> None:
    """The archive's files per date: every row once, under its own day, in id order,
    whether the days come in order (slices) or not (a stable sort first)."""
    import pyarrow as pa

    from tidings.pipeline._arrow import day_parts

    table = pa.table({"id": pa.array(range(len(days)), pa.int64())})
    got = [(day, part.column("id").to_pylist()) for day, part in day_parts(table, pa.array(days, pa.int32()))]
    assert [d for d, _ in got] == sorted(set(days))
    assert got == [(d, [i for i, x in enumerate(days) if x == d]) for d in sorted(set(days))]
