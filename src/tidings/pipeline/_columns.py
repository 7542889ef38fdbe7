"""The columns of the ``tidings`` source, and hot-log rows as Arrow batches of them.

Shared by the batch reader (:mod:`tidings.pipeline.source`) and the stream reader
(:mod:`tidings.pipeline.stream`); on executors, :func:`to_batch` turns each page of
hot-log rows (SQLite or PostgreSQL alike) into one batch.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType, VariantType

from ..core.jsonview import json_view_bytes
from . import _variant
from .errors import PipelineError

__all__ = ["COLUMNS", "DEFAULT_PARTITION_SIZE", "EVENT_SCHEMA", "check_schema", "to_batch"]

EVENT_SCHEMA: Final = StructType(
    [
        StructField("seq", LongType(), False),
        StructField("namespace", StringType(), False),
        StructField("id", LongType(), False),
        StructField("prev_id", LongType(), True),
        StructField("timestamp", LongType(), False),
        StructField("time", TimestampType(), False),
        StructField("source", StringType(), False),
        StructField("headers", StringType(), False),
        StructField("data", StringType(), False),
        StructField("data_json", StringType(), False),
    ]
)
COLUMNS: Final = {
    **{f.name: f.dataType for f in EVENT_SCHEMA.fields},
    "data_view": VariantType(),
}
"""Every column a reader can be asked for: those of :data:`EVENT_SCHEMA`, and ``data_view``,
the JSON view as a ``VARIANT`` (:mod:`tidings.pipeline._variant`: about 1 µs an event in C,
several in Python)."""
DEFAULT_PARTITION_SIZE: Final = 100_000
_decode = msgspec.json.decode


def check_schema(schema: StructType) -> None:
    """Raise :class:`PipelineError` unless every field of ``schema`` is a column of the source, with its type."""
    bad = [f"{f.name} {f.dataType.simpleString()}" for f in schema.fields if COLUMNS.get(f.name) != f.dataType]
    if bad:
        known = ", ".join(f"{k} {t.simpleString()}" for k, t in COLUMNS.items())
        raise PipelineError(f"the tidings source has no columns {bad}; it has {known}", code="invalid_option")


def to_batch(rows: list[tuple[Any, ...]], columns: list[str], arrow_schema: pa.Schema) -> pa.RecordBatch:
    """Hot-log rows (:data:`tidings.pipeline._hotlog.EVENT_COLUMNS`) as an Arrow batch of ``columns``."""
    arrays = []
    for name in columns:
        if name == "time":
            values: list[Any] = [r[4] // 1000 for r in rows]
        elif name == "headers":
            values = [bytes(r[6]).decode() for r in rows]
        elif name == "data":
            values = [bytes(r[7]).decode() for r in rows]
        elif name == "data_json":
            values = [json_view_bytes(_decode(r[7])).decode() for r in rows]
        elif name == "data_view":
            values = [{"value": v, "metadata": m} for m, v in (_variant.encode_text(bytes(r[7])) for r in rows)]
        else:
            values = [r[_ROW_INDEX[name]] for r in rows]
        arrays.append(pa.array(values, type=arrow_schema.field(name).type))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


_ROW_INDEX: Final = {"seq": 0, "namespace": 1, "id": 2, "prev_id": 3, "timestamp": 4, "source": 5}
