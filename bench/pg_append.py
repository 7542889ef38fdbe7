"""The database's own cost of a keyed append on PostgreSQL: ``tidings_append`` called
directly (no broker, no HTTP), 100 events per call, one connection, with and without an
idempotency key per event (time-ordered, as the SDK's), alternated.

Prints µs per event for each round and the medians. What it isolates is the statement's
work in the database (heap and index inserts, WAL, the commit's flush) plus asyncpg's
encoding; ``python -m bench`` measures the whole path.

Run: ``.venv/bin/python -m bench.pg_append [--rounds 6] [--calls 200] [--dsn postgresql://...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time

import asyncpg

from tidings.core.keys import RANDOM_BYTES, uuid7
from tidings.store import PostgresStore
from tidings.store._pg_events import _APPEND

_N = 100


async def _calls(c: asyncpg.Connection, keyed: bool, calls: int) -> float:
    now = time.time_ns()
    # The keys are made before the clock starts: what is timed is the database's work and
    # asyncpg's encoding, not this client's making of keys.
    made: list[tuple[list[object] | None, ...]] = []
    for _ in range(calls):
        keys: tuple[list[object] | None, ...] = (None, None, None)
        if keyed:
            ms = int(time.time() * 1000)
            keys = ([uuid7(ms, os.urandom(RANDOM_BYTES)) for _ in range(_N)], [os.urandom(32) for _ in range(_N)],
                    [now + 600 * 10**9] * _N)
        made.append(keys)
    t0 = time.perf_counter()
    for keys in made:
        rows = await c.fetch(_APPEND, ["n"] * _N, [now] * _N, ["s"] * _N, [b'{"Nat":1}'] * _N, [b"[]"] * _N,
                             None, None, "bench", [], [], [], [], *keys)
        assert len(rows) == _N
    return (time.perf_counter() - t0) / (calls * _N) * 1e6


async def main(dsn: str, rounds: int, calls: int) -> None:
    schema = f"bench_append_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f"CREATE SCHEMA {schema}")
    try:
        store = PostgresStore(dsn, server_settings={"search_path": schema})
        await store.open()  # the migrations
        await store.close()
        c = await asyncpg.connect(dsn, server_settings={"search_path": schema})
        try:
            got: dict[str, list[float]] = {"plain": [], "keyed": []}
            for r in range(rounds):
                for kind in ("plain", "keyed"):
                    got[kind].append(await _calls(c, kind == "keyed", calls))
                print(f"round {r + 1}: plain {got['plain'][-1]:.1f}, keyed {got['keyed'][-1]:.1f} µs/event")
            p, k = statistics.median(got["plain"]), statistics.median(got["keyed"])
            print(f"median: plain {p:.1f}, keyed {k:.1f} µs/event; a key costs the database {k - p:.1f} µs")
        finally:
            await c.close()
    finally:
        await admin.execute(f"DROP SCHEMA {schema} CASCADE")
        await admin.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()
    asyncio.run(main(a.dsn, a.rounds, a.calls))
