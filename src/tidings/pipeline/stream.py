"""``spark.readStream.format("tidings")``: new events as a stream, offsets by ``seq``.

::

    q = (spark.readStream.format("tidings").option("namespace", "shop.orders")
         .option("startingOffsets", "earliest").load("var")
         .writeStream.option("checkpointLocation", "chk").toTable("orders"))

The offset is ``{"seq": n}``: every event with a ``seq`` up to ``n`` has been read. The
store's single writer commits ``seq`` values in order, so once a reader sees ``n``
committed, no event with a lower ``seq`` can appear later: a micro-batch ``(start, end]``
reads the same rows however often it is replayed, and Spark's checkpoint (the offsets
it logged) is all the recovery needs.

The stream reads the logical log: events the archive job moved out of the hot log are
read from the archive (ids up to each namespace's mark, read when the micro-batch is
planned), so archiving never removes anything from a stream. Events trimmed without
being archived (retention, or the archive's own retention) are lost to a query that had
not read them yet: the log's ``seq`` is dense (the single writer numbers events one by
one, and trimming never removes the last), so a micro-batch knows how many events of its
range are gone. By default the query then fails with :class:`PipelineError`
``data_loss``; with ``failOnDataLoss=false`` (as for Spark's Kafka source) the gap is
logged as a warning and counted in the offset (``{"seq": n, "lost": k}``, cumulative,
visible in ``query.lastProgress``). A query reading some namespaces only counts the gaps
in their id chains (an event's id follows the previous one of its namespace).

Options: ``startingOffsets`` (``earliest``, ``latest`` (default) or a ``seq``),
``namespace`` (comma-separated), ``maxEventsPerTrigger``, ``partitionSize`` (events per
task, default 100,000), ``archive`` (default ``<data dir>/archive``), ``failOnDataLoss``
(default true). ``earliest`` is the earliest event the log still holds, as for Kafka.
``Trigger.AvailableNow`` reads up to the ``seq`` current when the
query starts, then stops.

The hot log is the SQLite file of a data dir or a PostgreSQL store (``load("postgresql://...")``,
the address ``tidings serve --store`` takes): on PostgreSQL too, appends number ``seq``
in commit order (``tidings.store._pg_migrations``), so the same offsets hold.

Lifecycle: the reader is made on the driver, where ``initialOffset``, ``latestOffset``
and ``partitions`` run; ``read`` runs on executors with its own connection to the hot
log (:mod:`tidings.pipeline._hotlog`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..core.int64 import INT64_MAX
from . import _logical
from ._backend import archive_root, hot_log
from ._columns import DEFAULT_PARTITION_SIZE, check_schema, to_batch
from ._hotlog import EVENT_COLUMNS
from .errors import PipelineError
from .layout import Manifest

__all__ = ["TidingsStreamReader"]

log = logging.getLogger("tidings.pipeline.stream")

_READ_BATCH: Final = 10_000


class TidingsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self, path: str, columns: list[str], arrow_schema: pa.Schema, namespaces: list[str] | None,
        starting: str, max_events: int | None, partition_size: int, archive: str = "", fail_on_loss: bool = True,
    ) -> None:
        self.path = path
        self.archive = archive
        self.fail_on_loss = fail_on_loss
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
        fail = opts.get("failondataloss", "true").strip().lower()
        if fail not in ("true", "false"):
            raise PipelineError(f"failOnDataLoss is true or false, not {fail!r}", code="invalid_option")
        return cls(
            path, schema.fieldNames(), to_arrow_schema(schema, timezone="UTC"), names, starting, max_events, size,
            str(archive_root(path, opts.get("archive"))), fail == "true",
        )

    # -- offsets (driver) ------------------------------------------------------------

    def _head(self) -> int:
        with hot_log(self.path).connect() as conn:
            row = conn.one("SELECT COALESCE(MAX(seq), 0) FROM events")
        return int(row[0]) if row else 0

    def _marks(self) -> dict[str, int]:
        marks = {ns: st.hwm for ns, st in Manifest.load(Path(self.archive)).namespaces.items() if st.hwm > 0}
        return marks if self.namespaces is None else {k: v for k, v in marks.items() if k in self.namespaces}

    def _earliest(self) -> int:
        """The offset before the earliest event the logical log holds."""
        with hot_log(self.path).connect() as conn:
            b = conn.binds()
            row = conn.one(f"SELECT MIN(seq) FROM events WHERE TRUE{_logical.marks_sql(self._marks(), b)}", b)
        hot = row[0] if row else None
        arch = _logical.archived_seq_table(Path(self.archive), self._marks(), 0, INT64_MAX, ("seq",))
        firsts = [x for x in (hot, arch.column("seq")[0].as_py() if arch.num_rows else None) if x is not None]
        return min(firsts) - 1 if firsts else 0

    def initialOffset(self) -> dict[str, int]:
        if self.starting == "earliest":
            return {"seq": self._earliest()}
        if self.starting == "latest":
            return {"seq": self._head()}
        return {"seq": int(self.starting)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_events is None else ReadMaxRows(self.max_events)

    def prepareForTriggerAvailableNow(self) -> None:
        self.until = self._head()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        end = self._end(start, limit)
        lost = int(start.get("lost", 0))
        if end > int(start["seq"]):
            gone = self._lost(int(start["seq"]), end)
            if gone:
                what = f"{gone:,} events between seq {int(start['seq']) + 1:,} and {end:,} are gone from the log"
                if self.fail_on_loss:
                    raise PipelineError(
                        f"data_loss: {what} (trimmed by retention before this query read them); restart the "
                        "query from an offset the log still holds, or set failOnDataLoss=false to skip them",
                        code="data_loss",
                    )
                lost += gone
                log.warning("tidings stream: %s; skipped (failOnDataLoss=false), %s lost in all", what, f"{lost:,}")
        return {"seq": end, "lost": lost} if lost else {"seq": end}

    def _lost(self, after: int, upto: int) -> int:
        """How many events of this query with ``after < seq <= upto`` the logical log no longer holds."""
        marks = self._marks()
        arch = _logical.archived_seq_table(Path(self.archive), marks, after, upto, ("seq", "id"))
        with hot_log(self.path).connect() as conn:
            if self.namespaces is None:  # every seq is an event: count the holes
                b = conn.binds()
                row = conn.one(f"SELECT COUNT(*) FROM events WHERE seq > {b(after)} AND seq <= {b(upto)}"
                               f"{_logical.marks_sql(marks, b)}", b)
                return (upto - after) - (int(row[0]) if row else 0) - arch.num_rows
            gone = 0
            for ns in self.namespaces:  # the id chain of each: ids found, and the last one before the range
                b = conn.binds()
                ids = [i for (i,) in conn.rows(
                    f"SELECT id FROM events WHERE namespace = {b(ns)} AND seq > {b(after)} AND seq <= {b(upto)}"
                    f"{_logical.marks_sql(marks, b)}", b,
                )]
                ids += [i for n, i in zip(arch.column("namespace").to_pylist(), arch.column("id").to_pylist(),
                                          strict=True) if n == ns]
                if not ids:
                    continue
                b = conn.binds()
                found = conn.one(
                    f"SELECT MAX(id) FROM events WHERE namespace = {b(ns)} AND seq <= {b(after)}"
                    f"{_logical.marks_sql(marks, b)}", b,
                )
                prev = found[0] if found else None
                if prev is None and marks.get(ns):
                    before = _logical.archived_seq_table(Path(self.archive), {ns: marks[ns]}, 0, after, ("id",))
                    prev = max(before.column("id").to_pylist(), default=None)
                first = min(ids)
                gone += (max(ids) - first + 1 - len(ids)) + (first - 1 - prev if prev is not None else 0)
            return gone

    def _end(self, start: dict[str, int], limit: ReadLimit) -> int:
        after = int(start["seq"])
        end = self._head() if self.until is None else self.until
        if isinstance(limit, ReadMaxRows) and limit.max_rows > 0:
            with hot_log(self.path).connect() as conn:
                b = conn.binds()
                row = conn.one(f"SELECT seq FROM events WHERE seq > {b(after)} ORDER BY seq "
                               f"LIMIT 1 OFFSET {b(limit.max_rows - 1)}", b)
            if row is not None:
                end = min(end, int(row[0]))
        return max(after, end)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        lo, hi = int(start["seq"]), int(end["seq"])
        marks = self._marks()
        return [
            InputPartition((a, min(hi, a + self.partition_size), marks)) for a in range(lo, hi, self.partition_size)
        ]

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the hot log keeps events by its own rules, not by readers."""

    # -- reading (executors) -----------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        after, hi, marks = partition.value
        archived = _logical.archived_seq_table(Path(self.archive), marks, after, hi)
        if archived.num_rows:  # archived ids precede the hot ones of their namespace, but not of others
            yield from _logical.columns_of(archived, self.columns, self.arrow_schema)
        with hot_log(self.path).connect() as conn:
            while after < hi:
                b = conn.binds()
                sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > {b(after)} AND seq <= {b(hi)}"
                sql += _logical.marks_sql(marks, b)
                if self.namespaces is not None:
                    sql += f" AND namespace IN ({b.each(self.namespaces)})"
                rows = conn.rows(f"{sql} ORDER BY seq LIMIT {b(_READ_BATCH)}", b)
                if not rows:
                    return
                yield to_batch(rows, self.columns, self.arrow_schema)
                after = rows[-1][0]
