"""Class data sharing for the driver's JVM: Spark's classes loaded once, then mapped.

A local Spark session spends most of its start in the JVM loading and verifying some
twenty thousand classes. The JDK can write the classes a run loaded into an archive when
it exits (``-XX:ArchiveClassesAtExit``) and map that archive in later runs
(``-XX:SharedArchiveFile``): on this machine the session's start fell from 8.6-13.9 s to
about 5 s (docs/benchmarks/history/2026-11-25-pipeline-3-native-encoder.md). The archive
(about 150 MB) lives in the user's
cache directory, one per PySpark version and Java installation; the JDK ignores an
archive that does not match, or that a concurrent first run has not finished writing,
and starts as it would without one; an archive it cannot start with (cut short by a
full disk, say) is removed and the session started without it
(:func:`tidings.pipeline.session.build`). ``TIDINGS_SPARK_CDS=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Archive", "driver_java_options"]


@dataclass(frozen=True)
class Archive:
    """The driver's ``-XX`` options for the archive at ``path``."""

    path: Path
    options: str

    def discard(self) -> None:
        """Remove an archive the JVM could not start with (the next run writes it again)."""
        with contextlib.suppress(OSError):
            self.path.unlink()


def driver_java_options(java: str) -> Archive | None:
    """The options of a driver JVM started by ``java`` that write or use the archive;
    None when off or impossible."""
    if os.environ.get("TIDINGS_SPARK_CDS", "1").strip() == "0":
        return None
    try:
        import pyspark

        stamp = f"{pyspark.__version__}|{os.path.realpath(java)}|{os.stat(java).st_mtime_ns}"
        directory = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidings"
        directory.mkdir(parents=True, exist_ok=True)
    except (ImportError, OSError, RuntimeError):  # RuntimeError: no home directory
        return None
    path = directory / f"spark-classes-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.jsa"
    _promote(path)
    # The JDK's own notes about the archive (classes it skips) are not the user's business;
    # a crash report of a JVM that could not map the archive goes beside it, not into the
    # working directory.
    quiet = f'-Xlog:disable -Xlog:all=error:stderr -XX:ErrorFile="{directory}/hs_err_%p.log"'
    if path.is_file() and path.stat().st_size > 0:
        return Archive(path, f'-XX:SharedArchiveFile="{path}" {quiet}')
    # Written under a name of its own and put in place by a later run, once the writer has
    # long finished: a run never maps a file another JVM is still writing.
    return Archive(path, f'-XX:ArchiveClassesAtExit="{path}.{os.getpid()}.tmp" {quiet}')


_SETTLED_S = 120.0


def _promote(path: Path) -> None:
    """Put a finished archive in place: the newest written at least :data:`_SETTLED_S` ago."""
    if path.exists():
        return
    now = time.time()
    done = []
    for candidate in path.parent.glob(path.name + ".*.tmp"):
        with contextlib.suppress(OSError):
            if now - candidate.stat().st_mtime > _SETTLED_S:
                done.append(candidate)
    for k, candidate in enumerate(sorted(done, key=lambda c: c.stat().st_mtime, reverse=True)):
        with contextlib.suppress(OSError):
            if k == 0 and candidate.stat().st_size > 0:
                os.replace(candidate, path)
            else:
                candidate.unlink()
