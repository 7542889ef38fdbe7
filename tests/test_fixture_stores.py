"""Every tidings opens the stores the versions before it made, and serves them.

``tests/fixtures/stores/<backend>-<schema version>/`` holds a small store with every kind
of record (principals and tokens, publications, subscriptions of each kind with their
signing secrets, events with headers, pending notifications, dead letters, delivery
records, statistics, schemas with versions and a compatibility setting, a replay and
replay credit), made through the API by ``tests/fixtures/make_stores.py``, and what it
holds (``expected.json``). A fixture is never changed: a new schema version adds one
(docs/operations.md, "Upgrades"). ``sqlite-0`` was made by the last tidings before the
store carried a version.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tidings.client import Admin, EventNotification, Publisher, Replays, Schemas, Subscriber
from tidings.store._pg_migrations import MIGRATIONS
from tidings.store._sqlite_migrations import SCHEMA_VERSION

from .conftest import ServerProcess, eventually, free_port

pytestmark = pytest.mark.e2e

STORES = Path(__file__).parent / "fixtures" / "stores"
FIXTURES = sorted(p for p in STORES.iterdir() if (p / "expected.json").exists())
ORDERS = "com.example.fixture.orders"
AUDIT = "com.example.fixture.audit"
SCHEMA = "tidings_fixture"


def psql(address: str, *args: str) -> str:
    out = subprocess.run(["psql", address, "-v", "ON_ERROR_STOP=1", "-Atq", *args], check=True,
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


def test_each_backend_has_a_fixture_at_the_current_schema_version() -> None:
    """A change of schema version comes with the fixture of the new version."""
    names = {p.name for p in FIXTURES}
    assert f"sqlite-{SCHEMA_VERSION}" in names
    assert f"postgresql-{MIGRATIONS[-1][0]}" in names


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
async def test_a_fixture_store_is_migrated_and_served(
    fixture: Path, tmp_path: Path, endpoints: Any, request: pytest.FixtureRequest
) -> None:
    expected = json.loads((fixture / "expected.json").read_text())
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    shutil.copyfile(fixture / "admin.token", data / "admin.token")
    # The fixture's pending notification was recorded when the fixture was made, after up to
    # 17 failed attempts: the default max age (a day) would dead-letter it once the fixture is
    # a day old, and the default max attempts (20) after the three or so pushes to its old
    # endpoint that can go out before the test points it at a live one.
    env = {"TIDINGS_WORKERS": "1", "TIDINGS_RETRY_INITIAL_S": "0.05", "TIDINGS_RETRY_MAX_S": "0.2",
           "TIDINGS_MAX_AGE_S": str(365 * 86_400), "TIDINGS_MAX_ATTEMPTS": "1000000",
           "TIDINGS_STORE": ""}
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
    version: Callable[[], int]
    if fixture.name.startswith("sqlite-"):
        shutil.copyfile(fixture / "tidings.db", data / "tidings.db")

        def version() -> int:
            conn = sqlite3.connect(f"file:{data / 'tidings.db'}?mode=ro", uri=True)
            try:
                return int(conn.execute("PRAGMA user_version").fetchone()[0])
            finally:
                conn.close()

        newest = SCHEMA_VERSION
    else:
        server_address = request.getfixturevalue("pg_database").rsplit("/", 1)[0]
        db = f"tidings_fixture_{os.getpid()}_{secrets.token_hex(4)}"
        psql(f"{server_address}/postgres", "-c", f'CREATE DATABASE "{db}"')
        cleanup = lambda: psql(f"{server_address}/postgres", "-c",  # noqa: E731
                               f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        psql(f"{server_address}/{db}", "-f", str(fixture / "dump.sql"))
        env["TIDINGS_STORE"] = f"{server_address}/{db}?search_path={SCHEMA}"

        def version() -> int:
            return int(psql(f"{server_address}/{db}", "-c", f"SELECT MAX(version) FROM {SCHEMA}.schema_migrations"))

        newest = MIGRATIONS[-1][0]
    assert version() == expected["schema_version"]
    server = ServerProcess(data, env=env, port=free_port())
    try:
        server.start(new_port_if_taken=True)
        assert version() == newest  # migrated at start
        await serves(server, expected, endpoints)
    finally:
        server.stop()
        cleanup()


async def serves(server: ServerProcess, expected: dict[str, Any], endpoints: Any) -> None:
    tokens = expected["tokens"]
    subs = expected["subscriptions"]
    for name, token in {**tokens, "admin": server.admin_token}.items():
        async with Admin(server.url, token) as admin:
            assert await admin.whoami() == name
    async with Admin(server.url, server.admin_token) as admin:
        names = {p.namespace for p in await admin.get_publications()}
        assert {ORDERS, AUDIT} <= names
        assert {s.id for s in await admin.get_subscriptions(namespace=ORDERS)} >= {
            subs["live"], subs["pending"], subs["dead"], subs["filtered"]
        }

    # The pending subscription's notifications, and the live one's next push, go out signed
    # with the secrets the fixture's subscriber was given.
    pending: list[int] = []
    live: list[int] = []

    def on_pending(n: EventNotification) -> None:
        pending.append(n.eventId)

    def on_live(n: EventNotification) -> None:
        live.append(n.eventId)

    pending_ep = await endpoints(Subscriber(on_pending, secret=expected["secrets"]["pending"], dedupe=False))
    live_ep = await endpoints(Subscriber(on_live, secret=expected["secrets"]["live"], dedupe=False))
    bob = Subscriber(lambda n: None, url=server.url, token=tokens["bob"])
    try:
        await bob.update(subs["pending"], endpoint=pending_ep.url)
        await bob.update(subs["live"], endpoint=live_ep.url)
        last = expected["namespaces"][ORDERS]
        async with Publisher(server.url, tokens["alice"]) as alice:
            assert await alice.publish(ORDERS, {"n": 100}) == last + 1  # ids continue gap-free
        await eventually(lambda: set(pending) >= set(range(1, last + 2)), timeout=30)
        await eventually(lambda: last + 1 in live, timeout=30)
        # The fixture's dead letters (events 1 to 30), and the new event's, dead too.
        letters = {d.eventId for d in await bob.dead_letters(subs["dead"], take=1000)}
        assert len(letters - {last + 1}) == expected["dead_letters"] == last
    finally:
        await bob.close()

    async with Schemas(server.url, server.admin_token) as schemas:
        for schema_id in expected["schemas"].values():
            assert await schemas.get(schema_id) is not None
        assert [v.version for v in await schemas.versions("fixture-order")] == [1, 2]
        assert await schemas.compatibility("fixture-order") == "BACKWARD"
    async with Replays(server.url, tokens["bob"]) as replays:
        status = await replays.status(expected["replay"])
        assert status is not None and next(iter(msgspec.to_builtins(status.status))) == "completed"
        assert (await replays.credit("bob")).balance > 0
