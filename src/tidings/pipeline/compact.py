"""``tidings pipeline compact``: merge each date partition's small files into one.

Every archive run writes a file per namespace and date it touches, so frequent runs
leave many small files, and readers pay per file. Compaction rewrites a date partition
with more than one file as a single file named after the whole range
(``part-<lowest lo>-<highest hi>-0.parquet``), rows in id order, with pyarrow (Spark would
add nothing but its start).

The swap is crash-safe: the merged file is written and fsynced into a sibling folder
``_compact-date=<day>`` (invisible to Spark: it starts with ``_``), then the old
partition is renamed to ``_old-date=<day>`` and the new one to ``date=<day>``, then the old
one is deleted. A run that finds ``_compact-`` or ``_old-`` folders finishes or undoes
what a killed run left: a ``_compact-`` folder without its ``date=`` folder is renamed
into place (the old one was already moved away), otherwise it is deleted; ``_old-``
folders are deleted. It holds the archive's lock, so it never runs beside an archive job.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import layout
from ._arrow import FILE_SCHEMA, write_file
from .layout import Manifest

__all__ = ["Compacted", "compact"]


@dataclass(frozen=True, slots=True)
class Compacted:
    namespace: str
    date: str
    files: int
    """Files merged into one."""
    events: int


def compact(archive_dir: str | Path, *, min_files: int = 2, progress: Callable[[str], None] = lambda _: None,
            ) -> list[Compacted]:
    """Merge every date partition with at least ``min_files`` files; what was merged."""
    root = Path(archive_dir)
    done: list[Compacted] = []
    with layout.lock(root):
        manifest = Manifest.load(root)
        for ns, ns_dir in layout.namespace_dirs(root):
            _recover(ns_dir)
            hwm = manifest.hwm(ns)
            for day, d in layout.date_dirs(ns_dir):
                files = []
                for f in d.iterdir():
                    r = layout.parse_file_name(f.name)
                    if r is not None and r[0] <= hwm:  # files above the mark are a killed run's
                        files.append((r, f))
                if len(files) < min_files:
                    continue
                files.sort()
                lo, hi = min(r[0] for r, _ in files), max(r[1] for r, _ in files)
                table = pa.concat_tables([pq.read_table(f, schema=FILE_SCHEMA) for _, f in files]).sort_by("id")
                new = ns_dir / f"_compact-date={day}"
                shutil.rmtree(new, ignore_errors=True)
                write_file(table, new / layout.file_name(lo, hi, 0))
                layout.fsync_file(new / layout.file_name(lo, hi, 0))
                layout.fsync_dir(new)
                old = ns_dir / f"_old-date={day}"
                os.replace(d, old)
                os.replace(new, d)
                layout.fsync_dir(ns_dir)
                shutil.rmtree(old)
                done.append(Compacted(ns, day, len(files), table.num_rows))
                progress(f"{ns} {day}: {len(files):,} files -> 1 ({table.num_rows:,} events)")
    return done


def _recover(ns_dir: Path) -> None:
    for d in sorted(ns_dir.iterdir()):
        if d.name.startswith("_compact-date="):
            live = ns_dir / d.name.removeprefix("_compact-")
            if live.exists():
                shutil.rmtree(d)
            else:
                os.replace(d, live)
        elif d.name.startswith("_old-date="):
            if (ns_dir / d.name.removeprefix("_old-")).exists():
                shutil.rmtree(d)
            else:  # killed between the two renames: the old partition goes back
                os.replace(d, ns_dir / d.name.removeprefix("_old-"))
