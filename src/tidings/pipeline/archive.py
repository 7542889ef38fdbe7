"""The archive job: old events move from the hot log into Parquet, exactly once.

A run, per namespace, with ``hwm`` its high-water mark in the manifest (docs/pipeline.md):

1. delete files a killed run left behind (their ``lo`` is above ``hwm``) and the staging folder;
2. plan ``(hwm, X]``: the longest prefix of the chain after ``hwm`` that is older than
   the threshold;
3. Spark reads those ranges through the ``tidings`` source and writes Parquet into staging,
   partitioned by namespace and date;
4. each staged file is fsynced and renamed to its place, named after the run's range;
5. the manifest, with ``hwm = X``, is replaced atomically: from here on the events are archived;
6. only then the hot log is trimmed up to ``X`` (the store's rules: rows still owed to
   subscribers and the log's last row stay).

A kill before 5 leaves the manifest as it was: step 1 of the next run removes what was
moved, and the range is archived again. A kill after 5 leaves rows in the hot log that
are also archived: readers take ids up to ``hwm`` from the archive only, and the next
run trims them. So at any moment, archive (ids ``<= hwm``) plus hot log (ids ``> hwm``) holds
every event once.

:func:`expire` applies the schema registry's retention to the archive: a date
partition goes once the whole day is older than now minus the namespace's ``retention_s``.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import msgspec

from . import _sqlite, layout
from .layout import Manifest, NamespaceState

__all__ = ["ArchiveRun", "ArchivedNamespace", "ExpiredPartition", "archive", "expire"]

DAY_NS: Final = 86_400 * 10**9
CRASH_ENV: Final = "TIDINGS_PIPELINE_CRASH_AT"
"""Test hook: the name of a step at which the job kills itself (SIGKILL)."""
STAGING_COLUMNS: Final = "seq long, namespace string, id long, prev_id long, timestamp long, source string, " \
    "headers string, data string"

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivedNamespace:
    namespace: str
    from_id: int
    """First id of the range moved by this run (the previous mark + 1)."""
    to_id: int
    """Last id moved; the new high-water mark."""
    events: int
    files: int
    trimmed: int
    """Hot-log rows deleted (this run's and any a killed run left)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveRun:
    before: int
    """UTC ns: events stamped earlier were eligible."""
    namespaces: list[ArchivedNamespace] = field(default_factory=list)
    spark_s: float = 0.0
    """Seconds spent in the Spark job (reading the hot log, writing Parquet)."""
    total_s: float = 0.0

    @property
    def events(self) -> int:
        return sum(n.events for n in self.namespaces)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiredPartition:
    namespace: str
    date: str


def _crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _quiet(_: str) -> None:
    pass


def archive(
    spark: Any,
    *,
    data_dir: str | Path,
    archive_dir: str | Path,
    older_than_s: float,
    now_ns: int | None = None,
    namespaces: Sequence[str] | None = None,
    trim: bool = True,
    partition_size: int = 1_000_000,
    progress: Progress = _quiet,
) -> ArchiveRun:
    """Archive the events older than ``older_than_s`` seconds; see the module docstring.

    ``spark`` has the ``tidings`` source registered (:func:`tidings.pipeline.session.build`).
    With ``trim=False`` the hot log is left as it is (the next run with trimming catches up).
    Raises :class:`~tidings.pipeline.errors.PipelineError` ``archive_busy`` if another run holds the archive.
    """
    started = time.monotonic()
    root = Path(archive_dir)
    now = time.time_ns() if now_ns is None else now_ns
    before = now - int(older_than_s * 1e9)
    with _sqlite.connect(data_dir):  # no store, no archive folder made
        pass
    with layout.lock(root):
        manifest = Manifest.load(root)
        _clean(root, manifest, progress)
        with _sqlite.connect(data_dir) as conn:
            names = _sqlite.namespaces(conn) if namespaces is None else sorted(namespaces)
            plan = []
            for ns in names:
                hwm = manifest.hwm(ns)
                upto = _sqlite.archivable_upto(conn, ns, hwm, before)
                if upto > hwm:
                    plan.append(_sqlite.IdRange(ns, hwm + 1, upto))
            counts = {
                r.namespace: conn.execute(
                    "SELECT COUNT(*) FROM events WHERE namespace = ? AND id BETWEEN ? AND ?", (r.namespace, r.lo, r.hi)
                ).fetchone()[0]
                for r in plan
            }
        progress(f"archiving {sum(counts.values())} events of {len(plan)} namespaces (before {before})")
        spark_s = 0.0
        files: dict[str, int] = {}
        if plan:
            staging = root / layout.META / "staging"
            t = time.monotonic()
            # At least one task per core, so a run smaller than cores x partition_size still spreads.
            size = max(1_000, min(partition_size, -(-sum(counts.values()) // _parallelism(spark))))
            _stage(spark, data_dir, plan, staging, size)
            spark_s = time.monotonic() - t
            progress(f"Spark wrote the staged Parquet in {spark_s:.1f} s")
            _crash_point("staged")
            files = _publish(root, staging, plan, progress)
            for r in plan:
                manifest.namespaces[r.namespace] = NamespaceState(hwm=r.hi, archived_at=now)
            manifest.save(root)
            _crash_point("durable")
            shutil.rmtree(staging, ignore_errors=True)
        trimmed: dict[str, int] = {}
        if trim:
            with _sqlite.connect(data_dir, write=True) as conn:
                for ns, state in sorted(manifest.namespaces.items()):
                    trimmed[ns] = _sqlite.trim_archived(conn, ns, state.hwm)
                    if trimmed[ns]:
                        progress(f"trimmed {trimmed[ns]} rows of {ns} up to id {state.hwm}")
                    _crash_point("trimming")
            progress(f"trimmed {sum(trimmed.values())} archived rows from the hot log")
    done = [
        ArchivedNamespace(
            namespace=r.namespace, from_id=r.lo, to_id=r.hi, events=counts[r.namespace],
            files=files.get(r.namespace, 0), trimmed=trimmed.get(r.namespace, 0),
        )
        for r in plan
    ]
    return ArchiveRun(before=before, namespaces=done, spark_s=spark_s, total_s=time.monotonic() - started)


def _parallelism(spark: Any) -> int:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        return max(1, int(spark.conf.get("spark.default.parallelism", "2")))


def _clean(root: Path, manifest: Manifest, progress: Progress) -> None:
    """Remove what a killed run left: its staging folder and files above the marks."""
    shutil.rmtree(root / layout.META / "staging", ignore_errors=True)
    for ns, ns_dir in layout.namespace_dirs(root):
        hwm = manifest.hwm(ns)
        for _, d in layout.date_dirs(ns_dir):
            for f in d.iterdir():
                parsed = layout.parse_file_name(f.name)
                if parsed is not None and parsed[0] > hwm:
                    progress(f"removing {f.relative_to(root)}, left by an unfinished run")
                    f.unlink()


def _stage(spark: Any, data_dir: str | Path, plan: list[_sqlite.IdRange], staging: Path, size: int) -> None:
    from pyspark.sql import functions as F

    df = (
        spark.read.format("tidings")
        .schema(STAGING_COLUMNS)
        .option("ranges", msgspec.json.encode(plan).decode())
        .option("partitionSize", str(size))
        .load(str(data_dir))
    )
    day = F.floor(F.col("timestamp") / F.lit(DAY_NS)).cast("int")
    (
        df.withColumn("date", F.date_from_unix_date(day))
        .sortWithinPartitions("namespace", "date", "id")
        .write.mode("overwrite")
        .partitionBy("namespace", "date")
        .parquet(str(staging))
    )


def _publish(root: Path, staging: Path, plan: list[_sqlite.IdRange], progress: Progress) -> dict[str, int]:
    """Move the staged files to their places, durably; the number of files per namespace."""
    ranges = {r.namespace: r for r in plan}
    moved: dict[str, int] = {}
    dirs: set[Path] = set()
    for ns, ns_stage in layout.namespace_dirs(staging):
        r = ranges[ns]
        for day, d in layout.date_dirs(ns_stage):
            staged = sorted(f for f in d.iterdir() if f.name.endswith(".parquet"))
            dest = layout.namespace_dir(root, ns) / f"date={day}"
            if not dest.exists():
                dest.mkdir(parents=True)
                dirs.update((dest.parent, root))
            dirs.add(dest)
            for k, f in enumerate(staged):
                layout.fsync_file(f)
                os.replace(f, dest / layout.file_name(r.lo, r.hi, k))
                moved[ns] = moved.get(ns, 0) + 1
                _crash_point("moving")
    for d in sorted(dirs):
        layout.fsync_dir(d)
    progress(f"moved {sum(moved.values())} Parquet files into the archive")
    return moved


def expire(*, data_dir: str | Path, archive_dir: str | Path, now_ns: int | None = None) -> list[ExpiredPartition]:
    """Delete the archive's date partitions whose whole day is past their namespace's retention.

    Retention is read from the schema registry in the store (``_sqlite.retention_of``);
    namespaces without one keep their archive for ever. A partition is renamed away
    (atomic) before its files are deleted, so readers never see half of one.
    """
    root = Path(archive_dir)
    now = time.time_ns() if now_ns is None else now_ns
    gone: list[ExpiredPartition] = []
    with _sqlite.connect(data_dir) as conn, layout.lock(root):
        trash = root / layout.META / "trash"
        for ns, ns_dir in layout.namespace_dirs(root):
            keep_s = _sqlite.retention_of(conn, ns)
            if keep_s is None:
                continue
            cutoff = datetime.fromtimestamp((now - keep_s * 10**9) / 1e9, UTC).date()
            for day, d in layout.date_dirs(ns_dir):
                if date.fromisoformat(day) + timedelta(days=1) <= cutoff:
                    trash.mkdir(parents=True, exist_ok=True)
                    target = trash / f"{ns_dir.name}-{d.name}-{time.time_ns()}"
                    os.replace(d, target)
                    shutil.rmtree(target)
                    gone.append(ExpiredPartition(namespace=ns, date=day))
    return gone
