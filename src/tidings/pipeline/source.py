"""The ``tidings`` Spark data source: the event log as a DataFrame.

Register it once per session, then read the store of a data dir (or its ``tidings.db``,
or the PostgreSQL address ``tidings serve --store`` takes)::

    from tidings.pipeline.source import register
    register(spark)
    df = spark.read.format("tidings").load("./var")   # or .load("postgresql://...")
    df.where("namespace = 'shop.orders' AND id > 1000").select("id", F.parse_json("data_json"))

Columns (:data:`EVENT_SCHEMA`): ``seq``, ``namespace``, ``id``, ``prev_id``,
``timestamp`` (UTC ns), ``time`` (the same as a Spark timestamp, µs), ``source``,
``headers`` (JSON of the ICRC-16 Map pairs), ``data`` (the lossless ICRC-16 wire JSON)
and ``data_json`` (its JSON view, the text ``F.parse_json`` makes the ``VARIANT`` that
:mod:`tidings.pipeline.filters` queries; :func:`tidings.pipeline.history.events`
returns it parsed as ``data_view``).

Python data sources cannot prune columns, so a reader given a narrower schema
(``spark.read.format("tidings").schema("namespace string, id long, data string")``)
produces just those columns and skips the work of the others (``data_json`` costs a
JSON decode and encode per event). A schema may also ask for ``data_view variant``: the
JSON view as a ``VARIANT`` straight from the source (:mod:`tidings.pipeline._variant`),
which filters query (``to_column(f, "data_view")``).

The source reads the logical log (:mod:`tidings.pipeline._logical`): ids up to each
namespace's archive mark from the Parquet archive (option ``archive``, default
``<data dir>/archive``; for a PostgreSQL store ``TIDINGS_ARCHIVE_DIR``, else
``<TIDINGS_DATA_DIR>/archive``), ids above it from the hot log, the mark read once at
planning; option ``origin`` (``both``, ``hot``, ``archive``) reads one side only.

Reads are split into id-range partitions of about ``partitionSize`` events (option,
default 100,000), small namespaces packed together, so they run in parallel. With
``spark.sql.python.filterPushdown.enabled`` (set by :func:`tidings.pipeline.session.build`)
these filters are pushed into the hot log's SQL query (SQLite or PostgreSQL) and
partition planning: ``namespace
``=`` or ``IN``; ``id``, ``seq`` and ``timestamp`` compared with integers
(``= < <= > >=``). Without pushdown, the options ``namespace`` (comma-separated),
``fromId`` and ``toId`` (inclusive) narrow the read the same way.

Lifecycle: :class:`TidingsDataSource` and :class:`TidingsReader` are made on the driver
and pickled to executors; they hold only plain values. ``partitions()`` runs on the
driver and ``read()`` on executors, each opening its own read-only connection to the
hot log (:mod:`tidings.pipeline._hotlog`; or reading its archived Parquet files), so the
store and the archive must be reachable at the same paths from every executor (local
mode, or a shared filesystem; a PostgreSQL store at its address).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from ..core.int64 import INT64_MAX
from . import _logical
from ._backend import archive_root, hot_log
from ._columns import COLUMNS, DEFAULT_PARTITION_SIZE, EVENT_SCHEMA, check_schema, to_batch
from ._hotlog import Cond, IdRange, Session
from .errors import PipelineError

# The columns live in _columns (the stream reader shares them); their names stay here too.
__all__ = ["COLUMNS", "EVENT_SCHEMA", "TidingsDataSource", "TidingsReader", "check_schema", "register", "to_batch"]

NAME: Final = "tidings"
_INT_COLUMNS: Final = ("id", "seq", "timestamp")


def register(spark: Any) -> None:
    """Make ``format("tidings")`` available in ``spark``'s session (idempotent)."""
    spark.dataSource.register(TidingsDataSource)


def load(spark: Any, path: str, options: dict[str, str] | None = None, schema: StructType | None = None) -> Any:
    """``spark.read.format("tidings")...load(path)``, except that a read planned as a single
    partition is done here, in the driver, and handed to Spark as Arrow.

    Why: the first read through a Python data source starts Python workers (a lookup, the
    source's creation, its planning, the reading), seconds of CPU before the first row on
    a small machine (docs/benchmarks/history/2026-11-25-pipeline-3-native-encoder.md). A single
    partition gains nothing from
    them. The rows are the same: the same reader reads them, with the same columns.
    """
    opts = {**(options or {}), "path": path}
    source = TidingsDataSource(opts)
    struct = schema or source.schema()
    reader = source.reader(struct)
    parts = reader.partitions()  # type: ignore[attr-defined]
    if len(parts) > 1:
        frame = spark.read.format(NAME).options(**opts)
        return (frame if schema is None else frame.schema(schema)).load()
    batches = [b for p in parts for b in reader.read(p)]
    table = pa.Table.from_batches(batches, schema=to_arrow_schema(struct, timezone="UTC"))
    return spark.createDataFrame(table, schema=struct)


class TidingsDataSource(DataSource):
    """``spark.read.format("tidings")``: options ``path`` (data dir, db file or PostgreSQL address, or ``load(path)``),
    ``namespace``, ``fromId``, ``toId``, ``partitionSize``, ``ranges`` (JSON ``[[ns, lo, hi], ...]``).

    ``df.write.format("tidings")`` and ``writeStream`` publish rows through a broker:
    :mod:`tidings.pipeline.sink`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        if _table(self.options) != "events":
            from .deliveries import DELIVERY_SCHEMA

            return DELIVERY_SCHEMA
        return EVENT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if _table(self.options) != "events":  # option table: deliveries or pending
            from .deliveries import DeliveriesReader

            return DeliveriesReader.from_options(dict(self.options), schema)
        return TidingsReader.from_options(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import TidingsStreamReader

        return TidingsStreamReader.from_options(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import SinkOptions, TidingsWriter

        return TidingsWriter(SinkOptions.parse(dict(self.options), schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import SinkOptions, TidingsStreamWriter

        return TidingsStreamWriter(SinkOptions.parse(dict(self.options), schema, overwrite))


def _table(options: Any) -> str:
    """The ``table`` option: ``events`` (the default), or a table of :mod:`tidings.pipeline.deliveries`."""
    return str({k.lower(): v for k, v in dict(options).items()}.get("table", "events"))


@dataclass
class _Bounds:
    """Integer bounds per column (inclusive) and namespaces, gathered from options and pushed filters."""

    lo: dict[str, int] = field(default_factory=dict)
    hi: dict[str, int] = field(default_factory=dict)
    namespaces: set[str] | None = None

    def above(self, col: str, v: int) -> None:
        self.lo[col] = max(self.lo.get(col, v), v)

    def below(self, col: str, v: int) -> None:
        self.hi[col] = min(self.hi.get(col, v), v)

    def only(self, names: set[str]) -> None:
        self.namespaces = names if self.namespaces is None else self.namespaces & names


class TidingsReader(DataSourceReader):
    def __init__(
        self, path: str, columns: list[str], arrow_schema: pa.Schema, bounds: _Bounds,
        partition_size: int, ranges: list[tuple[str, int, int]] | None, archive: str, origin: str = "both",
    ) -> None:
        self.path = path
        self.archive = archive
        self.origin = origin
        self.columns = columns
        self.arrow_schema = arrow_schema
        self.bounds = bounds
        self.partition_size = partition_size
        self.ranges = ranges

    @classmethod
    def from_options(cls, options: dict[str, str], schema: StructType) -> TidingsReader:
        opts = {k.lower(): v for k, v in options.items()}
        path = opts.get("path")
        if not path:
            raise PipelineError("give the data dir: load(path) or option('path', ...)", code="invalid_option")
        check_schema(schema)
        bounds = _Bounds()
        try:
            if "namespace" in opts:
                bounds.only({n.strip() for n in opts["namespace"].split(",") if n.strip()})
            if "fromid" in opts:
                bounds.above("id", int(opts["fromid"]))
            if "toid" in opts:
                bounds.below("id", int(opts["toid"]))
            size = int(opts.get("partitionsize", DEFAULT_PARTITION_SIZE))
            ranges = None
            if "ranges" in opts:
                ranges = [(str(ns), int(lo), int(hi)) for ns, lo, hi in json.loads(opts["ranges"])]
        except (ValueError, TypeError) as e:
            raise PipelineError(f"bad tidings source option: {e}", code="invalid_option") from e
        if size < 1:
            raise PipelineError("partitionSize must be positive", code="invalid_option")
        archive = str(archive_root(path, opts.get("archive")))
        origin = opts.get("origin", "both")
        if origin not in ("both", "hot", "archive"):
            raise PipelineError(f"origin is 'both', 'hot' or 'archive', not {origin!r}", code="invalid_option")
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        return cls(path, schema.fieldNames(), arrow_schema, bounds, size, ranges, archive, origin)

    # -- planning (driver) ---------------------------------------------------------

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take namespace equality and integer bounds on id, seq and timestamp; leave the rest to Spark."""
        for f in filters:
            if not self._take(f):
                yield f

    def _take(self, f: Filter) -> bool:
        attribute: tuple[str, ...] = getattr(f, "attribute", ())
        col = attribute[0] if len(attribute) == 1 else None
        if col == "namespace":
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                self.bounds.only({f.value})
                return True
            if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                self.bounds.only(set(f.value))
                return True
            return False
        if col not in _INT_COLUMNS:
            return False
        v = getattr(f, "value", None)
        if not isinstance(v, int) or isinstance(v, bool):
            return False
        if isinstance(f, EqualTo):
            self.bounds.above(col, v)
            self.bounds.below(col, v)
        elif isinstance(f, GreaterThan):
            self.bounds.above(col, v + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self.bounds.above(col, v)
        elif isinstance(f, LessThan):
            self.bounds.below(col, v - 1)
        elif isinstance(f, LessThanOrEqual):
            self.bounds.below(col, v)
        else:
            return False
        return True

    def partitions(self) -> Sequence[InputPartition]:
        b = self.bounds
        with hot_log(self.path).connect() as conn:
            pieces = _logical.plan(
                conn, Path(self.archive), b.namespaces, b.lo.get("id", 0), b.hi.get("id", INT64_MAX), self.ranges
            )
        if self.origin != "both":
            pieces = [p for p in pieces if p.archived == (self.origin == "archive")]
        return _pack(pieces, self.partition_size)

    # -- reading (executors) -------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        conds = self._conds()
        with contextlib.ExitStack() as stack:
            conn: Session | None = None  # opened at the first hot piece: archived ones need none
            for p in partition.value or ():  # Spark reads one empty partition when none were planned
                if p.archived:
                    yield from _logical.archived_batches(
                        Path(self.archive), p, self.columns, self.arrow_schema, self.bounds.lo, self.bounds.hi
                    )
                    continue
                if conn is None:
                    conn = stack.enter_context(hot_log(self.path).connect())
                for rows in conn.read_range(IdRange(p.namespace, p.lo, p.hi), conds):
                    yield self._batch(rows)

    def _conds(self) -> list[Cond]:
        """The pushed-down bounds on seq and timestamp (id bounds went into the pieces)."""
        out: list[Cond] = []
        for col in ("seq", "timestamp"):
            if col in self.bounds.lo:
                out.append((col, ">=", self.bounds.lo[col]))
            if col in self.bounds.hi:
                out.append((col, "<=", self.bounds.hi[col]))
        return out

    def _batch(self, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        return to_batch(rows, self.columns, self.arrow_schema)


def _pack(pieces: list[_logical.Piece], size: int) -> list[InputPartition]:
    """Split big pieces into pieces of ``size`` ids and pack small ones together."""
    parts: list[InputPartition] = []
    current: list[_logical.Piece] = []
    room = size
    for r in pieces:
        lo = r.lo
        while lo <= r.hi:
            hi = min(r.hi, lo + room - 1)
            current.append(_logical.Piece(r.namespace, lo, hi, r.archived))
            room -= hi - lo + 1
            lo = hi + 1
            if room == 0:
                parts.append(InputPartition(current))
                current, room = [], size
    if current:
        parts.append(InputPartition(current))
    return parts
