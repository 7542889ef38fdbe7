"""``spark.readStream.format("tidings")``: new events as a stream, offsets by ``seq``.

::

    q = (spark.readStream.format("tidings").option("namespace", "shop.orders")
         .option("startingOffsets", "earliest").load("var")
         .writeStream.option("checkpointLocation", "chk").toTable("orders"))

The offset is ``{"seq": n}``: every event with a ``seq`` up to ``n`` has been read. The
store's single writer commits ``seq`` values in order, so once a reader sees ``n``
committed, no event with a lower ``seq`` can appear later: a micro-batch ``(start, end]``
reads the same rows however often it is replayed, and Spark's checkpoint (the offsets
it logged) is all the recovery needs. Rows trimmed by retention or archiving before a
replayed batch reads them are gone from it.

Options: ``startingOffsets`` (``earliest``, ``latest`` (default) or a ``seq``),
``namespace`` (comma-separated), ``maxEventsPerTrigger``, ``partitionSize`` (events per
task, default 100,000). ``Trigger.AvailableNow`` reads up to the ``seq`` current when the
query starts, then stops.

Lifecycle: the reader is made on the driver, where ``initialOffset``, ``latestOffset``
and ``partitions`` run; ``read`` runs on executors with its own SQLite connection.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from . import _sqlite
from .errors import PipelineError
from .source import DEFAULT_PARTITION_SIZE, check_schema, to_batch

__all__ = ["TidingsStreamReader"]

_READ_BATCH: Final = 10_000


class TidingsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self, path: str, columns: list[str], arrow_schema: pa.Schema, namespaces: list[str] | None,
        starting: str, max_events: int | None, partition_size: int,
    ) -> None:
        self.path = path
        self.columns = columns
        self.arrow_schema = arrow_schema
        self.namespaces = namespaces
        self.starting = starting
        self.max_events = max_events
        self.partition_size = partition_size
        self.until: int | None = None

    @classmethod
    def from_options(cls, options: dict[str, str], schema: StructType) -> TidingsStreamReader:
        opts = {k.lower(): v for k, v in options.items()}
        path = opts.get("path")
        if not path:
            raise PipelineError("give the data dir: load(path) or option('path', ...)", code="invalid_option")
        check_schema(schema)
        starting = opts.get("startingoffsets", "latest").strip().lower()
        try:
            if starting not in ("earliest", "latest"):
                int(starting)
            max_events = int(opts["maxeventspertrigger"]) if "maxeventspertrigger" in opts else None
            size = int(opts.get("partitionsize", DEFAULT_PARTITION_SIZE))
        except ValueError as e:
            raise PipelineError(f"bad tidings stream option: {e}", code="invalid_option") from e
        names = [n.strip() for n in opts["namespace"].split(",") if n.strip()] if "namespace" in opts else None
        return cls(
            path, schema.fieldNames(), to_arrow_schema(schema, timezone="UTC"), names, starting, max_events, size,
        )

    # -- offsets (driver) ------------------------------------------------------------

    def _head(self) -> int:
        with _sqlite.connect(self.path) as conn:
            return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])

    def initialOffset(self) -> dict[str, int]:
        if self.starting == "earliest":
            return {"seq": 0}
        if self.starting == "latest":
            return {"seq": self._head()}
        return {"seq": int(self.starting)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_events is None else ReadMaxRows(self.max_events)

    def prepareForTriggerAvailableNow(self) -> None:
        self.until = self._head()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        after = int(start["seq"])
        end = self._head() if self.until is None else self.until
        if isinstance(limit, ReadMaxRows) and limit.max_rows > 0:
            with _sqlite.connect(self.path) as conn:
                row = conn.execute(
                    "SELECT seq FROM events WHERE seq > ? ORDER BY seq LIMIT 1 OFFSET ?", (after, limit.max_rows - 1)
                ).fetchone()
            if row is not None:
                end = min(end, int(row[0]))
        return {"seq": max(after, end)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        lo, hi = int(start["seq"]), int(end["seq"])
        return [InputPartition((a, min(hi, a + self.partition_size))) for a in range(lo, hi, self.partition_size)]

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the hot log keeps events by its own rules, not by readers."""

    # -- reading (executors) -----------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        after, hi = partition.value
        where = ""
        params: list[Any] = []
        if self.namespaces is not None:
            where = f"AND namespace IN ({','.join('?' * len(self.namespaces))})"
            params = list(self.namespaces)
        with _sqlite.connect(self.path) as conn:
            while after < hi:
                rows = conn.execute(
                    f"SELECT {_sqlite.EVENT_COLUMNS} FROM events WHERE seq > ? AND seq <= ? {where} "
                    "ORDER BY seq LIMIT ?",
                    (after, hi, *params, _READ_BATCH),
                ).fetchall()
                if not rows:
                    return
                yield to_batch(rows, self.columns, self.arrow_schema)
                after = rows[-1][0]
