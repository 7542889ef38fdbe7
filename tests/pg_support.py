"""A throwaway PostgreSQL database for the test session, and a fresh schema per test.

``TIDINGS_TEST_STORE=postgresql`` runs every test's ``tidings serve`` on PostgreSQL
(each server in a schema of its own) instead of SQLite.

The server is the one on 127.0.0.1:5432 (user postgres, trust authentication; ``.ci/run``
starts it if absent). ``TIDINGS_TEST_PG`` names another server's address (without a
database). The database is created at the first test that asks for it and dropped at
the end of the session; each test gets a schema of its own in it, dropped after.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator

import pytest

from tidings.store import PostgresStore

SERVER = os.environ.get("TIDINGS_TEST_PG", "postgresql://postgres@127.0.0.1:5432")

_counter = itertools.count(1)


def _admin(sql: str) -> None:
    """Run ``sql`` on the server's ``postgres`` database with psql (the session fixture
    may be set up from inside a test's running event loop, so not with asyncpg here)."""
    subprocess.run(
        ["psql", f"{SERVER}/postgres", "-v", "ON_ERROR_STOP=1", "-qc", sql],
        check=True, capture_output=True, timeout=30,
    )


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """The address of a database made for this session, dropped after it."""
    name = f"tidings_test_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        _admin(f'CREATE DATABASE "{name}"')
    except (OSError, subprocess.CalledProcessError) as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no PostgreSQL at {SERVER}: {e}")
    try:
        yield f"{SERVER}/{name}"
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def fresh_schema(database: str) -> AsyncIterator[str]:
    """A new schema in ``database``, dropped after: give a store ``{"search_path": schema}``.

    (A helper rather than an async fixture: the store fixture asks for PostgreSQL only in
    its ``postgresql`` variant, and an async fixture cannot be asked for from inside one.)"""
    import asyncpg

    schema = f"t{os.getpid()}_{next(_counter)}"
    conn = await asyncpg.connect(database)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
        yield schema
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def two_members(database: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore, str]]:
    """Two stores open on one new schema (two broadcasters), and the schema's name."""
    async with fresh_schema(database) as schema:
        a = PostgresStore(database, server_settings={"search_path": schema})
        b = PostgresStore(database, server_settings={"search_path": schema})
        await a.open()
        await b.open()
        try:
            yield a, b, schema
        finally:
            await a.close()
            await b.close()


def schema_address(database: str) -> str:
    """A new schema in ``database``, as an address a server takes (``TIDINGS_STORE``):
    asyncpg passes the ``search_path`` query parameter on as a server setting. Dropped
    with the session's database."""
    schema = f"s{os.getpid()}_{next(_counter)}"
    subprocess.run(
        ["psql", database, "-v", "ON_ERROR_STOP=1", "-qc", f"CREATE SCHEMA {schema}"],
        check=True, capture_output=True, timeout=30,
    )
    return f"{database}?search_path={schema}"
