"""Reading archived events of one namespace without Spark: pyarrow over the right files only.

Replays (``tidings.broker.replay._source``) read a window of ids at a time; a Spark job
per window costs a second or more, where this costs milliseconds. Files are chosen by
name first (``part-<lo>-<hi>-<k>``: the id range of the run that wrote the file, so a
file outside the window is never opened), then by their Parquet statistics on ``id``
(row groups outside the window are skipped), and rows above the manifest's mark are
never returned (they belong to a run that has not finished: docs/pipeline.md).

Nothing here imports pandas, which would cost a replay process 0.15-0.2 s on its first
archive read: files are read with ``pyarrow.parquet`` one by one, not through
``pyarrow.dataset`` (which imports it), and no Python value is turned into an Arrow one
(pyarrow imports pandas to check what it is given).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from . import layout
from ._arrow import FILE_SCHEMA
from .layout import Manifest

__all__ = ["EVENT_COLUMNS", "archived_files", "read_archived"]

EVENT_COLUMNS: Final = ("seq", "id", "prev_id", "timestamp", "source", "headers", "data")


def archived_files(root: Path, namespace: str, lo: int, hi: int) -> list[Path]:
    """The namespace's archive files that may hold ids in ``lo..hi``, by their names alone."""
    ns_dir = layout.namespace_dir(root, namespace)
    if not ns_dir.is_dir():
        return []
    out = []
    for _, d in layout.date_dirs(ns_dir):
        for f in d.iterdir():
            r = layout.parse_file_name(f.name)
            if r is not None and r[0] <= hi and r[1] >= lo:
                out.append(f)
    return sorted(out)


def read_archived(
    archive_dir: str | Path, namespace: str, lo: int, hi: int, *, columns: Sequence[str] = EVENT_COLUMNS,
    hwm: int | None = None,
) -> pa.Table:
    """Archived events of ``namespace`` with ``lo <= id <= hi`` and ``id <= hwm``, in id order.

    ``hwm`` defaults to the manifest's mark, read now."""
    root = Path(archive_dir)
    mark = Manifest.load(root).hwm(namespace) if hwm is None else hwm
    hi = min(hi, mark)
    schema = pa.schema([FILE_SCHEMA.field(c) for c in columns])
    files = archived_files(root, namespace, lo, hi) if lo <= hi else []
    if not files:
        return schema.empty_table()
    wanted = list(dict.fromkeys([*columns, "id"]))
    typed = pa.schema([FILE_SCHEMA.field(c) for c in wanted])
    parts = [t.cast(typed) for f in files if (t := _row_groups(f, wanted, lo, hi)) is not None]
    if not parts:
        return schema.empty_table()
    table = pa.concat_tables(parts).sort_by("id")
    ids = table.column("id")
    # The window by bisection, not by a mask: a mask compares with Python ints, and any
    # Python value turned into Arrow's makes pyarrow import pandas (0.15-0.2 s).
    start = bisect.bisect_left(ids, lo, key=_as_py)
    end = bisect.bisect_right(ids, hi, lo=start, key=_as_py)
    return table.slice(start, end - start).select(list(columns))


def _as_py(v: pa.Scalar) -> int:
    return v.as_py()  # type: ignore[no-any-return]


def _row_groups(path: Path, columns: list[str], lo: int, hi: int) -> pa.Table | None:
    """The row groups of one file whose statistics on ``id`` overlap ``lo..hi`` (every
    group where one has none); None if no group does."""
    with pq.ParquetFile(path) as f:
        meta = f.metadata
        leaf = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == "id")
        groups = []
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(leaf).statistics
            if stats is not None and stats.has_min_max and (stats.max < lo or stats.min > hi):
                continue
            groups.append(g)
        return f.read_row_groups(groups, columns=columns) if groups else None
