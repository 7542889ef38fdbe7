"""The hot log to Arrow and the archive's typed Parquet files, without Spark.

The archive job (:mod:`tidings.pipeline.archive`) runs :func:`stage_chunk` in worker
processes, one id range each: read the range from the hot log in one query into an
Arrow table (``Session.read_arrow``: the ADBC SQLite or PostgreSQL driver, which the
``spark`` extra brings; SQLite falls back to the standard ``sqlite3`` module, a few
times slower), add the typed columns, and write one Parquet file per date into the
staging folder.

Columns of an archive file (:data:`FILE_SCHEMA`; ``namespace`` and ``date`` are the
partition directories): ``seq``, ``id``, ``prev_id``, ``timestamp`` (UTC ns,
lossless), ``time`` (TIMESTAMP, µs, UTC), ``source``, ``headers`` (JSON of the
ICRC-16 Map pairs), ``data`` (ICRC-16 wire JSON, lossless) and ``payload``: the JSON
view of ``data`` as a Spark ``VARIANT`` (:mod:`tidings.pipeline._variant`). Spark
reads ``payload`` as a VARIANT from the schema the file's footer carries under
Spark's own key, as it does for the files it writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import _variant, layout
from ._backend import hot_log

__all__ = ["FILE_SCHEMA", "SPARK_SCHEMA", "archive_table", "stage_chunk", "write_file"]

DAY_NS: Final = 86_400 * 10**9
SPARK_METADATA_KEY: Final = b"org.apache.spark.sql.parquet.row.metadata"
_VARIANT: Final = pa.struct([pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary(), False)])
FILE_SCHEMA: Final = pa.schema(
    [
        pa.field("seq", pa.int64(), False),
        pa.field("id", pa.int64(), False),
        pa.field("prev_id", pa.int64(), True),
        pa.field("timestamp", pa.int64(), False),
        pa.field("time", pa.timestamp("us", tz="UTC"), False),
        pa.field("source", pa.string(), False),
        pa.field("headers", pa.string(), False),
        pa.field("data", pa.string(), False),
        pa.field("payload", _VARIANT, False),
    ]
)
SPARK_SCHEMA: Final = (
    "seq long, id long, prev_id long, timestamp long, time timestamp, source string, headers string, "
    "data string, payload variant"
)
"""The files' columns as Spark sees them (DDL)."""
_SPARK_TYPES: Final = {"seq": "long", "id": "long", "prev_id": "long", "timestamp": "long", "time": "timestamp",
                       "source": "string", "headers": "string", "data": "string", "payload": "variant"}
_SPARK_JSON: Final = json.dumps(
    {"type": "struct", "fields": [
        {"name": f.name, "type": _SPARK_TYPES[f.name], "nullable": f.nullable, "metadata": {}} for f in FILE_SCHEMA
    ]},
    separators=(",", ":"),
).encode()
_WITH_FOOTER: Final = FILE_SCHEMA.with_metadata({SPARK_METADATA_KEY: _SPARK_JSON})
_DICTIONARY: Final = ["source", "headers", "payload.metadata"]
_STATISTICS: Final = ["seq", "id", "prev_id", "timestamp", "time", "source"]


_SLICE: Final = 1 << 18  # rows per native call: its output buffers stay far below 2 GiB


def payload_array(data: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
    """The VARIANT ``payload`` of each ICRC-16 wire JSON text of ``data`` (a string column)."""
    chunks = data.chunks if isinstance(data, pa.ChunkedArray) else [data]
    if _variant.native is None:
        return pa.chunked_array([_payload_python(c) for c in chunks], _VARIANT)
    out = []
    for chunk in chunks:
        if chunk.null_count:
            raise ValueError("an event without data reached the archive")
        for at in range(0, len(chunk), _SLICE):
            out.append(_payload_native(chunk.slice(at, _SLICE)))
    return pa.chunked_array(out, _VARIANT)


def _payload_native(texts: pa.Array) -> pa.StructArray:
    """The C encoder over the Arrow buffers: no Python object per row."""
    wide = pa.types.is_large_string(texts.type)
    _, offsets, data = texts.buffers()
    n = len(texts)
    mo, md, vo, vd = _variant.native.encode_column(  # type: ignore[union-attr]
        data if data is not None else b"", offsets, wide, texts.offset, n, _variant.encode_text
    )
    metas = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(mo), pa.py_buffer(md)])
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(vo), pa.py_buffer(vd)])
    return pa.StructArray.from_arrays([metas, values], fields=list(_VARIANT))


def _payload_python(texts: pa.Array) -> pa.StructArray:
    decode = msgspec.json.decode
    encode = _variant.encode
    metas, values = [], []
    for text in texts.to_pylist():
        m, v = encode(decode(text))
        metas.append(m)
        values.append(v)
    return pa.StructArray.from_arrays(
        [pa.array(metas, pa.binary()), pa.array(values, pa.binary())], fields=list(_VARIANT)
    )


def archive_table(events: pa.Table) -> tuple[pa.Table, pa.Array]:
    """``events`` (as ``Session.read_arrow`` gives them) with the typed columns, and each row's UTC day (int32)."""
    ts = events.column("timestamp")
    time_us = pc.divide(ts, 1000).cast(pa.timestamp("us", tz="UTC"))
    days = pc.divide(ts, DAY_NS).cast(pa.int32())  # integer division: timestamps are positive
    table = pa.Table.from_arrays(
        [events.column(n) for n in ("seq", "id", "prev_id", "timestamp")]
        + [time_us]
        + [events.column(n) for n in ("source", "headers", "data")]
        + [payload_array(events.column("data"))],
        schema=FILE_SCHEMA,
    )
    return table, days.combine_chunks()


def write_file(table: pa.Table, path: Path) -> None:
    """One archive file, with the footer Spark reads the VARIANT column's type from.

    Written under a temporary name (a dot first: no reader lists it) and renamed: a task
    killed half way, and the attempt Spark runs after it, never leave half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(
        table.cast(_WITH_FOOTER), tmp, compression="zstd", row_group_size=256 * 1024,
        # A dictionary pays only where values repeat, and statistics only where a reader
        # prunes with them (id, time, source); elsewhere both cost time and bytes
        # (a third of the write time, and a file a third larger:
        # docs/benchmarks/history/2026-11-25-pipeline-3-native-encoder.md).
        use_dictionary=_DICTIONARY, write_statistics=_STATISTICS,
    )
    os.replace(tmp, path)


def stage_chunk(location: str, namespace: str, lo: int, hi: int, staging: str, tag: str) -> tuple[int, int]:
    """Archive the ids ``lo..hi`` of ``namespace`` of the hot log at ``location`` into
    ``staging`` (one file per date); ``(events, files)``.

    Runs in a worker process: plain arguments, nothing shared; it opens its own connection.
    """
    with hot_log(location).connect() as conn:
        events = conn.read_arrow(namespace, lo, hi)
    if events.num_rows == 0:
        return 0, 0
    table, days = archive_table(events)
    ns_dir = layout.namespace_dir(Path(staging), namespace)
    files = 0
    for day, part in day_parts(table, days):
        date = pa.scalar(day, pa.int32()).cast(pa.date32()).as_py().isoformat()
        write_file(part, ns_dir / f"date={date}" / f"c-{tag}.parquet")
        files += 1
    return events.num_rows, files


def day_parts(table: pa.Table, days: pa.Array) -> Iterator[tuple[int, pa.Table]]:
    """``table``'s rows per UTC day (``days``, one per row), each day's rows in their order.

    Events come in id order, which is time order as a rule, so each day is a run of rows
    and a slice of the table (no copy); otherwise a stable sort by day makes it so."""
    n = len(days)
    if n > 1 and not pc.all(pc.greater_equal(days.slice(1), days.slice(0, n - 1))).as_py():
        order = pc.sort_indices(days)  # stable: the rows of a day keep their order
        table, days = table.take(order), days.take(order)
    runs = pc.run_end_encode(days)
    start = 0
    for end, day in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
        yield day, table.slice(start, end - start)
        start = end
