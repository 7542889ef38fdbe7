"""The statistics job: what was published and what became of it, per publication, publisher, subscriber.

::

    from tidings.pipeline.stats import stats
    result = stats(spark, data_dir="var", since_ns=time.time_ns() - 86_400 * 10**9, bucket="1h")
    result.rows          # totals per (dimension, key)
    result.series        # the same per time bucket
    result.totals        # over everything

Sources (docs/pipeline.md, Statistics):

* **events**: the event log, hot and archived (:func:`frames`). Counted per publication
  (``namespace``) and per publisher (``source``), bucketed by the event's timestamp.
* **outcomes**: the store's delivery records (``option("table", "deliveries")``), one per
  notification confirmed, dead-lettered or dropped, bucketed by when that happened
  (``settled_at``). Confirmations, dead letters, dropped dead letters, retries (pushes
  beyond the first, over confirmed and dead-lettered notifications) and the delivery
  latency ``settled_at - event timestamp`` (publish to confirmation) of confirmed ones
  sent live (not by a replay), as approximate percentiles (Spark's ``percentile_approx``).
* **notifications**: notifications recorded in the window (those with an outcome and
  those still pending), bucketed by when they were recorded (``created_at``). A dead
  letter that is redriven is recorded again, so it counts again.

One Spark job: each source is read once, each fact counted for its bucket and for the
totals in one aggregation.

A dimension ``all`` (key ``""``) holds the totals. Subscribers have no ``events``
(None): an event belongs to a publication, not to a subscriber.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from .errors import PipelineError

__all__ = ["Figures", "Frames", "Point", "Row", "Stats", "frames", "parse_bucket", "stats"]

Dimension = Literal["all", "publication", "publisher", "subscriber"]
DIMENSIONS: Final[tuple[Dimension, ...]] = ("all", "publication", "publisher", "subscriber")
QUANTILES: Final = (0.5, 0.9, 0.99)
_EVENT_COLUMNS: Final = (("namespace", "string"), ("id", "long"), ("timestamp", "long"), ("source", "string"))
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


class Figures(msgspec.Struct, kw_only=True):
    """Counts over a window; latencies in milliseconds, None when nothing was confirmed."""

    events: int | None
    """Events published (None for subscribers)."""
    notifications: int
    confirmations: int
    retries: int
    dead_letters: int
    dropped: int
    """Dead letters deleted for good."""
    pending: int
    """Notifications recorded in the window and not settled yet."""
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None


class Row(Figures, kw_only=True):
    """The figures of one publication, publisher or subscriber over the whole window."""

    dimension: Dimension
    key: str


class Point(Row, kw_only=True):
    """The figures of one key in one time bucket ``[start_ns, start_ns + bucket)``."""

    start_ns: int


class Stats(msgspec.Struct, kw_only=True):
    """What :func:`stats` returns: JSON-encodable with ``msgspec.json.encode``."""

    data_dir: str
    since_ns: int | None
    until_ns: int | None
    bucket_s: int
    generated_at_ns: int
    totals: Row
    rows: list[Row]
    """Per dimension and key, sorted by dimension then key (``all`` excluded: see ``totals``)."""
    series: list[Point]
    """Per dimension, key and bucket, sorted the same way then by time (``all`` included)."""
    spark_s: float

    def of(self, dimension: Dimension) -> dict[str, Row]:
        return {r.key: r for r in self.rows if r.dimension == dimension}

    def series_of(self, dimension: Dimension, key: str = "") -> list[Point]:
        return [p for p in self.series if p.dimension == dimension and p.key == key]


@dataclass(frozen=True)
class Frames:
    """The job's inputs as lazy DataFrames, with the window applied.

    ``events``: ``namespace, source, timestamp``; ``outcomes``: the delivery records
    (:data:`tidings.pipeline.deliveries.DELIVERY_SCHEMA`) settled in the window;
    ``pending``: the pending notifications recorded in the window, same columns.
    """

    events: Any
    outcomes: Any
    pending: Any


def parse_bucket(text: str) -> int:
    """Seconds from ``30s``, ``15m``, ``1h``, ``1d``, ``1w`` (or plain seconds)."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", text)
    if m is None or int(m[1]) == 0:
        raise PipelineError(f"not a bucket size: {text!r} (use e.g. 15m, 1h, 1d)", code="invalid_option")
    return int(m[1]) * _UNITS.get(m[2] or "s", 1)


def frames(
    spark: Any,
    *,
    data_dir: str | Path,
    archive_dir: str | Path | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
) -> Frames:
    """The events (hot log and archive), delivery outcomes and pending notifications of ``[since, until)``.

    ``data_dir``: a data dir, its ``tidings.db``, or a PostgreSQL address."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from ._backend import hot_log
    from ._sqlite import db_path
    from ._url import is_pg_url
    from .source import load

    path = str(data_dir) if is_pg_url(data_dir) else str(db_path(data_dir))
    hot_log(path).check()  # a clear error now rather than in a Spark task

    def window(df: Any, col: str) -> Any:
        if since_ns is not None:
            df = df.where(F.col(col) >= since_ns)
        if until_ns is not None:
            df = df.where(F.col(col) < until_ns)
        return df

    columns = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in _EVENT_COLUMNS]
    hot = load(spark, path, {"origin": "hot"}, StructType.fromJson({"type": "struct", "fields": columns}))
    events = window(_with_archive(spark, hot, archive_dir, since_ns), "timestamp")
    outcomes = window(load(spark, path, {"table": "deliveries"}), "settled_at")
    pending = window(load(spark, path, {"table": "pending"}), "created_at")
    return Frames(events.select("namespace", "source", "timestamp"), outcomes, pending)


def _with_archive(spark: Any, hot: Any, archive_dir: str | Path | None, since_ns: int | None) -> Any:
    """``hot`` plus the archived events, each id from one side only (the manifest's mark, as history does)."""
    from pyspark.sql import functions as F

    from .history import ARCHIVE_SCHEMA
    from .layout import Manifest

    if archive_dir is None:
        return hot
    root = Path(archive_dir)
    marks = {ns: s.hwm for ns, s in Manifest.load(root).namespaces.items() if s.hwm > 0}
    if not marks or not any(root.glob("namespace=*/date=*/*.parquet")):
        return hot
    pairs = [x for ns, hwm in sorted(marks.items()) for x in (F.lit(ns), F.lit(hwm))]
    mark = F.coalesce(F.element_at(F.create_map(*pairs), F.col("namespace")), F.lit(0))
    archived = spark.read.schema(ARCHIVE_SCHEMA).option("basePath", str(root)).parquet(str(root))
    if since_ns is not None:  # prunes whole date partitions
        archived = archived.where(F.col("date") >= F.to_date(F.timestamp_micros(F.lit(since_ns // 1000))))
    # Files above the mark belong to an archive run that has not finished: never read them.
    archived = archived.where(F.col("id") <= mark).select(*_EVENT_SCHEMA_NAMES)
    return hot.where(F.col("id") > mark).select(*_EVENT_SCHEMA_NAMES).unionByName(archived)


_EVENT_SCHEMA_NAMES: Final = ("namespace", "id", "timestamp", "source")


def stats(
    spark: Any,
    *,
    data_dir: str | Path,
    archive_dir: str | Path | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    bucket: str | int = "1h",
    progress: Callable[[str], None] = lambda _msg: None,
) -> Stats:
    """Run the statistics job over ``[since_ns, until_ns)`` (None: unbounded) in buckets of ``bucket``.

    ``bucket`` is seconds or text such as ``15m``, ``1h``, ``1d``. ``progress`` gets a line
    per phase.
    """
    bucket_s = parse_bucket(bucket) if isinstance(bucket, str) else int(bucket)
    if bucket_s < 1:
        raise PipelineError("the bucket must be at least one second", code="invalid_option")
    started = time.monotonic()
    fr = frames(spark, data_dir=data_dir, archive_dir=archive_dir, since_ns=since_ns, until_ns=until_ns)
    progress(f"computing totals and time series (buckets of {bucket_s:,} s) per publication, publisher, subscriber")
    totals, series = [], []
    for r in _aggregate(_facts(fr, bucket_s * 10**9), bucket_ns=bucket_s * 10**9).collect():
        if r["start_ns"] is None:
            totals.append(_row(r, Row))
        else:
            series.append(_row(r, Point))
    order = {d: i for i, d in enumerate(DIMENSIONS)}
    totals.sort(key=lambda r: (order[r.dimension], r.key))
    series.sort(key=lambda p: (order[p.dimension], p.key, p.start_ns))
    overall = next((r for r in totals if r.dimension == "all"), None) or _empty_row()
    from ._url import redact

    return Stats(
        # Printed in the report and the summary: never with a password.
        data_dir=redact(data_dir), since_ns=since_ns, until_ns=until_ns, bucket_s=bucket_s,
        generated_at_ns=time.time_ns(), totals=overall, rows=[r for r in totals if r.dimension != "all"],
        series=series, spark_s=time.monotonic() - started,
    )


_COUNTS: Final = ("events", "notifications", "confirmations", "retries", "dead_letters", "dropped", "pending")


def _facts(fr: Frames, bucket_ns: int) -> Any:
    """One narrow frame of everything counted: a row per fact with its time ``t``.

    Events, by far the most rows (every archived one), are counted per namespace,
    publisher and bucket first (Spark's partial aggregation, next to the Parquet scan),
    so a fact stands for the events of one bucket (``t`` its start) and the fan-out over
    dimensions below handles thousands of rows, not millions.

    Columns ``namespace, source, subscriber, t``, a 0/1 (or retries) column per count of
    :data:`_COUNTS`, and ``latency_ms`` (confirmed outcomes only). An outcome gives two
    facts, on two time axes: when it was settled (confirmation, dead letter, dropped,
    retries, latency) and when its notification was recorded (a notification).
    """
    from pyspark.sql import functions as F

    def fact(t: Any, subscriber: Any = None, latency: Any = None, **counts: Any) -> Any:
        return F.struct(
            t.alias("t"),
            (F.lit(None).cast("string") if subscriber is None else subscriber).alias("subscriber"),
            *[(counts.get(c, F.lit(0))).cast("long").alias(c) for c in _COUNTS],
            (F.lit(None).cast("double") if latency is None else latency).alias("latency_ms"),
        )

    outcome = F.col("outcome")
    confirmed, dead = outcome == "confirmed", outcome == "dead"
    ts = F.col("timestamp")
    per_bucket = fr.events.groupBy("namespace", "source", (ts - F.pmod(ts, F.lit(bucket_ns))).alias("t0")).agg(
        F.count(F.lit(1)).alias("n")
    )
    events = per_bucket.select(
        "namespace", "source", F.explode(F.array(fact(F.col("t0"), events=F.col("n")))).alias("f")
    )
    outcomes = fr.outcomes.select(
        "namespace", "source",
        F.explode(F.array(
            fact(F.col("settled_at"), F.col("subscriber"),
                 # A replayed event may be months old: its age says nothing about delivery.
                 F.when(confirmed & ~F.col("replay"), (F.col("settled_at") - F.col("event_timestamp")) / 1e6),
                 confirmations=confirmed, dead_letters=dead, dropped=outcome == "dropped",
                 retries=F.when(confirmed | dead, F.greatest(F.col("attempts") - 1, F.lit(0))).otherwise(0)),
            # A dropped dead letter was recorded once already, as dead; a redriven one counts again.
            fact(F.when(outcome != "dropped", F.col("created_at")), F.col("subscriber"), notifications=F.lit(1)),
        )).alias("f"),
    )
    pending = fr.pending.select(
        "namespace", "source",
        F.explode(F.array(fact(F.col("created_at"), F.col("subscriber"), notifications=F.lit(1), pending=F.lit(1))))
        .alias("f"),
    )
    return events.unionByName(outcomes).unionByName(pending).select("namespace", "source", "f.*").where(
        F.col("t").isNotNull()
    )


def _aggregate(base: Any, *, bucket_ns: int) -> Any:
    """One row per (dimension, key, start_ns) with every figure; ``start_ns`` null: the totals.

    One pass over the facts: each fact counts once for its bucket and once for the
    totals, so the sources are read once and shuffled once.
    """
    from pyspark.sql import functions as F

    keys = {"all": F.lit(""), "publication": F.col("namespace"), "publisher": F.col("source"),
            "subscriber": F.col("subscriber")}
    pairs = F.array(*[F.struct(F.lit(d).alias("dimension"), k.alias("key")) for d, k in keys.items()])
    # Events have no subscriber, so they drop out of that dimension here.
    rows = base.withColumn("_k", F.explode(pairs)).where(F.col("_k.key").isNotNull())
    t = F.col("t")
    rows = rows.withColumn("start_ns", F.explode(F.array(F.lit(None).cast("long"), t - F.pmod(t, F.lit(bucket_ns)))))
    return rows.groupBy(F.col("_k.dimension").alias("dimension"), F.col("_k.key").alias("key"), "start_ns").agg(
        *[F.sum(c).alias(c) for c in _COUNTS],
        F.percentile_approx("latency_ms", list(QUANTILES)).alias("latency"),
    )


def _row(r: Any, cls: type[Row]) -> Any:
    latency = r["latency"] or [None] * len(QUANTILES)
    fields: dict[str, Any] = {
        "dimension": r["dimension"], "key": r["key"],
        "events": None if r["dimension"] == "subscriber" else int(r["events"] or 0),
        "notifications": int(r["notifications"] or 0), "confirmations": int(r["confirmations"] or 0),
        "retries": int(r["retries"] or 0), "dead_letters": int(r["dead_letters"] or 0),
        "dropped": int(r["dropped"] or 0), "pending": int(r["pending"] or 0),
        "p50_ms": latency[0], "p90_ms": latency[1], "p99_ms": latency[2],
    }
    if cls is Point:
        fields["start_ns"] = int(r["start_ns"])
    return cls(**fields)


def _empty_row() -> Row:
    return Row(dimension="all", key="", events=0, notifications=0, confirmations=0, retries=0, dead_letters=0,
               dropped=0, pending=0, p50_ms=None, p90_ms=None, p99_ms=None)
