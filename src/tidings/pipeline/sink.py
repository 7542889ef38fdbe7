"""``df.write.format("tidings")``: rows published as events through the broker.

::

    (df.write.format("tidings")
       .option("url", "http://127.0.0.1:8072").option("token", token)
       .option("namespace", "shop.orders")        # when the rows have no namespace column
       .mode("append").save())

The broker sees an ordinary publisher: the token's principal must be a publisher of
each namespace, and a publication bound to a schema checks every event. Columns are
described in :mod:`tidings.pipeline._rows`: ``namespace``, ``headers`` (JSON of ICRC-16
Map pairs) and either ``data`` (ICRC-16 wire JSON text, as the reader gives it) or
plain columns that make a Map.

Options: ``url`` (or ``save(url)``), ``token``, ``namespace``, ``batchSize`` (events
per ``icrc72_publish`` call, default 500), ``onError`` (``fail``, the default, or
``skip``), ``maxRetries`` (per call, default 5), ``timeout`` (seconds per call, default 30).

Failure semantics: each task publishes its rows in order; rows the broker refuses
(``Unauthorized``, a schema violation, an unknown namespace...) do not stop the others,
as in one ``icrc72_publish``. Once every task is done, :meth:`TidingsWriter.commit`
raises ``PipelineError`` ``write_refused`` naming how many rows were refused and the
first errors, unless ``onError`` is ``skip``. A token the broker refuses (401, 403)
fails the task at once (``write_unauthorized``); a broker that stays unreachable or
busy fails it after the retries (``broker_unavailable``, ``broker_busy``). Published
events stay published: an event log has nothing to roll back.

Each event's idempotency key is where its row is: the write (a stream's query id and
micro-batch, or a batch write's id made on the driver), the partition and the row's
index in it (:func:`row_key`). A call sent again, a task Spark runs again, a micro-batch
run again after a restart: each publishes the same rows under the same keys, and the
broker stores each once within the publication's deduplication window (docs/pipeline.md,
"Exactly once").

Lifecycle: the writers are made on the driver (options and schema checked there) and
pickled to executors; they hold only plain values. ``write`` runs on executors, each
task with its own HTTP connection; ``commit`` and ``abort`` run on the driver.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..core.wire import Event
from ._publish import Refusal, Tally
from ._rows import RowShape, shape_of
from .errors import PipelineError

__all__ = ["SinkOptions", "TaskReport", "TidingsStreamWriter", "TidingsWriter", "check_reports", "row_key"]

DEFAULT_BATCH_SIZE: Final = 500
_ERRORS_SHOWN: Final = 5
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SinkOptions:
    """The writer's options, checked on the driver."""

    url: str
    token: str
    shape: RowShape
    batch_size: int = DEFAULT_BATCH_SIZE
    """Events per ``icrc72_publish`` call; at most the broker's ``TIDINGS_MAX_BATCH_ITEMS``."""
    skip_refused: bool = False
    """``onError=skip``: refused rows are logged, not a failure of the job."""
    max_retries: int = 5
    timeout_s: float = 30.0
    write_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Made on the driver, the same in every task and task attempt of the write."""

    def __repr__(self) -> str:  # the token must never reach a log
        return f"SinkOptions(url={self.url!r}, token='***', batch_size={self.batch_size})"

    @classmethod
    def parse(cls, options: dict[str, str], schema: StructType, overwrite: bool) -> SinkOptions:
        if overwrite:
            raise PipelineError(
                "the event log is append-only: write with mode('append') (outputMode 'append' for streams)",
                code="invalid_option",
            )
        opts = {k.lower(): v for k, v in options.items()}
        url = opts.get("url") or opts.get("path")
        token = opts.get("token")
        if not url or not token:
            raise PipelineError("give the broker's option('url', ...) and the caller's option('token', ...)",
                                code="invalid_option")
        on_error = opts.get("onerror", "fail").strip().lower()
        if on_error not in ("fail", "skip"):
            raise PipelineError(f"onError is 'fail' or 'skip', not {on_error!r}", code="invalid_option")
        try:
            shape = shape_of(schema, opts.get("namespace") or None)
            batch_size = int(opts.get("batchsize", DEFAULT_BATCH_SIZE))
            retries = int(opts.get("maxretries", 5))
            timeout_s = float(opts.get("timeout", 30.0))
        except ValueError as e:
            raise PipelineError(f"bad tidings sink option: {e}", code="invalid_option") from e
        if batch_size < 1 or retries < 0 or timeout_s <= 0:
            raise PipelineError("batchSize and timeout must be positive, maxRetries not negative",
                                code="invalid_option")
        return cls(url, token, shape, batch_size, on_error == "skip", retries, timeout_s)


@dataclass
class TaskReport(WriterCommitMessage):
    """A task's commit message: its :class:`Tally`."""

    tally: Tally


def row_key(write: str, partition: int, row: int) -> str:
    """The idempotency key of a row: the same whichever attempt publishes it."""
    return f"spark:{write}:{partition}:{row}"


def _write_of(opts: SinkOptions, ctx: Any) -> str:
    """What names the write across attempts: a stream's query id and micro-batch (the same
    when a restart runs the micro-batch again from the checkpoint), else the write's id."""
    if ctx is not None:
        query = ctx.getLocalProperty("sql.streaming.queryId")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        if query and batch is not None:
            return f"{query}:{batch}"
    return opts.write_id


def publish_rows(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> TaskReport:
    """Executor side: publish every row of ``batches`` in order, ``batch_size`` events a call."""
    from pyspark import TaskContext

    from ._publish import Backoff, BrokerPublisher
    from ._rows import RowRefused, to_event

    ctx = TaskContext.get()
    tally = Tally(ctx.partitionId() if ctx is not None else 0)
    write = _write_of(opts, ctx)
    broker = BrokerPublisher(opts.url, opts.token, timeout_s=opts.timeout_s, backoff=Backoff(opts.max_retries))
    pending: list[tuple[int, Event]] = []
    try:
        for batch in batches:
            for row in batch.select(opts.shape.columns).to_pylist(maps_as_pydicts="strict"):
                index = tally.rows
                tally.rows += 1
                try:
                    event = to_event(row, opts.shape)
                    event.idempotencyKey = row_key(write, tally.partition, index)
                    pending.append((index, event))
                except RowRefused as e:
                    tally.refuse(index, row.get("namespace"), e.code, e.message)
                if len(pending) >= opts.batch_size:
                    broker.publish(pending, tally)
                    pending = []
        if pending:
            broker.publish(pending, tally)
    finally:
        broker.close()
    return TaskReport(tally)


def check_reports(messages: list[Any], *, skip_refused: bool, what: str = "the write") -> None:
    """Driver side: raise ``write_refused`` when a task reports refused rows (unless skipping them)."""
    tallies = [m.tally for m in messages if isinstance(m, TaskReport)]
    rows = sum(t.rows for t in tallies)
    published = sum(t.published for t in tallies)
    refused = sum(t.refused for t in tallies)
    for w in sorted({w for t in tallies for w in t.warnings}):
        _log.warning("%s: the broker warned: %s", what, w)
    if not refused:
        return
    codes: Counter[str] = Counter()
    for t in tallies:
        codes.update(t.codes)
    # The first refusals, one line per distinct error: a bad batch often repeats one.
    first: dict[tuple[str, str], list[Refusal]] = {}
    for r in sorted((r for t in tallies for r in t.refusals), key=lambda r: (r.partition, r.row)):
        first.setdefault((r.code, r.message), []).append(r)
    lines = [
        f"{code}: {message} (first at {_where(rs[0])})"
        for (code, message), rs in list(first.items())[:_ERRORS_SHOWN]
    ]
    text = (
        f"{what}: {refused} of {rows} rows were refused ({published} published; "
        f"{', '.join(f'{c} {n}' for c, n in codes.most_common())}). First errors: {'; '.join(lines)}"
    )
    if skip_refused:
        _log.warning("%s", text)
        return
    raise PipelineError(f"write_refused: {text}", code="write_refused")


def _where(r: Refusal) -> str:
    return f"partition {r.partition} row {r.row}" + (f", {r.namespace}" if r.namespace else "")


class TidingsWriter(DataSourceArrowWriter):
    """``df.write.format("tidings")``: see the module docstring."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        return publish_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        check_reports(messages, skip_refused=self.options.skip_refused)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: what the finished tasks published stays in the log."""


class TidingsStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("tidings")``: each micro-batch published as a batch write is."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        return publish_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        check_reports(messages, skip_refused=self.options.skip_refused, what=f"micro-batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo, as for batch writes; the replayed micro-batch publishes again."""
