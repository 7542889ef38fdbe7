"""``tidings pipeline ...``: the archive and Spark jobs from the command line.

::

    tidings pipeline archive [--data-dir D] [--archive-dir A] [--older-than 30d] [--namespace NS ...]
                             [--no-trim] [--no-retention] [--workers N] [--chunk-size N]
                             [--keep-deliveries 30d] [--master URL]
    tidings pipeline expire  [--data-dir D] [--archive-dir A] [--keep-deliveries 30d]
    tidings pipeline compact [--archive-dir A] [--min-files 2]
    tidings pipeline vacuum  [--data-dir D]
    tidings pipeline stats   [--data-dir D] [--archive-dir A] [--out report.html] [--since 24h]
                             [--bucket 1h] [--master URL]

``--data-dir`` is the server's data folder (its ``tidings.db``) or the PostgreSQL address
of a ``tidings serve --store postgresql://...`` (default: ``TIDINGS_STORE`` if that is
one, else ``TIDINGS_DATA_DIR``, else ``./var``); a PostgreSQL store's archive defaults
to ``TIDINGS_ARCHIVE_DIR``, else ``<TIDINGS_DATA_DIR>/archive``, where its server's
replays look. Addresses are printed without their password.

``archive`` moves old events into the Parquet archive (worker processes and pyarrow;
with ``--master``, Spark tasks on a cluster write the same files), trims the hot log and
gives its free pages back, then applies the registry's
retention to the archive and to the delivery records; ``expire`` only applies retention;
``compact`` merges small archive files; ``vacuum`` converts an older SQLite store to
incremental vacuum and gives its free pages back, or runs ``VACUUM (ANALYZE)`` on the
PostgreSQL tables the pipeline trims, and reports their sizes before and after.
``stats`` (Spark) computes the delivery statistics and writes their HTML report
(:mod:`tidings.pipeline.stats_cli`); its ``--master`` runs on a cluster (``spark://...``,
``yarn``, ``k8s://...``) or, as ``sc://host:port``, through Spark Connect; the default is
``local[*]``. All print a JSON summary on stdout and their progress on stderr; an error
is one line on stderr starting with its code and ending with what to do (exit status 2).

Wired into ``tidings`` by :func:`add_pipeline_parser` and :func:`run_pipeline`; also
runnable alone as ``python -m tidings.pipeline``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import TidingsError
from .errors import PipelineError

__all__ = ["add_archive_parser", "add_pipeline_parser", "main", "parse_duration", "run_archive", "run_pipeline"]

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
KEEP_DELIVERIES = "30d"
"""How long delivery records (what the statistics job reads) are kept by default."""


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``12h``, ``30d`` or ``2w``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 3600, 90m, 12h, 30d)")
    return float(m[1]) * _UNITS[m[2]]


def add_pipeline_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``pipeline`` and its actions to ``tidings``' subparsers; returns the ``pipeline`` parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "pipeline", help="archive the log to Parquet, retention, compaction, statistics (Spark)"
    )
    sub = p.add_subparsers(dest="pipeline_action", required=True)
    common = _common()

    _archive_arguments(sub.add_parser("archive", parents=[common], help="move old events to the Parquet archive"))
    _maintenance_parsers(sub, common)

    s = sub.add_parser("stats", parents=[common], help="delivery statistics and an HTML report")
    s.add_argument("--out", type=Path, default=Path("tidings-stats.html"),
                   help="the HTML report to write (default ./tidings-stats.html)")
    s.add_argument("--since", type=parse_duration, help="only the last ... (e.g. 24h, 7d; default everything kept)")
    s.add_argument("--bucket", default="1h", help="time-series bucket (e.g. 5m, 1h, 1d; default 1h)")
    s.add_argument("--master", help="Spark master or Spark Connect URL sc://HOST:PORT (default local[*])")
    s.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def _common(*, inner: bool = False) -> argparse.ArgumentParser:
    """The folder options. ``inner``: for an action under ``tidings archive``, which has them
    too: given after the action they count, and left out they keep the outer value."""
    common = argparse.ArgumentParser(add_help=False)
    default: Any = argparse.SUPPRESS if inner else None
    common.add_argument("--data-dir", type=store_location, default=default,
                        help="store folder, or the server's postgresql:// address "
                             "(default: TIDINGS_STORE if PostgreSQL, else ./var or TIDINGS_DATA_DIR)")
    common.add_argument("--archive-dir", type=Path, default=default,
                        help="Parquet archive (default <data-dir>/archive)")
    return common


def _archive_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("--older-than", type=parse_duration, default=parse_duration("7d"),
                   help="archive events older than this (seconds, or 90m, 12h, 30d; default 7d)")
    a.add_argument("--namespace", action="append", help="only this namespace (repeatable)")
    a.add_argument("--no-trim", action="store_true", help="leave archived events in the hot log")
    a.add_argument("--no-retention", action="store_true", help="do not expire archive partitions")
    a.add_argument("--workers", type=int, help="worker processes that write Parquet (default: one per core)")
    a.add_argument("--master", help="run the staging as a Spark job: spark://HOST:7077, local[N], yarn, k8s://..., "
                                    "or Spark Connect sc://HOST:PORT (default: worker processes on this machine)")
    a.add_argument("--chunk-size", type=int, default=250_000, help="ids per worker task (default 250,000)")
    a.add_argument("--quiet", action="store_true", help="no progress on stderr")
    a.add_argument("--keep-deliveries", type=parse_duration, default=parse_duration(KEEP_DELIVERIES),
                   help=f"delete delivery records older than this (default {KEEP_DELIVERIES})")


def _maintenance_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    e = sub.add_parser("expire", parents=[common], help="delete archive partitions past their retention")
    e.add_argument("--keep-deliveries", type=parse_duration, default=parse_duration(KEEP_DELIVERIES),
                   help=f"delete delivery records older than this (default {KEEP_DELIVERIES})")

    c = sub.add_parser("compact", parents=[common], help="merge each archive date partition's files into one")
    c.add_argument("--min-files", type=int, default=2, help="merge partitions with at least this many files")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")

    v = sub.add_parser("vacuum", parents=[common],
                       help="SQLite: switch an older store to incremental vacuum (rewrites the file; stop the "
                            "server first); PostgreSQL: VACUUM (ANALYZE) the tables the pipeline trims")
    v.add_argument("--quiet", action="store_true", help="no progress on stderr")


def add_archive_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``tidings archive [options]`` runs the archive job; ``tidings archive compact|expire|vacuum``
    the maintenance actions: the same as ``tidings pipeline archive``, ``... compact`` and so on."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "archive", parents=[_common()], help="archive the log to Parquet (or: archive compact|expire|vacuum)"
    )
    _archive_arguments(p)
    _maintenance_parsers(p.add_subparsers(dest="archive_action", required=False), _common(inner=True))
    return p


def run_archive(args: argparse.Namespace) -> int:
    """Run what :func:`add_archive_parser` parsed."""
    args.pipeline_action = args.archive_action or "archive"
    return run_pipeline(args)


def store_location(text: str) -> Path | str:
    """``--data-dir``: a PostgreSQL address stays text (a ``Path`` would fold its ``//``)."""
    from ._url import is_pg_url

    return text if is_pg_url(text) else Path(text)


def _locations(args: argparse.Namespace) -> tuple[Path | str, Path]:
    """The hot log (data dir or PostgreSQL address) and the archive the action works on."""
    from ..settings import Settings
    from ._backend import archive_root
    from ._url import is_pg_url

    if isinstance(args.data_dir, str):
        return args.data_dir, args.archive_dir or archive_root(args.data_dir, None)
    settings = Settings.from_env(data_dir=args.data_dir)
    if args.data_dir is None and is_pg_url(settings.store):
        return settings.store, args.archive_dir or archive_root(settings.store, None)
    return settings.data_dir, args.archive_dir or settings.data_dir / "archive"


def run_pipeline(args: argparse.Namespace) -> int:
    """Run the action parsed by :func:`add_pipeline_parser`; the exit status."""
    try:
        data_dir, archive_dir = _locations(args)
        if args.pipeline_action == "expire":
            from .archive import expire

            gone = expire(data_dir=data_dir, archive_dir=archive_dir)
            trimmed = _trim_deliveries(data_dir, args.keep_deliveries)
            _emit({"expired": [dataclasses.asdict(g) for g in gone], "deliveries_trimmed": trimmed})
            return 0
        if args.pipeline_action == "compact":
            from .compact import compact

            done = compact(archive_dir, min_files=args.min_files,
                           progress=lambda m: None if args.quiet else print(m, file=sys.stderr, flush=True))
            _emit({"compacted": [dataclasses.asdict(x) for x in done]})
            return 0
        if args.pipeline_action == "vacuum":
            from ._backend import hot_log

            with hot_log(data_dir).connect(write=True) as conn:
                sizes = conn.vacuum()
            out: dict[str, Any] = {"store_bytes": [sizes.before, sizes.after]}
            if sizes.relations:
                out["relations"] = {k: list(v) for k, v in sizes.relations.items()}
            _emit(out)
            return 0
        if args.pipeline_action == "stats":
            from .stats_cli import run_stats

            return run_stats(args, data_dir, archive_dir)
        return _archive(args, data_dir, archive_dir)
    except PipelineError as e:
        print(e.line(), file=sys.stderr)
        return 2
    except TidingsError as e:
        print(f"{getattr(e, 'code', 'error')}: {e}", file=sys.stderr)
        return 2


def _archive(args: argparse.Namespace, data_dir: Path | str, archive_dir: Path) -> int:
    from ._human import fmt_count, fmt_rate, fmt_seconds
    from .archive import archive, expire

    started = time.monotonic()
    now_ns = time.time_ns()  # --older-than counts from the command's start

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:7.1f} s] {msg}", file=sys.stderr, flush=True)

    master = getattr(args, "master", None)
    sessions: list[Any] = []
    if master is not None:
        from ._backend import hot_log
        from .session import reach_master, shown_master

        hot_log(data_dir).check()  # no store: say so before Spark takes seconds to start
        reach_master(master, _connect_timeout())  # before the plan: an unreachable master changes nothing

        def spark() -> Any:
            from .session import build

            progress(f"starting Spark on {shown_master(master)}")
            # Plain PySpark workers: the archive's tasks import tidings themselves, so an
            # executor without it fails with a message that names it.
            conf = {} if master.startswith("sc://") else {"spark.python.daemon.module": "pyspark.daemon"}
            sessions.append(build(master, app_name="tidings-archive", conf=conf))
            with contextlib.suppress(Exception):  # Spark Connect: the server's logs are its own
                # A failed task is reported once, as one line (_spark_stage.explain), not as
                # Spark's stack traces of every attempt.
                sessions[-1].sparkContext.setLogLevel("OFF")
            return sessions[-1]
    try:
        run = archive(
            data_dir=data_dir, archive_dir=archive_dir, older_than_s=args.older_than, now_ns=now_ns,
            namespaces=args.namespace, trim=not args.no_trim, workers=args.workers, chunk_size=args.chunk_size,
            progress=progress, spark=spark if master is not None else None,
        )
    finally:
        for session in sessions:
            session.stop()
    gone = [] if args.no_retention else expire(data_dir=data_dir, archive_dir=archive_dir, now_ns=now_ns)
    trimmed = 0 if args.no_retention else _trim_deliveries(data_dir, args.keep_deliveries)
    rate = run.events / run.total_s if run.total_s else 0.0
    progress(f"archived {fmt_count(run.events)} events in {fmt_seconds(run.total_s)} ({fmt_rate(rate)})")
    _emit({
        "before": run.before, "events": run.events, "stage_s": round(run.stage_s, 3),
        "spark_s": round(run.spark_s, 3), "trim_s": round(run.trim_s, 3),
        "total_s": round(run.total_s, 3), "namespaces": [dataclasses.asdict(n) for n in run.namespaces],
        "store_bytes": list(run.store_bytes) if run.store_bytes else None,
        "expired": [dataclasses.asdict(g) for g in gone], "deliveries_trimmed": trimmed,
    })
    return 0


def _connect_timeout() -> float:
    from ..core.addresses import CONNECT_TIMEOUT_ENV, connect_timeout_s

    try:
        return connect_timeout_s(os.environ)
    except ValueError as e:
        raise PipelineError(str(e), code="invalid_option", hint=f"set {CONNECT_TIMEOUT_ENV} to seconds") from None


def _trim_deliveries(data_dir: Path | str, keep_s: float) -> int:
    from ._backend import hot_log

    with hot_log(data_dir).connect(write=True) as conn:
        return conn.trim_deliveries(time.time_ns() - int(keep_s * 1e9))


def _emit(obj: Any) -> None:
    print(json.dumps(obj, indent=2))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tidings.pipeline ACTION ...``: the same as ``tidings pipeline ACTION ...``."""
    parser = argparse.ArgumentParser(prog="python -m tidings.pipeline")
    sub = parser.add_subparsers(dest="command", required=True)
    add_pipeline_parser(sub)
    args = parser.parse_args(["pipeline", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run_pipeline(args)
    except KeyboardInterrupt:
        return 130
