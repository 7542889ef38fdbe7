"""The archive job: old events move from the hot log into Parquet, exactly once.

A run, per namespace, with ``hwm`` its high-water mark in the manifest (docs/pipeline.md):

1. delete files a killed run left behind (their ``lo`` is above ``hwm``) and the staging folder;
2. plan ``(hwm, X]``: the longest prefix of the chain after ``hwm`` that is older than
   the threshold;
3. worker processes read those ranges from the hot log (SQLite or PostgreSQL,
   :mod:`tidings.pipeline._hotlog`) into Arrow tables, in chunks of
   ``chunk_size`` ids, and write typed Parquet into this run's staging folder,
   partitioned by namespace and date (:mod:`tidings.pipeline._arrow`); or, given a
   SparkSession, Spark tasks do the same chunks on executors
   (:mod:`tidings.pipeline._spark_stage`; same files, same names);
4. each staged file is fsynced and renamed to its place, named after the run's range;
5. the manifest, with ``hwm = X``, is replaced atomically: from here on the events are archived;
6. only then the hot log is trimmed up to ``X`` (the store's rules: rows still owed to
   subscribers and the log's last row stay), in short batches, and its space is made
   reusable (SQLite: free pages go back to the filesystem; PostgreSQL: ``VACUUM (ANALYZE)``).

A kill before 5 leaves the manifest as it was: step 1 of the next run removes what was
moved, and the range is archived again. A kill after 5 leaves rows in the hot log that
are also archived: readers take ids up to ``hwm`` from the archive only, and the next
run trims them. So at any moment, archive (ids ``<= hwm``) plus hot log (ids ``> hwm``) holds
every event once.

:func:`expire` applies the schema registry's retention to the archive: a date
partition goes once the whole day is older than now minus the namespace's ``retention_s``.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from . import _arrow, layout
from ._backend import hot_log
from ._hotlog import HotLog, IdRange
from ._human import fmt_bytes, fmt_count
from .layout import Manifest, NamespaceState

__all__ = ["ArchiveRun", "ArchivedNamespace", "ExpiredPartition", "archive", "expire"]

DAY_NS: Final = 86_400 * 10**9
CRASH_ENV: Final = "TIDINGS_PIPELINE_CRASH_AT"
"""Test hook: the name of a step at which the job kills itself (SIGKILL)."""
SMALL_RUN: Final = 100_000
"""Ids below which a run stages in its own process (unless ``workers`` is given)."""
CHUNK_SIZE: Final = 250_000
"""Ids per staging task (a worker process reads, converts and writes one chunk at a time)."""

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
    stage_s: float = 0.0
    """Seconds spent reading the hot log and writing the staged Parquet (the worker processes,
    or the Spark job: its executors' allocation included, the session's start not)."""
    spark_s: float = 0.0
    """Seconds starting the SparkSession (0 without ``spark``)."""
    trim_s: float = 0.0
    """Seconds spent trimming the hot log (and giving its free pages back)."""
    store_bytes: tuple[int, int] | None = None
    """The store's size in bytes before and after its space was reclaimed (None: not run):
    SQLite's file and WAL, PostgreSQL's events table (``pg_total_relation_size``)."""
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
    *,
    data_dir: str | Path | HotLog,
    archive_dir: str | Path,
    older_than_s: float,
    now_ns: int | None = None,
    namespaces: Sequence[str] | None = None,
    trim: bool = True,
    workers: int | None = None,
    chunk_size: int = CHUNK_SIZE,
    progress: Progress = _quiet,
    spark: Callable[[], Any] | None = None,
) -> ArchiveRun:
    """Archive the events older than ``older_than_s`` seconds; see the module docstring.

    ``data_dir`` is a data dir, its ``tidings.db``, or a PostgreSQL address (or a
    :class:`~tidings.pipeline._hotlog.HotLog`). ``workers`` processes (default: one per
    core) stage chunks of ``chunk_size`` ids.
    With ``trim=False`` the hot log is left as it is (the next run with trimming catches up).
    ``spark`` (a function giving a SparkSession, called only when there is something to
    archive) stages the chunks as Spark tasks instead of worker processes; the hot log
    and the archive must then be at the same addresses on the executors.
    Raises :class:`~tidings.pipeline.errors.PipelineError` ``archive_busy`` if another run holds the archive.
    """
    started = time.monotonic()
    root = Path(archive_dir)
    now = time.time_ns() if now_ns is None else now_ns
    before = now - int(older_than_s * 1e9)
    log = hot_log(data_dir)
    log.check()  # no store, no archive folder made
    with layout.lock(root):
        manifest = Manifest.load(root)
        _clean(root, manifest, progress)
        with log.connect() as conn:
            names = conn.namespaces() if namespaces is None else sorted(namespaces)
            plan = []
            for ns in names:
                hwm = manifest.hwm(ns)
                upto = conn.archivable_upto(ns, hwm, before)
                if upto > hwm:
                    plan.append(IdRange(ns, hwm + 1, upto))
            counts = {r.namespace: conn.count_range(r.namespace, r.lo, r.hi) for r in plan}
        progress(f"archiving {sum(counts.values())} events of {len(plan)} namespaces (before {before})")
        stage_s = trim_s = spark_s = 0.0
        files: dict[str, int] = {}
        if plan:
            # A folder of this run's own: a task of a killed run still writing cannot mix in.
            staging = root / layout.META / "staging" / f"run-{now}-{os.getpid()}"
            chunks = _chunks(log.location, plan, staging, chunk_size)
            session = None
            if spark is not None:
                t = time.monotonic()
                session = spark()
                spark_s = time.monotonic() - t
            t = time.monotonic()
            try:
                if session is not None:
                    from ._spark_stage import stage_on_spark

                    progress(f"staging {len(chunks)} chunks as Spark tasks")
                    stage_on_spark(session, chunks)
                else:
                    _stage(chunks, sum(counts.values()), workers)
            except BaseException:
                shutil.rmtree(root / layout.META / "staging", ignore_errors=True)
                raise
            stage_s = time.monotonic() - t
            progress(f"staged {fmt_count(sum(counts.values()))} events as Parquet in {stage_s:.1f} s")
            _crash_point("staged")
            files = _publish(root, staging, plan, progress)
            for r in plan:
                manifest.namespaces[r.namespace] = NamespaceState(hwm=r.hi, archived_at=now)
            manifest.save(root)
            _crash_point("durable")
            shutil.rmtree(root / layout.META / "staging", ignore_errors=True)
        trimmed: dict[str, int] = {}
        reclaimed: tuple[int, int] | None = None
        t = time.monotonic()
        if trim:
            with log.connect(write=True) as conn:
                for ns, state in sorted(manifest.namespaces.items()):
                    trimmed[ns] = conn.trim_archived(ns, state.hwm)
                    if trimmed[ns]:
                        progress(f"trimmed {trimmed[ns]} rows of {ns} up to id {state.hwm}")
                    _crash_point("trimming")
            progress(f"trimmed {fmt_count(sum(trimmed.values()))} archived rows from the hot log")
            with log.connect(write=True) as conn:
                sizes = conn.reclaim()
            if sizes is None:
                progress("the store's file keeps its free pages (created without incremental vacuum): "
                         "run `tidings pipeline vacuum` once while the server is stopped")
            else:
                progress(f"store {fmt_bytes(sizes[0])} -> {fmt_bytes(sizes[1])}")
                reclaimed = sizes
        trim_s = time.monotonic() - t
    done = [
        ArchivedNamespace(
            namespace=r.namespace, from_id=r.lo, to_id=r.hi, events=counts[r.namespace],
            files=files.get(r.namespace, 0), trimmed=trimmed.get(r.namespace, 0),
        )
        for r in plan
    ]
    return ArchiveRun(
        before=before, namespaces=done, stage_s=stage_s, spark_s=spark_s, trim_s=trim_s, store_bytes=reclaimed,
        total_s=time.monotonic() - started,
    )


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


Chunk = tuple[str, str, int, int, str, str]
"""``stage_chunk``'s arguments: location, namespace, lo, hi, staging folder, file tag."""


def _chunks(location: str, plan: list[IdRange], staging: Path, chunk_size: int) -> list[Chunk]:
    """The staging tasks: ``stage_chunk``'s arguments, ``chunk_size`` ids each."""
    return [
        (location, r.namespace, lo, min(r.hi, lo + chunk_size - 1), str(staging), f"{lo:020d}")
        for r in plan
        for lo in range(r.lo, r.hi + 1, chunk_size)
    ]


def _stage(chunks: list[Chunk], events: int, workers: int | None) -> None:
    """Write the chunks into staging, in worker processes."""
    n = min(len(chunks), max(1, workers or os.cpu_count() or 1))
    if workers is None and events < SMALL_RUN:
        n = 1  # starting worker processes would cost more than they save
    if n == 1:
        for c in chunks:
            _arrow.stage_chunk(*c)
        return
    # spawn: the caller may hold threads (a Spark gateway, an event loop) a fork would copy half-way.
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"), initializer=_die_with_parent,
                             initargs=(os.getpid(), os.environ.get(CRASH_ENV) == "staging")) as pool:
        for f in [pool.submit(_arrow.stage_chunk, *c) for c in chunks]:
            f.result()


PR_SET_PDEATHSIG: Final = 1


def _die_with_parent(parent: int, crash: bool = False) -> None:
    """A worker's initializer: the kernel kills it when the job's process dies (SIGKILL
    included), so no worker outlives a killed job; and with them gone, the pipe that keeps
    multiprocessing's resource tracker alive closes, and it exits too."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to ask for
        pass
    if os.getppid() != parent:  # the job died before the request was made
        os._exit(1)
    if crash:  # the test hook: the job is killed while its workers stage
        os.kill(parent, signal.SIGKILL)


def _publish(root: Path, staging: Path, plan: list[IdRange], progress: Progress) -> dict[str, int]:
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


def expire(*, data_dir: str | Path | HotLog, archive_dir: str | Path, now_ns: int | None = None,
           ) -> list[ExpiredPartition]:
    """Delete the archive's date partitions whose whole day is past their namespace's retention.

    Retention is read from the schema registry in the store (``Session.retention_of``);
    namespaces without one keep their archive for ever. A partition is renamed away
    (atomic) before its files are deleted, so readers never see half of one.
    """
    root = Path(archive_dir)
    now = time.time_ns() if now_ns is None else now_ns
    gone: list[ExpiredPartition] = []
    with hot_log(data_dir).connect() as conn, layout.lock(root):
        trash = root / layout.META / "trash"
        for ns, ns_dir in layout.namespace_dirs(root):
            keep_s = conn.retention_of(ns)
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
