"""The pipeline on a PostgreSQL store: the archive job, the ``tidings`` source, stats and
streams read and trim the log ``tidings serve --store postgresql://...`` writes, as they
do the SQLite file; both hot-log backends agree; addresses never print their password.

The address carries a password throughout: the test server trusts local connections, so
PostgreSQL ignores it, and every output can be searched for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tidings.pipeline._backend import hot_log
from tidings.pipeline._hotlog import Binds, IdRange
from tidings.pipeline._url import libpq_uri, redact
from tidings.pipeline.errors import PipelineError
from tidings.store import NewEvent, PostgresStore, SQLiteStore, StoredEvent, SubscriptionRecord

from .pg_support import schema_address

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers must import tidings

HOUR_NS = 3_600 * 10**9
COUNTS = {"shop.orders": 120, "a:b/c=d": 30, "quiet": 3}
SECRET = "hunter2-not-for-logs"


def with_password(address: str) -> str:
    """``address`` with :data:`SECRET` as its password (unless it has one: then that one is the secret)."""
    parts = urlsplit(address)
    auth, _, host = parts.netloc.rpartition("@")
    if ":" in auth:
        return address
    return urlunsplit(parts._replace(netloc=f"{auth}:{SECRET}@{host}"))


def secret_of(address: str) -> str:
    return urlsplit(address).netloc.rpartition("@")[0].split(":", 1)[1]


async def fill(store: Any, counts: dict[str, int], t0: int, step_ns: int = HOUR_NS) -> list[StoredEvent]:
    """Append ``counts[ns]`` events per namespace, interleaved, as publishes would: the k-th
    event of the log stamped ``t0 + k * step_ns``."""
    batch = []
    left = dict(counts)
    k = 0
    while any(left.values()):
        for ns in counts:
            if left[ns]:
                left[ns] -= 1
                i = counts[ns] - left[ns]
                batch.append(NewEvent(
                    namespace=ns, source=f"pub{i % 3}", timestamp=t0 + k * step_ns,
                    data=json.dumps({"Map": [["amount", {"Nat": i}], ["ns", {"Text": ns}]]}).encode(),
                    headers=json.dumps([["test:k", {"Nat": k}]]).encode(),
                ))
                k += 1
    return await store.append(batch)


async def owe(store: Any, events: list[StoredEvent], settle: int) -> None:
    """A subscriber is sent ``events``; the first ``settle`` are confirmed (delivery records),
    the rest stay pending (notifications that keep their events in the hot log)."""
    sub = await store.create_subscription(
        SubscriptionRecord(id=0, subscriber="carol", namespace=events[0].namespace, endpoint="http://127.0.0.1:9/"))
    ids = await store.open_notifications(sub.id, events, events[-1].seq)
    await store.settle_notifications(ids[:settle])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidings", *args], capture_output=True, text=True, timeout=300)


@dataclass
class Archived:
    url: str
    root: Path
    stored: list[StoredEvent]
    summary: dict[str, Any]
    output: str
    """Everything the archive command printed."""


@pytest.fixture(scope="module")
def archived(pg_database: str, tmp_path_factory: pytest.TempPathFactory) -> Archived:
    """A PostgreSQL store filled through the store, archived with ``tidings archive``."""
    url = with_password(schema_address(pg_database))
    now = time.time_ns()

    async def go() -> list[StoredEvent]:
        store = PostgresStore(url)
        await store.open()
        try:
            stored = await fill(store, COUNTS, now - 160 * HOUR_NS)  # the last one 8 hours old
            orders = [e for e in stored if e.namespace == "shop.orders"]
            await owe(store, orders[2:6], settle=2)  # ids 3, 4 confirmed; 5, 6 still owed
            return stored
        finally:
            await store.close()

    stored = asyncio.run(go())
    root = tmp_path_factory.mktemp("pg-archive") / "archive"
    proc = cli("archive", "--data-dir", url, "--archive-dir", str(root), "--older-than", "50h")
    assert proc.returncode == 0, proc.stderr
    return Archived(url, root, stored, json.loads(proc.stdout), proc.stdout + proc.stderr)


def pg_rows(url: str, sql: str) -> list[Any]:
    import asyncpg

    async def go() -> list[Any]:
        conn = await asyncpg.connect(url)
        try:
            return list(await conn.fetch(sql))
        finally:
            await conn.close()

    return asyncio.run(go())


def full(e: StoredEvent) -> tuple[Any, ...]:
    return (e.seq, e.namespace, e.id, e.prev_id, e.timestamp, e.source, e.headers.decode(), e.data.decode())


def test_archive_trims_postgresql_and_the_source_reads_every_event_once(spark: Any, archived: Archived) -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql import functions as F

    from tidings.pipeline.layout import Manifest
    from tidings.pipeline.session import prepare

    url, root, stored, summary = archived.url, archived.root, archived.stored, archived.summary
    secret = secret_of(url)
    assert secret not in archived.output

    # The archive took each namespace's prefix older than the threshold, and said so.
    marks = {n["namespace"]: n["to_id"] for n in summary["namespaces"]}
    assert set(marks) == set(COUNTS) and marks["quiet"] == 3
    for ns, hwm in marks.items():
        chain = [e for e in stored if e.namespace == ns]
        assert all(e.timestamp < summary["before"] for e in chain[:hwm])
        assert hwm == len(chain) or chain[hwm].timestamp >= summary["before"]
    assert {ns: s.hwm for ns, s in Manifest.load(root).namespaces.items()} == marks
    assert summary["events"] == sum(marks.values()) and summary["deliveries_trimmed"] == 0

    # ... and deleted it from PostgreSQL, but for the events still owed to the subscriber.
    left = {(r[0], r[1]) for r in pg_rows(url, "SELECT namespace, id FROM events")}
    assert left == {(e.namespace, e.id) for e in stored if e.id > marks[e.namespace]} | {
        ("shop.orders", 5), ("shop.orders", 6)}
    assert sum(n["trimmed"] for n in summary["namespaces"]) == len(stored) - len(left)

    # One logical log: each event once, archived ones from Parquet, the others from PostgreSQL.
    prepare(spark)
    src = spark.read.format("tidings").option("archive", str(root))
    df = src.load(url)
    got = [(r.seq, r.namespace, r.id, r.prev_id, r.timestamp, r.source, r.headers, r.data) for r in df.collect()]
    assert sorted(got) == sorted(full(e) for e in stored)

    # An id range across the seam: 6 archived ids and 5 hot ones, planned as 3 partitions of 4.
    hwm = marks["shop.orders"]
    df = src.option("partitionSize", "4").load(url)
    q = df.where((F.col("namespace") == "shop.orders") & (F.col("id") > hwm - 6) & (F.col("id") <= hwm + 5))
    assert sorted(r.id for r in q.collect()) == list(range(hwm - 5, hwm + 6))
    assert q.rdd.getNumPartitions() == 3
    # IN over namespaces and a timestamp bound, pushed into the hot log's SQL ($n parameters).
    ts = next(e.timestamp for e in stored if e.namespace == "shop.orders" and e.id == hwm + 10)
    q = df.where(F.col("namespace").isin("shop.orders", "quiet") & (F.col("timestamp") >= ts))
    assert sorted((r.namespace, r.id) for r in q.collect()) == sorted(
        (e.namespace, e.id) for e in stored if e.namespace in ("shop.orders", "quiet") and e.timestamp >= ts)
    plan = q._jdf.queryExecution().executedPlan().toString()
    assert "Filter" not in plan.split("BatchScan")[0]  # nothing left for Spark to filter

    # Vacuum: VACUUM (ANALYZE) on the tables the pipeline trims, sizes before and after.
    proc = cli("archive", "vacuum", "--data-dir", url)
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert set(out["relations"]) == {"events", "deliveries"}
    assert all(b > 0 and a > 0 for b, a in out["relations"].values())
    assert out["store_bytes"] == [sum(v[0] for v in out["relations"].values()),
                                  sum(v[1] for v in out["relations"].values())]


def test_stats_and_streams_read_postgresql(spark: Any, archived: Archived, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from tidings.pipeline.session import prepare
    from tidings.pipeline.stats import stats

    url, root, stored = archived.url, archived.root, archived.stored
    prepare(spark)
    result = stats(spark, data_dir=url, archive_dir=root)
    assert {k: r.events for k, r in result.of("publication").items()} == COUNTS  # archived and hot, once each
    t = result.totals
    assert (t.notifications, t.confirmations, t.pending) == (4, 2, 2)  # the delivery records and notifications
    assert secret_of(url) not in result.data_dir and result.data_dir == redact(url)

    # A stream from the start: archived events from the archive, the others from PostgreSQL.
    wanted = ("shop.orders", "quiet")
    q = (
        spark.readStream.format("tidings").option("startingOffsets", "earliest")
        .option("namespace", ",".join(wanted)).option("maxEventsPerTrigger", "40").option("archive", str(root))
        .load(url).select("seq", "namespace", "id")
        .writeStream.format("parquet").option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start()
    )
    q.awaitTermination(240)
    assert q.exception() is None
    assert len([p for p in q.recentProgress if p["numInputRows"]]) >= 2  # at most 40 hot events a batch
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.namespace, r.id, r.seq) for r in rows) == sorted(
        (e.namespace, e.id, e.seq) for e in stored if e.namespace in wanted)


def test_both_hot_log_backends_agree(pg_database: str, tmp_path: Path) -> None:
    """The SQLite and the PostgreSQL hot logs answer alike for the same events, reading and trimming."""
    sqlite_dir, pg_url = tmp_path / "var", schema_address(pg_database)
    sqlite_dir.mkdir()
    t0 = 1_767_225_600 * 10**9

    async def make(store: Any) -> list[StoredEvent]:
        await store.open()
        try:
            stored = await fill(store, {"shop.orders": 40, "a:b/c=d": 12, "z": 3}, t0)
            await owe(store, [e for e in stored if e.namespace == "shop.orders"][:4], settle=3)
            return stored
        finally:
            await store.close()

    stored = asyncio.run(make(SQLiteStore(sqlite_dir / "tidings.db")))
    assert [full(e) for e in asyncio.run(make(PostgresStore(pg_url)))] == [full(e) for e in stored]

    def answers(location: str | Path) -> dict[str, Any]:
        log = hot_log(location)
        with log.connect() as s:
            out: dict[str, Any] = {
                "namespaces": s.namespaces(),
                "bounds": [s.id_bounds(ns) for ns in ("shop.orders", "a:b/c=d", "z", "none")],
                "range": [(*r[:6], bytes(r[6]), bytes(r[7])) for rows in s.read_range(
                    IdRange("shop.orders", 5, 33), [("timestamp", ">=", t0 + 20 * HOUR_NS), ("seq", "<=", 60)],
                    batch=4) for r in rows],
                "arrow": s.read_arrow("a:b/c=d", 2, 11).to_pylist(),
                "count": s.count_range("shop.orders", 10, 19),
                "archivable": [s.archivable_upto("shop.orders", after, t0 + 30 * HOUR_NS) for after in (0, 25)],
                "retention": s.retention_of("shop.orders"),
                "tables": (s.has_tables(["events", "deliveries"]), s.has_tables(["events", "no_such"])),
                "columns": (s.has_columns("deliveries", ["serial", "settled_at"]),
                            s.has_columns("deliveries", ["serial", "no_such"])),
            }
        with log.connect(write=True) as s:
            out["trimmed"] = s.trim_archived("shop.orders", 10)  # id 4 is still owed: 9 go
            out["after_trim"] = s.id_bounds("shop.orders")
            out["deliveries_trimmed"] = s.trim_deliveries(time.time_ns())
            assert s.store_bytes() > 0
        return out

    sqlite, pg = answers(sqlite_dir), answers(pg_url)
    assert pg == sqlite
    # ... and they are right.
    assert sqlite["namespaces"] == ["a:b/c=d", "shop.orders", "z"]
    assert sqlite["bounds"] == [(1, 40), (1, 12), (1, 3), None]
    assert [r[:2] for r in sqlite["range"]] == [(e.seq, e.namespace) for e in stored if e.namespace == "shop.orders"
                                               and 5 <= e.id <= 33 and e.timestamp >= t0 + 20 * HOUR_NS and e.seq <= 60]
    assert [r["id"] for r in sqlite["arrow"]] == list(range(2, 12)) and sqlite["arrow"][0]["prev_id"] == 1
    assert (sqlite["count"], sqlite["tables"], sqlite["retention"]) == (10, (True, False), None)
    assert sqlite["columns"] == (True, False)
    assert (sqlite["trimmed"], sqlite["after_trim"], sqlite["deliveries_trimmed"]) == (9, (4, 40), 3)


def test_placeholders_follow_the_connection() -> None:
    for numbered, want in ((False, "? ? ?, ?"), (True, "$1 $2 $3, $4")):
        b = Binds(numbered=numbered)
        assert f"{b('a')} {b(1)} {b.each([2, 3])}" == want and b.values == ["a", 1, 2, 3]
    with pytest.raises(ValueError):
        Binds(numbered=True).where([("data", "=", 1)])
    # asyncpg's server settings become libpq options; the password never prints.
    uri = libpq_uri("postgres://u:pw@h:5/db?search_path=a b&sslmode=disable")
    assert "options=-c%20search_path%3Da%5C%20b" in uri and "sslmode=disable" in uri and "search_path=" not in \
        uri.split("options=")[0]
    assert redact("postgresql://u:p%40ss@h/db?password=other&x=1") == "postgresql://u@h/db?password=***&x=1"


def test_a_bad_address_says_so_without_its_password(pg_database: str, tmp_path: Path) -> None:
    base = urlsplit(pg_database)
    host = base.netloc.rpartition("@")[2]
    cases = {
        f"postgresql://postgres:{SECRET}@127.0.0.1:1/tidings": "store_unreachable",  # nothing listens
        f"postgres://postgres:{SECRET}@{host}/no_such_database_here": "store_unreachable",
        f"{with_password(pg_database)}?search_path=no_such_schema": "store_not_found",  # no events table
    }
    for url, code in cases.items():
        with pytest.raises(PipelineError) as caught:
            hot_log(url).check()
        e = caught.value
        assert e.code == code, e.line()
        shown = "".join(traceback.format_exception(e)) + e.line() + repr(e.args)
        assert secret_of(url) not in shown, shown
        assert redact(url) in e.message  # which address failed, all but its password
    # From the command line: one line, its code first, no password.
    bad = next(iter(cases))
    proc = cli("archive", "--data-dir", bad, "--archive-dir", str(tmp_path / "a"))
    assert proc.returncode == 2 and proc.stderr.startswith("store_unreachable: ")
    assert SECRET not in proc.stderr + proc.stdout and "postgresql://postgres@127.0.0.1:1/tidings" in proc.stderr
    assert not (tmp_path / "a").exists()
