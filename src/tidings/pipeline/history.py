"""One read path for history: a namespace's events from the archive, the hot log, or both.

::

    from tidings.pipeline.history import events
    df = events(spark, "shop.orders", 1000, 2000, data_dir="var", archive_dir="archive",
                filter="amount > 100")

The seam is the archive manifest's high-water mark ``hwm`` for the namespace, read once
when the DataFrame is made: ids up to ``hwm`` come from the archive only, ids above it
from the hot log only. The archive job keeps every id up to ``hwm`` in the archive and
trims the hot log only up to ``hwm`` after the archive is durable, so the union has no
gap and no duplicate, even while rows the archive holds are still in the hot log.

Columns (:data:`HISTORY_COLUMNS`): ``seq``, ``namespace``, ``id``, ``prev_id``,
``timestamp`` (UTC ns), ``time``, ``source``, ``headers``, ``data`` (ICRC-16 wire JSON)
and ``data_view``, the ``VARIANT`` of the JSON view, which a filter
(:func:`tidings.pipeline.filters.to_column`) prunes inside Spark.

The DataFrame is lazy: if an archive run trims the hot log past the ``hwm`` read here
before the DataFrame is evaluated, those rows are missing from it. Evaluate it (or
``cache()`` it) before the next archive run, or make it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import pyarrow as pa

from ..core.filters import Filter
from ..core.int64 import INT64_MAX
from ..core.jsonview import json_view_bytes
from . import layout
from ._arrow import SPARK_SCHEMA
from .layout import Manifest

__all__ = ["ARCHIVE_SCHEMA", "HISTORY_COLUMNS", "events", "json_view_udf"]

ARCHIVE_SCHEMA: Final = f"{SPARK_SCHEMA}, namespace string, date date"
"""The archive's columns as Spark reads them: those of the files and the partition columns."""
HISTORY_COLUMNS: Final = (
    "seq", "namespace", "id", "prev_id", "timestamp", "time", "source", "headers", "data", "data_view",
)
Origin = Literal["both", "archive", "hot"]


def events(
    spark: Any,
    namespace: str,
    from_id: int | None = None,
    to_id: int | None = None,
    *,
    data_dir: str | Path | None = None,
    archive_dir: str | Path | None = None,
    filter: Filter | str | None = None,
    origin: Origin = "both",
) -> Any:
    """The events of ``namespace`` with ``from_id <= id < to_id`` (None: unbounded), as a DataFrame.

    ``origin`` picks the archive, the hot log, or both (the default; a missing
    ``archive_dir`` or ``data_dir`` simply contributes nothing). ``filter`` is filter
    text or a parsed filter over the event data (docs/filters.md).
    """
    from pyspark.sql import functions as F

    hwm = 0 if archive_dir is None else Manifest.load(Path(archive_dir)).hwm(namespace)
    parts = []
    if origin in ("both", "archive") and archive_dir is not None:
        part = _archived(spark, Path(archive_dir), namespace, hwm)
        if part is not None:
            parts.append(part)
    if origin in ("both", "hot") and data_dir is not None:
        # An explicit range narrows the read even in a session without filter pushdown.
        lo, hi = max(hwm + 1, from_id or 0), INT64_MAX if to_id is None else to_id - 1
        hot = (
            spark.read.format("tidings").schema(_HOT_SCHEMA).option("origin", "hot")
            .option("ranges", msgspec.json.encode([[namespace, lo, hi]]).decode())
            .load(str(data_dir))
        )
        parts.append(hot.where((F.col("namespace") == namespace) & (F.col("id") > hwm)).select(*HISTORY_COLUMNS))
    if not parts:
        df = spark.createDataFrame([], _HOT_SCHEMA)
    else:
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
    if from_id is not None:
        df = df.where(F.col("id") >= from_id)
    if to_id is not None:
        df = df.where(F.col("id") < to_id)
    if filter is not None:
        from .filters import to_column

        df = df.where(to_column(filter, "data_view"))
    return df


_HOT_SCHEMA: Final = "seq long, namespace string, id long, prev_id long, timestamp long, time timestamp, " \
    "source string, headers string, data string, data_view variant"


def _archived(spark: Any, root: Path, namespace: str, hwm: int) -> Any:
    from pyspark.sql import functions as F

    ns_dir = layout.namespace_dir(root, namespace)
    if hwm == 0 or not any(ns_dir.glob("date=*/*.parquet")):
        return None
    df = spark.read.schema(ARCHIVE_SCHEMA).option("basePath", str(root)).parquet(str(ns_dir))
    # Files above the mark belong to a run that has not finished: never read them.
    return df.where(F.col("id") <= hwm).withColumnRenamed("payload", "data_view").select(*HISTORY_COLUMNS)


def json_view_udf(col: Any) -> Any:
    """A column: the JSON view text of the ICRC-16 wire JSON in ``col``.

    The view is computed in Python (the wire-to-view rules live in
    :mod:`tidings.core.jsonview`), as an Arrow UDF over whole batches. The archive
    stores the view as a VARIANT already (``payload``) and the source makes one
    (``data_view``), so history needs neither.
    """
    return _view_udf()(col)


_UDF: list[Any] = []


def _view_udf() -> Any:
    if not _UDF:
        from pyspark.sql.functions import arrow_udf

        _UDF.append(arrow_udf(_view, "string"))  # type: ignore[call-overload]
    return _UDF[0]


def _view(data: pa.Array) -> pa.Array:
    decode = msgspec.json.decode
    return pa.array([None if d is None else json_view_bytes(decode(d)).decode() for d in data.to_pylist()])
