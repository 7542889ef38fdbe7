"""The hot log to Arrow and the archive's typed Parquet files, without Spark.

The archive job (:mod:`tidings.pipeline.archive`) runs :func:`stage_chunk` in worker
processes, one id range each: read the range from SQLite in one query into an Arrow
table (through the ADBC SQLite driver when it is installed, the ``spark`` extra brings
it; else the standard ``sqlite3`` module, a few times slower), add the typed columns,
and write one Parquet file per date into the staging folder.

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
import sqlite3
from pathlib import Path
from typing import Any, Final

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import _variant, layout

__all__ = ["FILE_SCHEMA", "SPARK_SCHEMA", "archive_table", "read_range", "stage_chunk", "write_file"]

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
# prev_id is NULL only on a chain's first event; ADBC infers a column's type from its
# first rows, so NULL travels as -1 (ids are positive) and is restored in Arrow.
_SELECT: Final = (
    "SELECT seq, id, IFNULL(prev_id, -1) AS prev_id, timestamp, source, "
    "CAST(headers AS TEXT) AS headers, CAST(data AS TEXT) AS data "
    "FROM events WHERE namespace = ? AND id BETWEEN ? AND ? ORDER BY id"
)
_READ_SCHEMA: Final = pa.schema(
    [("seq", pa.int64()), ("id", pa.int64()), ("prev_id", pa.int64()), ("timestamp", pa.int64()),
     ("source", pa.string()), ("headers", pa.string()), ("data", pa.string())]
)


def read_range(db: str | Path, namespace: str, lo: int, hi: int) -> pa.Table:
    """The hot log's events of ``namespace`` with ``lo <= id <= hi``, in id order (:data:`_READ_SCHEMA`)."""
    adbc: Any
    try:
        import adbc_driver_sqlite.dbapi as adbc
    except ImportError:  # the standard module: the same rows, a few times slower
        adbc = None
    if adbc is not None:
        uri = f"file:{db}?mode=ro"
        with adbc.connect(uri) as conn, conn.cursor() as cur:
            cur.execute(_SELECT, (namespace, lo, hi))
            table = cur.fetch_arrow_table()
        if table.num_rows == 0:
            return _READ_SCHEMA.empty_table()
        table = table.cast(_READ_SCHEMA)
    else:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = conn.execute(_SELECT, (namespace, lo, hi)).fetchall()
        finally:
            conn.close()
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(_READ_SCHEMA)
        table = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols, _READ_SCHEMA, strict=True)],
                                     schema=_READ_SCHEMA)
    prev = table.column("prev_id")
    return table.set_column(2, "prev_id", pc.if_else(pc.equal(prev, -1), None, prev))


def payload_array(data: pa.ChunkedArray | pa.Array) -> pa.StructArray:
    """The VARIANT ``payload`` of each ICRC-16 wire JSON text of ``data``."""
    decode = msgspec.json.decode
    encode = _variant.encode
    metas, values = [], []
    for text in data.to_pylist():
        m, v = encode(decode(text))
        metas.append(m)
        values.append(v)
    return pa.StructArray.from_arrays(
        [pa.array(metas, pa.binary()), pa.array(values, pa.binary())], fields=list(_VARIANT)
    )


def archive_table(events: pa.Table) -> tuple[pa.Table, pa.Array]:
    """``events`` (as :func:`read_range` gives them) with the typed columns, and each row's UTC day (int32)."""
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
    """One archive file, with the footer Spark reads the VARIANT column's type from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.cast(_WITH_FOOTER), path, compression="zstd", row_group_size=256 * 1024)


def stage_chunk(db: str, namespace: str, lo: int, hi: int, staging: str, tag: str) -> tuple[int, int]:
    """Archive the ids ``lo..hi`` of ``namespace`` into ``staging`` (one file per date); ``(events, files)``.

    Runs in a worker process: plain arguments, nothing shared.
    """
    events = read_range(db, namespace, lo, hi)
    if events.num_rows == 0:
        return 0, 0
    table, days = archive_table(events)
    ns_dir = layout.namespace_dir(Path(staging), namespace)
    files = 0
    for day in pc.unique(days).to_pylist():
        part = table.filter(pc.equal(days, day))
        date = pa.scalar(day, pa.int32()).cast(pa.date32()).as_py().isoformat()
        write_file(part, ns_dir / f"date={date}" / f"c-{tag}.parquet")
        files += 1
    return events.num_rows, files
