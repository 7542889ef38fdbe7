"""What only the PostgreSQL store has: migrations, and several processes on one database."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import asyncpg
import pytest

from tidings.errors import ConfigError, StoreError
from tidings.store import NewEvent, PostgresStore, SQLiteStore, StoredEvent, redact_address, store_for
from tidings.store._pg_migrations import MIGRATIONS

from .pg_support import fresh_schema

ALL_VERSIONS = [v for v, _, _ in MIGRATIONS]


def ev(ns: str, n: int) -> NewEvent:
    return NewEvent(namespace=ns, source="src", timestamp=n, data=b'{"Nat":%d}' % n)


def assert_gap_free(log: list[StoredEvent]) -> None:
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    by_ns: dict[str, list[StoredEvent]] = defaultdict(list)
    for e in log:
        by_ns[e.namespace].append(e)
    for evs in by_ns.values():
        assert [e.id for e in evs] == list(range(1, len(evs) + 1))
        assert [e.prev_id for e in evs] == [None, *range(1, len(evs))]


async def test_migrations_are_recorded_applied_once_and_a_newer_database_is_refused(pg_database: str) -> None:
    async with fresh_schema(pg_database) as schema:
        settings = {"search_path": schema}
        first = PostgresStore(pg_database, server_settings=settings)
        await first.open()
        assert first.migrated == ALL_VERSIONS
        await first.append([ev("a", 1)])
        await first.close()
        again = PostgresStore(pg_database, server_settings=settings)
        await again.open()
        assert again.migrated == []
        assert await again.head() == 1  # the data survived, nothing was recreated
        await again.close()

        conn = await asyncpg.connect(pg_database, server_settings=settings)
        try:
            assert await conn.fetchval("SELECT MAX(version) FROM schema_migrations") == ALL_VERSIONS[-1]
            await conn.execute("INSERT INTO schema_migrations(version, description) VALUES (999, 'from the future')")
        finally:
            await conn.close()
        newer = PostgresStore(pg_database, server_settings=settings)
        with pytest.raises(StoreError, match="newer than this tidings"):
            await newer.open()


async def test_stores_opening_at_once_migrate_once(pg_database: str) -> None:
    async with fresh_schema(pg_database) as schema:
        stores = [PostgresStore(pg_database, server_settings={"search_path": schema}) for _ in range(4)]
        await asyncio.gather(*(s.open() for s in stores))
        try:
            assert sorted(s.migrated for s in stores) == [[], [], [], ALL_VERSIONS]
        finally:
            await asyncio.gather(*(s.close() for s in stores))


async def test_several_stores_on_one_database_keep_ids_gap_free(pg_database: str) -> None:
    """Three stores (three broadcasters' connections) append at once to the same namespaces."""
    async with fresh_schema(pg_database) as schema:
        stores = [PostgresStore(pg_database, server_settings={"search_path": schema}) for _ in range(3)]
        for s in stores:
            await s.open()
        try:
            calls = [
                stores[i % 3].append([ev(("x", "y", "z")[(i + k) % 3], i) for k in range(i % 5 + 1)])
                for i in range(150)
            ]
            results = await asyncio.gather(*calls)
            for out in results:  # one call's events are contiguous
                assert [e.seq for e in out] == list(range(out[0].seq, out[0].seq + len(out)))
            log = await stores[0].read_after(0, limit=10_000)
            assert sorted((e for out in results for e in out), key=lambda e: e.seq) == log
            assert_gap_free(log)
        finally:
            for s in stores:
                await s.close()


_WRITER = textwrap.dedent("""
    import asyncio, sys
    from tidings.store import NewEvent, PostgresStore

    async def main(dsn, schema, name):
        s = PostgresStore(dsn, server_settings={"search_path": schema})
        await s.open()
        try:
            await asyncio.gather(*(
                s.append([NewEvent(namespace=n, source=name, timestamp=i, data=b"1") for n in "pq"[: i % 2 + 1]])
                for i in range(200)
            ))
        finally:
            await s.close()

    asyncio.run(main(*sys.argv[1:]))
""")


async def test_processes_sharing_the_database_keep_ids_gap_free(pg_database: str, tmp_path: Path) -> None:
    """Separate processes (as several ``tidings serve`` would be) append concurrently."""
    async with fresh_schema(pg_database) as schema:
        first = PostgresStore(pg_database, server_settings={"search_path": schema})
        await first.open()  # migrate once, then let the writers race
        try:
            script = tmp_path / "writer.py"
            script.write_text(_WRITER)
            procs = [
                await asyncio.create_subprocess_exec(sys.executable, str(script), pg_database, schema, f"w{i}")
                for i in range(3)
            ]
            assert [await p.wait() for p in procs] == [0, 0, 0]
            log = await first.read_after(0, limit=10_000)
            assert len(log) == 3 * 300
            assert {e.source for e in log} == {"w0", "w1", "w2"}
            assert_gap_free(log)
        finally:
            await first.close()


async def test_an_unreachable_database_is_a_store_error() -> None:
    s = PostgresStore("postgresql://nobody:secret@127.0.0.1:1/none")
    with pytest.raises(StoreError) as e:
        await s.open()
    assert "secret" not in str(e.value)


def test_store_for_picks_the_backend_from_the_address(tmp_path: Path) -> None:
    assert isinstance(store_for("", tmp_path / "t.db"), SQLiteStore)
    assert isinstance(store_for(f"sqlite://{tmp_path}/x.db", tmp_path / "t.db"), SQLiteStore)
    pg = store_for("postgresql://u:pw@h:5432/d", tmp_path / "t.db")
    assert isinstance(pg, PostgresStore) and pg.dsn == "postgresql://u:pw@h:5432/d"
    assert isinstance(store_for("postgres://h/d", tmp_path / "t.db"), PostgresStore)
    with pytest.raises(ConfigError, match="unknown store 'mysql'"):
        store_for("mysql://h/d", tmp_path / "t.db")
    assert redact_address("postgresql://u:pw@h:5432/d") == "postgresql://u@h:5432/d"
    assert redact_address("postgresql://h/d") == "postgresql://h/d"


def test_serve_refuses_an_unknown_store_with_its_setting_named(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tidings", "serve", "--port", "0", "--data-dir", str(tmp_path), "--store", "redis://x"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0
    assert "TIDINGS_STORE" in out.stderr and "Traceback" not in out.stderr


def test_serve_on_an_unreachable_database_says_so_and_leaves_nothing_open(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tidings", "serve", "--port", "0", "--data-dir", str(tmp_path),
         "--store", "postgresql://nobody:hunter2@127.0.0.1:1/none"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "cannot open PostgreSQL at postgresql://nobody@127.0.0.1:1/none" in out.stderr
    assert "hunter2" not in out.stderr and "Unclosed" not in out.stderr and "Traceback" not in out.stderr
