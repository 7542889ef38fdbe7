"""The statistics job and its HTML report: exact figures from a store the real server wrote."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ServerProcess, eventually
from tests.test_e2e_guarantees import Env, Hook, letters
from tidings.pipeline._human import fmt_figure as _short
from tidings.pipeline.archive import archive
from tidings.pipeline.cli import add_pipeline_parser, run_pipeline
from tidings.pipeline.report import render, write_report
from tidings.pipeline.session import prepare
from tidings.pipeline.stats import Point, Row, Stats, stats
from tidings.store import NewEvent, SQLiteStore, SubscriptionRecord

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers must import tidings

MAX_ATTEMPTS = 3
FIGURES = ("events", "notifications", "confirmations", "retries", "dead_letters", "dropped", "pending")


def figures(r: Row) -> tuple[int | None, ...]:
    return tuple(getattr(r, f) for f in FIGURES)


async def test_stats_count_what_the_server_did_per_publication_publisher_and_subscriber(
    server_factory: Callable[..., ServerProcess], endpoints: Any, spark: Any, tmp_path: Path
) -> None:
    server = server_factory(retry_initial_s="0.02", retry_max_s="0.1", max_attempts=str(MAX_ATTEMPTS),
                            ack_deadline_s="30")
    env = Env(server)
    try:
        await env.principals("alice", "bob", "carol", "dave", "erin")
        alice, bob = env.pub("alice"), env.pub("bob")
        for pub, ns in ((alice, "shop.orders"), (alice, "shop.refunds"), (bob, "shop.audit")):
            await pub.register_publication(ns)
        hook = Hook()
        ep = await endpoints(hook)
        carol, dave, erin = env.sub("carol"), env.sub("dave"), env.sub("erin")
        carol_orders = await carol.subscribe("shop.orders", ep.url)
        carol_audit = await carol.subscribe("shop.audit", ep.url)
        dave_orders = await dave.subscribe("shop.orders", ep.url)
        erin_refunds = await erin.subscribe("shop.refunds", ep.url)
        hook.status[dave_orders] = 500  # every push fails: tried 3 times each, then dead-lettered
        hook.script[erin_refunds] = deque([(500, {})])  # the first push fails, the retry goes through

        for i in range(4):
            await alice.publish("shop.orders", {"n": i})
        await alice.publish("shop.refunds", {"n": 9})
        for i in range(3):
            await bob.publish("shop.audit", {"n": i})

        dead = await letters(dave, 4)
        await dave.drop_dead_letters([dead[0].id])
        await eventually(lambda: len(hook.delivered(carol_orders)) == 4 and len(hook.delivered(carol_audit)) == 3
                         and len(hook.delivered(erin_refunds)) == 1)
        await eventually(lambda: asyncio.to_thread(settled, server.data_dir, 4 + 3 + 4 + 1 + 1))
    finally:
        await env.close()

    prepare(spark)
    result = stats(spark, data_dir=server.data_dir, bucket="1h")

    # events, notifications, confirmations, retries (pushes beyond the first), dead letters, dropped, pending
    assert figures(result.totals) == (8, 12, 8, 4 * (MAX_ATTEMPTS - 1) + 1, 4, 1, 0)
    assert {k: figures(r) for k, r in result.of("publication").items()} == {
        "shop.orders": (4, 8, 4, 4 * (MAX_ATTEMPTS - 1), 4, 1, 0),
        "shop.refunds": (1, 1, 1, 1, 0, 0, 0),
        "shop.audit": (3, 3, 3, 0, 0, 0, 0),
    }
    assert {k: figures(r) for k, r in result.of("publisher").items()} == {
        "alice": (5, 9, 5, 4 * (MAX_ATTEMPTS - 1) + 1, 4, 1, 0),
        "bob": (3, 3, 3, 0, 0, 0, 0),
    }
    assert {k: figures(r) for k, r in result.of("subscriber").items()} == {
        "carol": (None, 7, 7, 0, 0, 0, 0),
        "dave": (None, 4, 0, 4 * (MAX_ATTEMPTS - 1), 4, 1, 0),
        "erin": (None, 1, 1, 1, 0, 0, 0),
    }
    # Latency percentiles of what was confirmed, ordered; none where nothing was.
    for r in [result.totals, *result.rows]:
        if r.confirmations:
            assert r.p50_ms is not None and r.p90_ms is not None and r.p99_ms is not None
            assert 0 < r.p50_ms <= r.p90_ms <= r.p99_ms < 60_000, r
        else:
            assert r.p50_ms is r.p90_ms is r.p99_ms is None, r
    # The time series adds up to the totals (everything happened within a bucket or two).
    for dim, key, row in [("all", "", result.totals), *(("publication", k, r) for k, r in
                                                         result.of("publication").items())]:
        points = result.series_of(dim, key)  # type: ignore[arg-type]
        assert points and all(p.start_ns % (3600 * 10**9) == 0 for p in points)
        assert sum(p.events or 0 for p in points) == row.events
        assert sum(p.confirmations for p in points) == row.confirmations
        assert sum(p.dead_letters for p in points) == row.dead_letters

    # The delivery records as a DataFrame, read in parallel ranges; bounds on settled_at pushed down.
    deliveries = spark.read.format("tidings").option("table", "deliveries").option("partitionSize", "4")
    df = deliveries.load(str(server.data_dir))
    assert df.rdd.getNumPartitions() == 4 and df.count() == 13
    assert sorted(r.outcome for r in df.where("subscriber = 'dave'").collect()) == ["dead"] * 4 + ["dropped"]
    last = df.agg({"settled_at": "max"}).first()[0]
    assert deliveries.load(str(server.data_dir)).where(f"settled_at >= {last}").rdd.getNumPartitions() == 1

    # The report: one file, inline plots, the names in it.
    page = write_report(result, tmp_path / "out" / "report.html").read_text()
    assert page.startswith("<!doctype html>")
    assert not re.search(r"<script|src=|href=|url\(|@import", page)  # nothing to fetch: opens offline
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) >= 3
    for svg in svgs:
        ET.fromstring(svg)  # well-formed
    for name in ("shop.orders", "shop.refunds", "shop.audit", "alice", "bob", "carol", "dave", "erin"):
        assert f"<td class=key>{name}</td>" in page

    # Archived events still count, once: the hot log keeps the rows dead letters still
    # need (and its last one), which the archive's mark says to take from the archive.
    run = archive(data_dir=server.data_dir, archive_dir=tmp_path / "archive", older_than_s=0)
    assert run.events == 8 and sum(n.trimmed for n in run.namespaces) < 8
    again = stats(spark, data_dir=server.data_dir, archive_dir=tmp_path / "archive")
    assert {k: r.events for k, r in again.of("publication").items()} == {
        "shop.orders": 4, "shop.refunds": 1, "shop.audit": 3,
    }
    assert {k: r.events for k, r in again.of("publisher").items()} == {"alice": 5, "bob": 3}


def settled(data_dir: Path, n: int) -> bool:
    """The store holds ``n`` delivery records and nothing is pending (the server has settled everything)."""
    import sqlite3

    with sqlite3.connect(data_dir / "tidings.db") as conn:
        # A batch confirmed whole is one row of n records (tidings.core.record_batch).
        done = conn.execute("SELECT COALESCE(SUM(COALESCE(n, 1)), 0) FROM deliveries").fetchone()[0]
        pending = conn.execute("SELECT COUNT(*) FROM notifications").fetchone()[0]
    assert done <= n
    return bool(done == n and pending == 0)


def test_report_escapes_names_and_draws_every_series() -> None:
    hour = 3600 * 10**9
    base = {"notifications": 2, "confirmations": 1, "retries": 0, "dead_letters": 1, "dropped": 0, "pending": 0,
            "p50_ms": 3.0, "p90_ms": 4.0, "p99_ms": 5.0}
    evil = "<script>alert('x')</script>&"
    rows = [Row(dimension="publication", key=evil, events=2, **base),
            Row(dimension="subscriber", key="carol", events=None, **base)]
    series = [Point(dimension=d, key=k, start_ns=t * hour, events=None if d == "subscriber" else 1, **base)
              for d, k in (("all", ""), ("publication", evil), ("subscriber", "carol")) for t in (10, 12)]
    result = Stats(data_dir="/srv/<var>", since_ns=None, until_ns=None, bucket_s=3600, generated_at_ns=13 * hour,
                   totals=Row(dimension="all", key="", events=2, **base), rows=rows, series=series, spark_s=1.0)
    page = render(result)
    assert "<script" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;" in page
    assert "/srv/&lt;var&gt;" in page
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    for svg in svgs:
        ET.fromstring(svg)
    # The bucket in between has no figures: drawn as zero for counts, a gap for latencies.
    traffic = next(s for s in svgs if 'aria-label="Traffic per bucket"' in s)
    assert len(re.findall(r"<circle", traffic)) == 3 * 3
    latency = next(s for s in svgs if "aria-label=\"Delivery latency" in s)
    assert len(re.findall(r"<circle", latency)) == 3 * 2


def test_cli_writes_the_report_and_prints_a_summary(tmp_path: Path) -> None:
    data = tmp_path / "var"
    now = time.time_ns()
    day = 86_400 * 10**9

    async def fill() -> None:
        store = SQLiteStore(data / "tidings.db")
        await store.open()
        try:
            # Two events of a week ago, three of now; one subscriber confirms two of the recent ones.
            old = await store.append([NewEvent(namespace="a.b", source="alice", timestamp=now - 7 * day - i,
                                               data=b'{"Nat":1}') for i in range(2)])
            s = await store.create_subscription(
                SubscriptionRecord(id=0, subscriber="carol", namespace="a.b", endpoint="http://127.0.0.1:9/"))
            new = await store.append([NewEvent(namespace="a.b", source="alice", timestamp=now - i,
                                               data=b'{"Nat":2}') for i in range(3)])
            ids = await store.open_notifications(s.id, new, new[-1].seq)
            await store.settle_notifications(ids[:2])
            assert old[0].seq == 1
        finally:
            await store.close()

    asyncio.run(fill())
    out = tmp_path / "report.html"
    run = subprocess.run(
        [sys.executable, "-m", "tidings", "pipeline", "stats", "--data-dir", str(data), "--out", str(out),
         "--since", "2d", "--bucket", "15m"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["report"] == str(out.resolve()) and out.exists()
    assert summary["bucket_s"] == 900 and summary["since_ns"] is not None
    totals = summary["totals"]
    # Only the recent events count: --since left the old ones out.
    assert (totals["events"], totals["notifications"], totals["confirmations"], totals["pending"]) == (3, 3, 2, 1)
    assert [(r["dimension"], r["key"]) for r in summary["rows"]] == [
        ("publication", "a.b"), ("publisher", "alice"), ("subscriber", "carol"),
    ]
    assert "starting Spark" in run.stderr  # progress on stderr
    page = out.read_text()
    assert "<svg" in page and "<td class=key>carol</td>" in page

    # No store: a clear message and status 2, before Spark starts.
    run = subprocess.run(
        [sys.executable, "-m", "tidings", "pipeline", "stats", "--data-dir", str(tmp_path / "none"), "--quiet"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2 and "no event store" in run.stderr


def test_expire_trims_delivery_records_past_their_age(tmp_path: Path, capsys: Any) -> None:
    data = tmp_path / "var"

    async def fill() -> None:
        store = SQLiteStore(data / "tidings.db")
        await store.open()
        try:
            events = await store.append([NewEvent(namespace="a.b", source="alice", timestamp=1, data=b'{"Nat":1}')])
            s = await store.create_subscription(SubscriptionRecord(id=0, subscriber="carol", namespace="a.b",
                                                                   endpoint=None))
            await store.settle_notifications(await store.open_notifications(s.id, events * 3, events[-1].seq))
        finally:
            await store.close()

    asyncio.run(fill())
    parser = argparse.ArgumentParser()
    add_pipeline_parser(parser.add_subparsers(dest="command"))

    def expire(keep: str) -> int:
        assert run_pipeline(parser.parse_args(["pipeline", "expire", "--data-dir", str(data),
                                               "--keep-deliveries", keep])) == 0
        return int(json.loads(capsys.readouterr().out)["deliveries_trimmed"])

    assert expire("1h") == 0  # settled just now: kept
    time.sleep(0.01)
    assert expire("0") == 3
    assert expire("0") == 0


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**18))
def test_chart_figures_are_exact_counts(n: int) -> None:
    """A count on a chart reads as itself: ``2,000``, never ``2e+03`` (counts from 1,000
    to 9,999 were labelled that way)."""
    text = _short(float(n)) if n < 2**53 else _short(n)
    assert "e" not in text.lower()
    assert int(text.replace(",", "")) == n
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", text)


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e12, 1e12, allow_nan=False))
def test_chart_figures_are_never_in_scientific_notation(v: float) -> None:
    text = _short(v)
    assert "e" not in text.lower(), text
    if text.startswith(("<", ">")):
        assert abs(v) < 0.001
    else:  # a clearly rounded figure: within half its last digit of the value
        plain = float(text.replace(",", ""))
        decimals = len(text.split(".")[1]) if "." in text else 0
        assert abs(plain - v) <= 0.5 * 10**-decimals + 1e-9


def test_the_report_labels_thousands_as_numbers() -> None:
    hour = 3600 * 10**9
    base = {"notifications": 2000, "confirmations": 1999, "retries": 0, "dead_letters": 1, "dropped": 0,
            "pending": 0, "p50_ms": 3.0, "p90_ms": 4.0, "p99_ms": 5.0}
    series = [Point(dimension="all", key="", start_ns=t * hour, events=n, **base)
              for t, n in ((10, 1500), (11, 4321), (12, 2000))]
    result = Stats(data_dir="/srv", since_ns=None, until_ns=None, bucket_s=3600, generated_at_ns=13 * hour,
                   totals=Row(dimension="all", key="", events=7821, **base), rows=[], series=series, spark_s=1.0)
    page = render(result)
    labels = re.findall(r"<text[^>]*>([^<]*)</text>|<title>([^<]*)</title>", page)
    shown = " ".join(a or b for a, b in labels)
    assert not re.search(r"\d[eE][+-]?\d", shown), shown
    assert "4,321" in shown and "5,000" in shown  # a point's exact count; the axis' top
