"""One logical log: the archive (ids up to each namespace's mark) and the hot log (ids above it).

The ``tidings`` source (batch and stream) plans :class:`Piece` s with :func:`plan` on the
driver and reads them on executors: archived pieces with pyarrow from the Parquet files
(:mod:`tidings.pipeline.archive_read`), hot pieces with SQL (:mod:`tidings.pipeline._hotlog`).
The seam is the manifest's mark, read once when the read is planned, so a piece is read
from exactly one side whatever the archive job does meanwhile (docs/pipeline.md, The
archive).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..core.jsonview import json_view_bytes
from ._hotlog import Binds, Session
from .archive_read import read_archived
from .layout import Manifest

__all__ = ["Piece", "archived_batches", "archived_seq_table", "columns_of", "marks_sql", "plan"]

_FILE_COLUMNS: Final = ("seq", "id", "prev_id", "timestamp", "time", "source", "headers", "data", "payload")


class Piece(msgspec.Struct, frozen=True, array_like=True):
    """Ids ``lo..hi`` of one namespace, all in the archive (``archived``) or all in the hot log."""

    namespace: str
    lo: int
    hi: int
    archived: bool = False


def plan(
    conn: Session, root: Path, namespaces: set[str] | None, lo: int, hi: int,
    ranges: list[tuple[str, int, int]] | None = None,
) -> list[Piece]:
    """The pieces holding the ids ``lo..hi`` of ``namespaces`` (None: all; ``ranges``: per namespace)."""
    marks = {ns: s.hwm for ns, s in Manifest.load(root).namespaces.items() if s.hwm > 0}
    if ranges is None:
        names = set(conn.namespaces()) | set(marks)
        if namespaces is not None:
            names &= namespaces
        ranges = [(ns, lo, hi) for ns in sorted(names)]
    out: list[Piece] = []
    for ns, a, b in ranges:
        if namespaces is not None and ns not in namespaces:
            continue
        a, b = max(a, lo), min(b, hi)
        hwm = marks.get(ns, 0)
        if a <= min(b, hwm):
            out.append(Piece(ns, a, min(b, hwm), True))
        bounds = conn.id_bounds(ns)
        if bounds is not None:
            h_lo, h_hi = max(a, hwm + 1, bounds[0]), min(b, bounds[1])
            if h_lo <= h_hi:
                out.append(Piece(ns, h_lo, h_hi))
    return out


def archived_batches(
    root: Path, piece: Piece, columns: list[str], arrow_schema: pa.Schema,
    lo: dict[str, int], hi: dict[str, int],
) -> Iterator[pa.RecordBatch]:
    """The rows of an archived piece as batches of ``columns``; ``lo``/``hi``: bounds on seq and timestamp."""
    t = read_archived(root, piece.namespace, piece.lo, piece.hi, columns=_FILE_COLUMNS, hwm=piece.hi)
    mask = None
    for col in ("seq", "timestamp"):
        for bound, op in ((lo.get(col), pc.greater_equal), (hi.get(col), pc.less_equal)):
            if bound is not None:
                m = op(t.column(col), bound)
                mask = m if mask is None else pc.and_(mask, m)
    if mask is not None:
        t = t.filter(mask)
    for batch in t.to_batches(max_chunksize=10_000):
        yield _columns(batch, piece.namespace, columns, arrow_schema)


def _columns(batch: pa.RecordBatch, namespace: str, columns: list[str], schema: pa.Schema) -> pa.RecordBatch:
    table = pa.Table.from_batches([batch]).add_column(0, "namespace", pa.array([namespace] * batch.num_rows))
    return next(columns_of(table, columns, schema))


def archived_seq_table(root: Path, marks: dict[str, int], after: int, upto: int,
                       columns: tuple[str, ...] = _FILE_COLUMNS) -> pa.Table:
    """Archived rows (ids up to each namespace's mark in ``marks``) with ``after < seq <= upto``,
    in seq order, with a ``namespace`` column first. Row groups are skipped by their seq statistics."""
    import pyarrow.dataset as ds

    from . import layout
    from ._arrow import FILE_SCHEMA

    tables = []
    for ns, hwm in sorted(marks.items()):
        files = [str(f) for _, d in layout.date_dirs(layout.namespace_dir(root, ns)) if d.is_dir()
                 for f in d.iterdir() if (r := layout.parse_file_name(f.name)) is not None and r[0] <= hwm]
        if not files:
            continue
        cond = (pc.field("seq") > after) & (pc.field("seq") <= upto) & (pc.field("id") <= hwm)
        wanted = list(dict.fromkeys(["seq", *columns]))
        t = ds.dataset(files, format="parquet", schema=FILE_SCHEMA).to_table(columns=wanted, filter=cond)
        if t.num_rows:
            tables.append(t.add_column(0, "namespace", pa.array([ns] * t.num_rows, pa.string())))
    if not tables:
        schema = pa.schema([pa.field("namespace", pa.string()), *(FILE_SCHEMA.field(c) for c in columns)])
        return schema.empty_table()
    return pa.concat_tables(tables).sort_by("seq").select(["namespace", *columns])


def columns_of(table: pa.Table, columns: list[str], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Batches of ``columns`` (the source's) from archived rows that carry a ``namespace`` column."""
    for batch in table.to_batches(max_chunksize=10_000):
        arrays: list[Any] = []
        for name in columns:
            if name == "data_json":
                decode = msgspec.json.decode
                arrays.append(pa.array(
                    [json_view_bytes(decode(d)).decode() for d in batch.column("data").to_pylist()], pa.string()
                ))
            elif name == "data_view":
                payload = batch.column("payload")
                arrays.append(pa.StructArray.from_arrays(
                    [payload.field("value"), payload.field("metadata")], fields=list(schema.field(name).type)
                ))
            else:
                arrays.append(batch.column(name))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def marks_sql(marks: dict[str, int], b: Binds) -> str:
    """SQL ``AND`` clause keeping hot rows above their namespace's mark (archived rows are
    read from the archive), its values added to ``b``."""
    if not marks:
        return ""
    cases = " ".join(f"WHEN {b(ns)} THEN {b(hwm)}" for ns, hwm in sorted(marks.items()))
    return f" AND id > CASE namespace {cases} ELSE 0 END"
