"""Backups of a running embedded store, and their restore (docs/operations.md, "Backup and restore").

The whole path: a backup taken by ``tidings backup`` while publishers and a subscriber
run, the server killed, ``tidings restore`` into a new data folder, a server started on
it; then every kind of record is there and delivery resumes from the backed-up positions.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tidings.client import EventNotification, Publisher, Replays, Schemas, Subscriber

from .conftest import ServerProcess, eventually
from .pg_support import schema_address
from .test_e2e_guarantees import MAX_ATTEMPTS

pytestmark = pytest.mark.e2e

NS = "com.example.backup"


def tidings(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidings", *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})},
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def backed_up_cursor(backup: Path, sub_id: int) -> int:
    conn = sqlite3.connect(f"file:{backup / 'tidings.db'}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT cursor FROM subscriptions WHERE id = ?", (sub_id,)).fetchone()[0])
    finally:
        conn.close()


Backup = Callable[[ServerProcess], Awaitable[tuple[int, Callable[[int], int]]]]
"""Take a backup of the running server; return the last backed-up event id of ``NS``
and a function giving a subscription's backed-up cursor."""
Restore = Callable[[ServerProcess], ServerProcess]
"""After the server is killed, restore the backup and return a server (not started) on it."""


async def scenario(server: ServerProcess, endpoints: Any, take: Backup, put_back: Restore) -> None:
    """Publishers and a subscriber run while ``take`` backs up; the server is killed; the
    server ``put_back`` gives is started: every kind of record is there and works."""
    alice_token = server.cli("principal", "create", "alice")
    got: list[tuple[str, int]] = []

    async def handle(n: EventNotification) -> None:
        got.append((n.namespace, n.eventId))

    # dedupe off: what is delivered again after the restore must reach the handler. The
    # Subscriber verifies every push with the secret it registered the subscription with.
    sub = Subscriber(handle, url=server.url, token=server.admin_token, dedupe=False)
    ep = await endpoints(sub)
    async with Publisher(server.url, alice_token) as alice, Schemas(server.url, server.admin_token) as schemas:
        await alice.register_publication(NS)
        sub_id = await sub.subscribe(NS, ep.url)
        dead_sub = await sub.subscribe(NS, "http://127.0.0.1:9/", config={MAX_ATTEMPTS: 1})
        schema = await schemas.register({"type": "object"}, name="backup-test")
        await alice.publish_many(NS, range(50))
        keyed_id = await alice.publish(NS, "keyed", key="backed-up-key")  # its key is in the backup too

        async def publishing() -> None:
            n = 0
            while True:
                await alice.publish_many(NS, range(n, n + 5))
                n += 5
                await asyncio.sleep(0.005)

        await eventually(lambda: len(got) >= 50, timeout=20)
        async with Replays(server.url, server.admin_token) as replays:
            replay = await replays.register(NS, 1, 10, subscription=sub_id)
        await eventually(lambda: len(_letters(server)) >= 1, timeout=20)
        load = asyncio.create_task(publishing())
        await asyncio.sleep(0.3)
        last, cursor_of = await take(server)
        await asyncio.sleep(0.3)  # events published, and delivered, after the backup
        load.cancel()
        with pytest.raises(asyncio.CancelledError):
            await load
    cursor = cursor_of(sub_id)
    await eventually(lambda: max(i for _, i in got) > last, timeout=20)  # some delivered after the backup
    server.kill()
    before = list(got)

    restored = put_back(server)
    restored.start()
    try:
        # At least once: everything after the backed-up position comes again, same ids.
        again = {(NS, i) for i in range(cursor + 1, last + 1)}
        await eventually(lambda: again <= set(got[len(before):]), timeout=30)
        assert {i for _, i in got} >= set(range(1, last + 1))
        async with Publisher(restored.url, alice_token) as alice:  # alice's token still works
            # A retry after the restore is recognised: the key came back with its event.
            assert await alice.publish(NS, "keyed", key="backed-up-key") == keyed_id
            assert await alice.publish(NS, "after") == last + 1  # gap-free after the backed-up events
        await eventually(lambda: (NS, last + 1) in got[len(before):], timeout=20)  # signed as before
        async with Schemas(restored.url, restored.admin_token) as schemas:
            info = await schemas.get(schema.id)
            assert info is not None
        async with Replays(restored.url, restored.admin_token) as replays:
            assert await replays.status(replay) is not None
        letters = _letters(restored)
        assert [(d["subscription"], d["namespace"]) for d in letters][:1] == [(dead_sub, NS)]
    finally:
        restored.stop()
        await sub.close()


async def test_sqlite_backup_under_load_kill_restore_resumes(
    server_factory: Callable[..., ServerProcess], endpoints: Any, tmp_path: Path
) -> None:
    server = server_factory(retry_initial_s="0.05", retry_max_s="0.2", store="")
    bk = tmp_path / "bk"

    async def take(server: ServerProcess) -> tuple[int, Callable[[int], int]]:
        made = await asyncio.to_thread(tidings, "backup", str(bk), "--data-dir", str(server.data_dir),
                                       env={"TIDINGS_STORE": ""})
        assert made.returncode == 0, made.stderr
        assert "(100%)" in made.stderr  # progress
        manifest = json.loads((bk / "backup.json").read_text())
        return manifest["namespaces"][NS], lambda sub_id: backed_up_cursor(bk, sub_id)

    def put_back(server: ServerProcess) -> ServerProcess:
        assert mode(bk) == 0o700
        assert {p.name: mode(p) for p in bk.iterdir()} == {
            "tidings.db": 0o600, "admin.token": 0o600, "backup.json": 0o600,
        }
        data = tmp_path / "restored"
        done = tidings("restore", str(bk), "--data-dir", str(data), env={"TIDINGS_STORE": ""})
        assert done.returncode == 0, done.stderr
        assert mode(data) == 0o700 and mode(data / "tidings.db") == 0o600 and mode(data / "admin.token") == 0o600
        assert (data / "admin.token").read_text() == (server.data_dir / "admin.token").read_text()
        return ServerProcess(data, env=dict(server.env), port=server.port)

    await scenario(server, endpoints, take, put_back)


def dump_rows(dump: Path, table: str) -> list[list[str]]:
    """A table's rows as the dump holds them (COPY's text format), read without restoring it."""
    out = subprocess.run(["pg_restore", "--data-only", f"--table={table}", "--file=-", str(dump)],
                         check=True, capture_output=True, text=True, timeout=60).stdout.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("COPY "))
    end = out.index("\\.", start)
    return [line.split("\t") for line in out[start + 1 : end]]


def psql(address: str, sql: str) -> str:
    out = subprocess.run(["psql", address, "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
                         check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


async def test_postgresql_dump_under_load_kill_restore_resumes(
    server_factory: Callable[..., ServerProcess], endpoints: Any, tmp_path: Path, pg_database: str
) -> None:
    """The documented PostgreSQL path: ``pg_dump -Fc -n SCHEMA`` of the running store,
    ``pg_restore`` into a new database, a server started on it."""
    store = schema_address(pg_database)
    schema = store.rsplit("search_path=", 1)[1]
    server = server_factory(retry_initial_s="0.05", retry_max_s="0.2", store=store)
    dump = tmp_path / "tidings.dump"
    target = f"tidings_restore_{os.getpid()}_{secrets.token_hex(4)}"
    server_address = pg_database.rsplit("/", 1)[0]

    async def take(server: ServerProcess) -> tuple[int, Callable[[int], int]]:
        out = await asyncio.to_thread(subprocess.run, [
            "pg_dump", "--format=custom", f"--schema={schema}", f"--file={dump}", pg_database,
        ], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        heads = dump_rows(dump, "namespace_heads")
        subs = {int(r[0]): int(r[6]) for r in dump_rows(dump, "subscriptions")}
        return next(int(r[1]) for r in heads if r[0] == NS), subs.__getitem__

    def put_back(server: ServerProcess) -> ServerProcess:
        psql(f"{server_address}/postgres", f'CREATE DATABASE "{target}"')
        out = subprocess.run(["pg_restore", "--no-owner", f"--dbname={server_address}/{target}", str(dump)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        (tmp_path / "pg-restored").mkdir()
        # The admin token file is the data folder's, not the database's: the operator keeps it.
        (tmp_path / "pg-restored" / "admin.token").write_text(server.admin_token)
        return ServerProcess(tmp_path / "pg-restored", env={**server.env, "TIDINGS_STORE":
                             f"{server_address}/{target}?search_path={schema}"}, port=server.port)

    try:
        await scenario(server, endpoints, take, put_back)
    finally:
        psql(f"{server_address}/postgres", f'DROP DATABASE IF EXISTS "{target}" WITH (FORCE)')


def _letters(server: ServerProcess) -> list[dict[str, Any]]:
    out = tidings("dead-letters", "list", "--url", server.url, "--token", server.admin_token)
    rows = []
    for line in out.stdout.splitlines()[1:-1]:
        sid, sub, _attempts, where, *_ = line.split()
        ns, eid = where.rsplit("/", 1)
        rows.append({"id": int(sid), "subscription": int(sub), "namespace": ns, "eventId": int(eid)})
    return rows
