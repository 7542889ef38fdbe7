"""What live idempotency keys cost: disk (SQLite, PostgreSQL) and memory (the in-memory
store) per million keys, as the publish path writes them (docs/wire-format.md,
"Idempotency keys")::

    .venv/bin/python -m bench.keys [--keys 1000000]

Each key as the SDK makes it (a UUID, 36 characters) with its SHA-256 fingerprint, the
publisher's name, the event id and the expiry. On SQLite a key is three columns of its
event's row and an entry of the writer's index in memory (``store/_sqlite_keys``): the
file's cost is that of keyed events over plain ones, and the index is measured as a start
rebuilds it. On PostgreSQL a key is the same three columns, found through a unique
partial index on (namespace, key), with a ``key_spans`` row per append for the reclaimer
(``store/_pg_keyed_events``); the brokers keep none in memory.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sqlite3
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from tidings.store import KeyRecord
from tidings.store._sqlite_keys import KeyIndex
from tidings.store._sqlite_migrations import migrate


def _rows(n: int) -> Any:
    for i in range(n):
        key = str(uuid.UUID(int=i * 7919 + 1))
        yield "bench.keys", key, hashlib.sha256(key.encode()).digest(), "publisher", i + 1, 10**18 + i


def _sqlite_log(path: Path, n: int, keyed: bool) -> sqlite3.Connection:
    """A store of ``n`` events (keyed or not) made by the migrations, checkpointed."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    migrate(conn, str(path))
    conn.execute("BEGIN")
    data = b'{"Nat":1}'
    for i, (ns, key, fp, src, eid, exp) in enumerate(_rows(n)):
        conn.execute(
            "INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, data, headers, "
            "idem_key, idem_fp, idem_expires) VALUES (?, ?, ?, ?, ?, ?, ?, x'5b5d', ?, ?, ?)",
            (i + 1, ns, eid, eid - 1 or None, i, src, data, *((key, fp, exp) if keyed else (None, None, None))),
        )
    if keyed:
        conn.execute("INSERT INTO key_spans VALUES (1, ?, ?, ?)", (n, 10**18, 10**18 + n))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return conn


def sqlite_costs(n: int) -> tuple[int, int, float]:
    """(the file's growth, the writer index's memory, seconds to rebuild it at start) for
    ``n`` live keys."""
    with tempfile.TemporaryDirectory(prefix="bench-keys-") as d:
        plain = _sqlite_log(Path(d) / "plain.db", n, keyed=False)
        plain.close()
        conn = _sqlite_log(Path(d) / "keyed.db", n, keyed=True)
        disk = (Path(d) / "keyed.db").stat().st_size - (Path(d) / "plain.db").stat().st_size
        t0 = time.perf_counter()
        KeyIndex().load(conn)
        took = time.perf_counter() - t0
        tracemalloc.start()
        index = KeyIndex()
        index.load(conn)
        size, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(index) == n
        conn.close()
        return disk, size, took


async def postgresql_bytes(n: int, address: str) -> int:
    """What ``n`` keyed events take over ``n`` plain ones in PostgreSQL (``events`` with its
    indexes, ``key_spans``, one span per 100 events as publish-100 writes them), each in a
    schema made by the store's migrations and dropped after."""
    import asyncpg

    from tidings.store import PostgresStore

    sizes = []
    for keyed in (False, True):
        schema = f"bench_keys_{os.getpid()}_{int(keyed)}"
        conn = await asyncpg.connect(address)
        try:
            await conn.execute(f"CREATE SCHEMA {schema}")
            store = PostgresStore(address, server_settings={"search_path": schema})
            await store.open()  # the migrations
            await store.close()
            await conn.execute(f"SET search_path = {schema}")
            records = [
                (i + 1, ns, eid, eid - 1 or None, i, src, b'{"Nat":1}', b"[]",
                 *((key, fp, exp) if keyed else (None,) * 3))
                for i, (ns, key, fp, src, eid, exp) in enumerate(_rows(n))
            ]
            await conn.copy_records_to_table(
                "events", records=records, schema_name=schema,
                columns=["seq", "namespace", "id", "prev_id", "timestamp", "source", "data", "headers",
                         "idem_key", "idem_fp", "idem_expires"],
            )
            if keyed:
                await conn.copy_records_to_table("key_spans", schema_name=schema, records=[
                    (lo, min(lo + 99, n), 10**18 + lo, 10**18 + lo + 99) for lo in range(1, n + 1, 100)
                ])
            await conn.execute("VACUUM ANALYZE events")
            await conn.execute("VACUUM ANALYZE key_spans")
            sizes.append(int(await conn.fetchval(
                "SELECT pg_total_relation_size('events') + pg_total_relation_size('key_spans')")))
        finally:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            await conn.close()
    return sizes[1] - sizes[0]


def memory_bytes(n: int) -> int:
    """Python heap for ``n`` keys in the in-memory store's dict."""
    tracemalloc.start()
    keys = {(ns, k): KeyRecord(ns, k, fp, src, eid, exp) for ns, k, fp, src, eid, exp in _rows(n)}
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(keys) == n
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--postgresql", default="postgresql://postgres@127.0.0.1:5432/postgres",
                    help="a server to measure on ('' to skip)")
    a = ap.parse_args()
    per_m = 1_000_000 / a.keys
    disk, index, took = sqlite_costs(a.keys)
    print(f"SQLite file (keyed events over plain ones, and their spans): {disk * per_m / 2**20:.0f} MiB "
          "per million live keys")
    print(f"SQLite writer's index (Python heap): {index * per_m / 2**20:.0f} MiB per million live keys, "
          f"rebuilt at start in {took:.1f} s for {a.keys:,}")
    if a.postgresql:
        size = asyncio.run(postgresql_bytes(a.keys, a.postgresql))
        print(f"PostgreSQL (keyed events over plain ones, their index and spans): {size * per_m / 2**20:.0f} MiB "
              "per million live keys")
    print(f"memory store (Python heap): {memory_bytes(a.keys) * per_m / 2**20:.0f} MiB per million live keys")


if __name__ == "__main__":
    main()
