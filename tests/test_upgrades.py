"""Upgrades (docs/operations.md, "Upgrades"): a store written by a newer tidings is refused
at start naming both versions; on PostgreSQL, a member needing a newer schema is refused
while members of the older one run, and migrates once they are gone; members of one
schema version run side by side."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tidings.errors import StoreError
from tidings.store import _pg_migrations
from tidings.store._sqlite_migrations import SCHEMA_VERSION

from .conftest import ServerProcess, eventually
from .pg_support import schema_address

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).parent / "fixtures" / "stores" / f"sqlite-{SCHEMA_VERSION}"


def serve(data: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidings", "serve", "--port", "0", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "TIDINGS_WORKERS": "1", **env},
    )


def test_an_embedded_store_from_a_newer_tidings_is_refused_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(FIXTURE / "tidings.db", data / "tidings.db")
    conn = sqlite3.connect(data / "tidings.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = hashlib.sha256((data / "tidings.db").read_bytes()).hexdigest()
    out = serve(data, TIDINGS_STORE="")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert f"schema version {SCHEMA_VERSION + 1}, newer than this tidings knows ({SCHEMA_VERSION})" in out.stderr
    assert hashlib.sha256((data / "tidings.db").read_bytes()).hexdigest() == before  # not written to


def _newer() -> tuple[tuple[int, str, str], ...]:
    """The migrations of a tidings one schema version ahead of this one."""
    newest = _pg_migrations.MIGRATIONS[-1][0]
    return (*_pg_migrations.MIGRATIONS, (newest + 1, "a step of the next version", "CREATE TABLE next_step (x int)"))


async def _open_as_newer(address: str, monkeypatch: pytest.MonkeyPatch, peers_within_s: float) -> list[int]:
    from tidings.store.postgresql import PostgresStore

    dsn, _, query = address.partition("?")
    with monkeypatch.context() as m:
        m.setattr(_pg_migrations, "MIGRATIONS", _newer())
        store = PostgresStore(
            dsn, server_settings={"search_path": query.partition("=")[2]}, peers_within_s=peers_within_s
        )
        await store.open()
        await store.close()
        return store.migrated


def _version(address: str) -> int:
    dsn, _, query = address.partition("?")
    out = subprocess.run(
        ["psql", dsn, "-Atqc", f"SELECT MAX(version) FROM {query.partition('=')[2]}.schema_migrations"],
        check=True, capture_output=True, text=True, timeout=30,
    )
    return int(out.stdout)


async def test_a_rolling_upgrade_across_schema_versions_is_refused_until_the_old_members_stop(
    server_factory: Callable[..., ServerProcess], pg_database: str, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    store = schema_address(pg_database)
    current = _pg_migrations.MIGRATIONS[-1][0]
    # Members of one schema version run side by side (a rolling restart within a version).
    a = server_factory(store=store, broadcaster_id="member-a")
    (tmp_path / "b").mkdir()
    shutil.copy(a.data_dir / "admin.token", tmp_path / "b" / "admin.token")  # made by the first member
    b = ServerProcess(tmp_path / "b", env={**a.env, "TIDINGS_BROADCASTER_ID": "member-b"})
    b.start(new_port_if_taken=True)
    try:
        # A member needing the next schema version is refused while they run, naming both
        # versions and the members; the database is left at its version.
        with pytest.raises(StoreError) as refused:
            await _open_as_newer(store, monkeypatch, 5)
        message = str(refused.value)
        assert f"schema version {current}" in message and f"needs version {current + 1}" in message
        assert "member-a" in message and "member-b" in message
        assert _version(store) == current

        # Once they are stopped, and counted gone (the window after their last heartbeat),
        # the newer member migrates.
        a.stop()
        b.stop()
        applied: list[list[int]] = []

        async def migrated() -> bool:
            with contextlib.suppress(StoreError):
                applied.append(await _open_as_newer(store, monkeypatch, 5))
            return bool(applied)

        await eventually(migrated, timeout=20, interval=0.5)
        assert applied == [[current + 1]]
        assert _version(store) == current + 1
    finally:
        b.stop()

    # A member of the older version is now refused at start, naming both versions.
    out = serve(a.data_dir, TIDINGS_STORE=store, TIDINGS_BROADCASTER_ID="member-a")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert f"schema version {current + 1}, newer than this tidings knows ({current})" in out.stderr
