"""The archive's staging step as a Spark job: the same chunks, on executors.

``tidings archive --master URL`` plans, publishes, records the manifest and trims on
the driver exactly as the Arrow path does (:mod:`tidings.pipeline.archive`); only
step 3, reading the hot log and writing the staged Parquet, runs as Spark tasks, one
id chunk each (``spark.range`` of one row per chunk and ``mapInArrow``, which classic
sessions and Spark Connect both run). Each task calls the Arrow path's own
:func:`~tidings.pipeline._arrow.stage_chunk`, so the files, their columns, their
VARIANT ``payload`` and their statistics are those the Arrow path writes, byte for
byte: readers cannot tell which wrote them.

A task attempt that dies is run again by Spark and writes the same files (a file is
written under a temporary name and renamed, so a half-written one is never seen); a
job that fails or whose driver dies leaves only the staging folder, which the next run
removes. The manifest is untouched until every chunk has reported: the exactly-once seam
is the Arrow path's.

Failures of the tasks reach the driver as Spark's text; :func:`explain` turns them into
one :class:`PipelineError` line naming the cause and what to do.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from .errors import PipelineError

__all__ = ["CRASH_ENV", "explain", "stage_on_spark"]

CRASH_ENV: Final = "TIDINGS_PIPELINE_CRASH_AT"
"""Test hook, as in :mod:`tidings.pipeline.archive`: ``executor`` kills a task's first
attempt (its Python worker), ``driver`` has the first task kill the driver (same host only)."""
_RESULT_SCHEMA: Final = "k long, events long, files long"
_STORE_CODES: Final = ("store_unreachable", "store_not_found", "store_error", "driver_missing", "invalid_option")

Chunk = tuple[str, str, int, int, str, str]
"""``stage_chunk``'s arguments: location, namespace, lo, hi, staging folder, file tag."""


def stage_on_spark(spark: Any, chunks: Sequence[Chunk]) -> int:
    """Stage ``chunks`` as one Spark job, one task each; the events written.

    Raises :class:`PipelineError` (:func:`explain`) when the job fails."""
    if not chunks:
        return 0
    task = _task(list(chunks), os.getpid(), os.environ.get(CRASH_ENV, ""))
    df = spark.range(0, len(chunks), 1, len(chunks)).mapInArrow(task, _RESULT_SCHEMA)
    try:
        rows = df.collect()
    except Exception as e:  # Py4J, PythonException, Connect's errors: all text to the driver
        raise explain(e) from None
    done = sorted(r.k for r in rows)
    if done != list(range(len(chunks))):  # never expected: Spark reports each task once
        raise PipelineError(f"archive_task_failed: the Spark job reported chunks {done[:10]}... of {len(chunks)}",
                            code="archive_task_failed", hint="run the archive again")
    return int(sum(r.events for r in rows))


def _task(chunks: list[Chunk], driver: int, crash: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function each task runs (pickled with ``chunks``; it imports tidings on the executor)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from . import _arrow
        from .errors import PipelineError as Error

        for batch in batches:
            for k in batch.column(0).to_pylist():
                _crash_in_task(crash, driver, k)
                try:
                    events, files = _arrow.stage_chunk(*chunks[k])
                except Error as e:
                    # Spark hands the driver text only: the code leads it, as for the sink.
                    raise RuntimeError(e.line()) from None
                yield pa.RecordBatch.from_pydict(
                    {"k": [k], "events": [events], "files": [files]},
                    schema=pa.schema([("k", pa.int64()), ("events", pa.int64()), ("files", pa.int64())]),
                )

    return run


def _crash_in_task(crash: str, driver: int, k: int) -> None:
    if not crash:
        return
    from pyspark import TaskContext

    ctx = TaskContext.get()
    first = ctx is None or ctx.attemptNumber() == 0
    if crash == "executor" and first and k == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    if crash == "driver" and k == 0:
        os.kill(driver, signal.SIGKILL)


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
_CODED = re.compile(r"\b(" + "|".join(_STORE_CODES) + r"): ([^\n]*)")


def explain(e: BaseException) -> PipelineError:
    """A failed staging job as one :class:`PipelineError` naming its cause and what to do."""
    text = str(e)
    missing = _MISSING_MODULE.search(text)
    if missing is not None:
        return PipelineError(
            f"the executors cannot import {missing[1].split('.')[0]} (No module named {missing[1]!r})",
            code="executor_import",
            hint="install tidings (the same version, with its spark extra) in the executors' Python "
                 "(spark.pyspark.python or PYSPARK_PYTHON on every node)",
        )
    coded = _CODED.search(text)
    if coded is not None:
        return PipelineError(f"an executor: {coded[2].strip()}", code=coded[1],
                             hint="the executors must reach the store at the same address as this machine")
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), type(e).__name__)
    return PipelineError(f"the Spark job failed: {last[:500]}", code="archive_task_failed",
                         hint="see the executors' logs; the archive and the hot log are as they were, run it again")
