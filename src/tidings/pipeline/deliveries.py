"""The store's delivery records, and its pending notifications, as Spark DataFrames.

Read through the ``tidings`` source with the ``table`` option::

    spark.read.format("tidings").option("table", "deliveries").load("var")   # outcomes
    spark.read.format("tidings").option("table", "pending").load("var")      # not settled yet

Both have :data:`DELIVERY_SCHEMA`. ``deliveries`` is the record the store appends when a
notification is confirmed, dead-lettered or dropped (``tidings.store._deliveries``);
``pending`` is the notifications table, with ``settled_at`` null and ``outcome``
``pending`` (its ``serial`` is the notification id). ``replay`` marks notifications
sent by a replay rather than live.

Reads are split into ranges of about ``partitionSize`` serials (option, default
100,000), one Spark task each with its own read-only connection to the store (the
SQLite file of a data dir, or a PostgreSQL address: :mod:`tidings.pipeline._hotlog`),
as the event reader does. Pushed down: ``serial``, ``settled_at`` and ``created_at`` compared with
integers (``= < <= > >=``); the rest is left to Spark.

Lifecycle: made on the driver, pickled to executors; holds plain values only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from ..core.int64 import INT64_MAX, INT64_MIN
from ..core.record_batch import MAX_ITEMS, expand
from ._backend import hot_log
from ._hotlog import Binds
from .errors import PipelineError

__all__ = ["DELIVERY_SCHEMA", "TABLES", "DeliveriesReader"]

DELIVERY_SCHEMA: Final = StructType(
    [
        StructField("serial", LongType(), False),
        StructField("notification_id", LongType(), False),
        StructField("subscription_id", LongType(), False),
        StructField("subscriber", StringType(), False),
        StructField("namespace", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("event_id", LongType(), False),
        StructField("source", StringType(), True),
        StructField("event_timestamp", LongType(), True),
        StructField("created_at", LongType(), True),
        StructField("settled_at", LongType(), True),
        StructField("attempts", LongType(), False),
        StructField("outcome", StringType(), False),
        StructField("replay", BooleanType(), False),
    ]
)
DEFAULT_PARTITION_SIZE: Final = 100_000
_BATCH: Final = 10_000
_INT_COLUMNS: Final = ("serial", "settled_at", "created_at")

# Per table: the key the partitions split, and the SELECT of the schema's columns. SQL
# that SQLite and PostgreSQL both take: ``replay`` is 0/1 in one and a boolean in the
# other (both cast it to an integer), a bare NULL needs a type in PostgreSQL, and its
# WHERE needs a boolean (TRUE, not 1).
_QUERIES: Final = {
    "deliveries": (
        "serial",
        "SELECT serial, notification_id, subscription_id, subscriber, namespace, seq, event_id, source, "
        "event_timestamp, created_at, settled_at, attempts, outcome, CAST(replay AS INTEGER) <> 0 "
        "FROM deliveries WHERE TRUE",
    ),
    "pending": (
        "n.id",
        "SELECT n.id, n.id, n.subscription_id, COALESCE(s.subscriber, ''), n.namespace, n.seq, "
        "COALESCE(e.id, r.event_id, 0), COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), "
        "n.created_at, CAST(NULL AS BIGINT), n.attempts, 'pending', r.id IS NOT NULL FROM notifications n "
        "LEFT JOIN subscriptions s ON s.id = n.subscription_id LEFT JOIN events e ON e.seq = n.seq "
        "LEFT JOIN replay_notes r ON r.id = n.id WHERE TRUE",
    ),
}
# The deliveries select with the packed records of a row last (tidings.core.record_batch).
_PACKED: Final = _QUERIES["deliveries"][1].replace(" FROM deliveries ", ", items FROM deliveries ")
_SQL_COLUMN: Final = {
    "deliveries": {"serial": "serial", "settled_at": "settled_at", "created_at": "created_at"},
    "pending": {"serial": "n.id", "settled_at": "CAST(NULL AS BIGINT)", "created_at": "n.created_at"},
}
_FROM: Final = {"deliveries": "deliveries", "pending": "notifications n"}
TABLES: Final = tuple(_QUERIES)
"""The tables besides ``events`` that the ``table`` option reads."""


@dataclass
class _Bounds:
    lo: dict[str, int] = field(default_factory=dict)
    hi: dict[str, int] = field(default_factory=dict)
    never: bool = False
    """A bound no stored integer meets (``> 2^63 - 1``, ``< -2^63``): nothing is read."""


class DeliveriesReader(DataSourceReader):
    """The reader behind ``option("table", "deliveries" | "pending")``."""

    def __init__(self, path: str, table: str, columns: list[str], arrow_schema: pa.Schema, partition_size: int) -> None:
        self.path = path
        self.table = table
        self.columns = columns
        self.arrow_schema = arrow_schema
        self.partition_size = partition_size
        self.bounds = _Bounds()

    @classmethod
    def from_options(cls, options: dict[str, str], schema: StructType) -> DeliveriesReader:
        opts = {k.lower(): v for k, v in options.items()}
        path, table = opts.get("path"), opts.get("table", "")
        if not path:
            raise PipelineError("give the data dir: load(path) or option('path', ...)", code="invalid_option")
        if table not in _QUERIES:
            raise PipelineError(f"no table {table!r}: the tidings source reads events, {', '.join(TABLES)}",
                                code="invalid_option")
        known = {f.name: f.dataType for f in DELIVERY_SCHEMA.fields}
        bad = [f"{f.name} {f.dataType.simpleString()}" for f in schema.fields if known.get(f.name) != f.dataType]
        if bad:
            raise PipelineError(f"the {table} table has no columns {bad}; see DELIVERY_SCHEMA", code="invalid_option")
        try:
            size = int(opts.get("partitionsize", DEFAULT_PARTITION_SIZE))
        except ValueError as e:
            raise PipelineError(f"bad tidings source option: {e}", code="invalid_option") from e
        if size < 1:
            raise PipelineError("partitionSize must be positive", code="invalid_option")
        return cls(path, table, schema.fieldNames(), to_arrow_schema(schema, timezone="UTC"), size)

    # -- planning (driver) ---------------------------------------------------------

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            if not self._take(f):
                yield f

    def _take(self, f: Filter) -> bool:
        attribute: tuple[str, ...] = getattr(f, "attribute", ())
        col = attribute[0] if len(attribute) == 1 else None
        v = getattr(f, "value", None)
        if col not in _INT_COLUMNS or not isinstance(v, int) or isinstance(v, bool):
            return False
        lo, hi = self.bounds.lo, self.bounds.hi
        if isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual):
            v1 = v + 1 if isinstance(f, GreaterThan) else v
            lo[col] = max(lo.get(col, v1), v1)
        if isinstance(f, EqualTo | LessThan | LessThanOrEqual):
            v1 = v - 1 if isinstance(f, LessThan) else v
            hi[col] = min(hi.get(col, v1), v1)
        if lo.get(col, INT64_MIN) > INT64_MAX or hi.get(col, INT64_MAX) < INT64_MIN:
            self.bounds.never = True  # and no integer past int64 is ever bound
        return isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual)

    def _where(self, b: Binds, packed: bool = False) -> str:
        """The pushed-down bounds as ``AND`` clauses, their values added to ``b``. With
        packed rows, the lower bound on ``serial`` reaches back to the row that may hold it."""
        cols = _SQL_COLUMN[self.table]
        sql = []
        for col in _INT_COLUMNS:
            if col in self.bounds.lo:
                lo = max(self.bounds.lo[col] - (MAX_ITEMS - 1 if packed and col == "serial" else 0), INT64_MIN)
                sql.append(f" AND {cols[col]} >= {b(lo)}")
            if col in self.bounds.hi:
                sql.append(f" AND {cols[col]} <= {b(self.bounds.hi[col])}")
        return "".join(sql)

    def partitions(self) -> Sequence[InputPartition]:
        key = _QUERIES[self.table][0]
        if self.bounds.never:
            return []
        with hot_log(self.path).connect() as conn:
            if not conn.has_tables(["deliveries", "replay_notes"]):
                return []  # a store last opened by an older tidings: no records yet
            packed = self.table == "deliveries" and conn.has_columns("deliveries", ["n", "items"])
            b = conn.binds()
            last = f"MAX({key} + COALESCE(n, 1) - 1)" if packed else f"MAX({key})"
            found = conn.one(f"SELECT MIN({key}), {last} FROM {_FROM[self.table]} WHERE TRUE{self._where(b, packed)}",
                             b)
        lo, hi = found if found else (None, None)
        if lo is None:
            return []
        size = self.partition_size
        return [InputPartition((a, min(hi, a + size - 1), packed)) for a in range(int(lo), int(hi) + 1, size)]

    # -- reading (executors) -------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition.value, tuple | list):  # Spark reads one empty partition when none were planned
            return
        key, select = _QUERIES[self.table]
        lo, hi, packed = partition.value
        # A packed row holds the records of serials serial .. serial + n - 1: the one holding
        # ``lo`` starts up to MAX_ITEMS back, and a row is read by the partition it starts in
        # and by the next one it reaches into, each keeping its own serials.
        after = lo - (MAX_ITEMS if packed else 1)
        keep_lo, keep_hi = max(lo, self.bounds.lo.get("serial", lo)), min(hi, self.bounds.hi.get("serial", hi))
        indexes = [DELIVERY_SCHEMA.fieldNames().index(c) for c in self.columns]
        with hot_log(self.path).connect() as conn:
            while after < hi:
                # Keyset paging, as the event reader does: no read transaction pins a snapshot for long.
                b = conn.binds()
                rows = conn.rows(
                    f"{_PACKED if packed else select} AND {key} > {b(after)} "
                    f"AND {key} <= {b(hi)}{self._where(b, packed)} ORDER BY {key} LIMIT {b(_BATCH)}",
                    b,
                )
                if not rows:
                    return
                if packed:
                    after = rows[-1][0]
                    rows = [r for row in rows for r in expand(row[:-1], row[-1]) if keep_lo <= r[0] <= keep_hi]
                    if rows:
                        yield _batch(rows, indexes, self.arrow_schema)
                    continue
                yield _batch(rows, indexes, self.arrow_schema)
                after = rows[-1][0]


def _batch(rows: list[tuple[Any, ...]], indexes: list[int], arrow_schema: pa.Schema) -> pa.RecordBatch:
    arrays = []
    for k, i in enumerate(indexes):
        kind = arrow_schema.field(k).type
        # SQLite has no booleans: ``replay`` comes as 0 or 1 there.
        values = [bool(r[i]) for r in rows] if pa.types.is_boolean(kind) else [r[i] for r in rows]
        arrays.append(pa.array(values, type=kind))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
