"""Reading archived events of one namespace without Spark: pyarrow over the right files only.

Replays (``tidings.broker.replay._source``) read a window of ids at a time; a Spark job
per window costs a second or more, where this costs milliseconds. Files are chosen by
name first (``part-<lo>-<hi>-<k>``: the id range of the run that wrote the file, so a
file outside the window is never opened), then by their Parquet statistics on ``id``
(row groups outside the window are skipped), and rows above the manifest's mark are
never returned (they belong to a run that has not finished: docs/pipeline.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

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
    dataset = ds.dataset([str(f) for f in files], format="parquet", schema=FILE_SCHEMA)
    table = dataset.to_table(columns=wanted, filter=(pc.field("id") >= lo) & (pc.field("id") <= hi))
    table = table.sort_by("id")
    return table.select(list(columns))
