"""Backups and restores given hostile paths: a symbolic link, a read-only or full
filesystem, a truncated or altered backup, a live store. Each gives a clear error (exit
2, one line, no traceback) and leaves the store, and the destination, as they were.

Read-only and full filesystems are small tmpfs mounts, which need root (the tests say
so when they cannot mount one)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tidings.store import PrincipalRecord, SQLiteStore
from tidings.store._sqlite_migrations import SCHEMA_VERSION


def tidings(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TIDINGS_STORE"}
    return subprocess.run([sys.executable, "-m", "tidings", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def refused(out: subprocess.CompletedProcess[str], *words: str) -> str:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    for w in words:
        assert w in out.stderr, out.stderr
    return out.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_store(folder: Path, padding: int = 0) -> Path:
    """A closed store in ``folder`` with a principal, and ``padding`` bytes of event data."""

    async def make() -> None:
        s = SQLiteStore(folder / "tidings.db")
        await s.open()
        await s.create_principal(PrincipalRecord(name="alice"), b"h" * 32)
        await s.close()

    # A thread of its own: the tests may run inside an event loop already.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, make()).result()
    if padding:
        c = sqlite3.connect(folder / "tidings.db")
        with c:
            c.execute("INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, headers, data) "
                      "VALUES (1, 'n', 1, NULL, 0, 's', x'', ?)", (os.urandom(padding),))
        c.close()
    return folder / "tidings.db"


@contextlib.contextmanager
def tiny_fs(where: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    where.mkdir()
    opts = f"size={size},mode=0700" + (",ro" if read_only else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tidings-test", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    make_store(data)
    return data


def test_backup_refuses_a_symlink_an_existing_path_and_a_missing_store(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    refused(tidings("backup", str(tmp_path / "link"), "--data-dir", str(store)), "symbolic link")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    refused(tidings("backup", str(tmp_path / "dangling"), "--data-dir", str(store)), "symbolic link")
    assert not (tmp_path / "nowhere").exists() and list(target.iterdir()) == []
    refused(tidings("backup", str(target), "--data-dir", str(store)), "exists")
    refused(tidings("backup", str(tmp_path / "b"), "--data-dir", str(tmp_path / "none")), "no store")
    refused(tidings("backup", str(tmp_path / "no" / "b"), "--data-dir", str(store)), "does not exist")


def test_backup_to_a_read_only_or_full_filesystem_fails_cleanly(store: Path, tmp_path: Path) -> None:
    before = digest(store / "tidings.db")
    with tiny_fs(tmp_path / "ro", "1m", read_only=True) as ro:
        refused(tidings("backup", str(ro / "b"), "--data-dir", str(store)), "not writable", str(ro))
    make_store(tmp_path / "big", padding=3 << 20)
    with tiny_fs(tmp_path / "full", "1m") as full:
        refused(tidings("backup", str(full / "b"), "--data-dir", str(tmp_path / "big")), "no space left", str(full))
        assert list(full.iterdir()) == []  # no partial backup left behind
    assert digest(store / "tidings.db") == before
    ok = tidings("backup", str(tmp_path / "b"), "--data-dir", str(tmp_path / "big"))
    assert ok.returncode == 0, ok.stderr


def test_restore_refuses_damaged_backups_and_leaves_the_store(store: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    make_store(other, padding=100_000)
    assert tidings("backup", str(tmp_path / "b"), "--data-dir", str(other)).returncode == 0
    before = digest(store / "tidings.db")
    backup_db = tmp_path / "b" / "tidings.db"
    whole = backup_db.read_bytes()

    backup_db.write_bytes(whole[: len(whole) // 2])  # truncated
    refused(tidings("restore", str(tmp_path / "b"), "--data-dir", str(store), "--force"), "does not match")
    backup_db.write_bytes(whole)
    manifest = (tmp_path / "b" / "backup.json").read_bytes()
    (tmp_path / "b" / "backup.json").write_bytes(manifest[:40])  # truncated manifest
    refused(tidings("restore", str(tmp_path / "b"), "--data-dir", str(store), "--force"), "damaged")
    (tmp_path / "b" / "backup.json").unlink()
    refused(tidings("restore", str(tmp_path / "b"), "--data-dir", str(store), "--force"), "no backup.json")
    (tmp_path / "b" / "backup.json").write_bytes(manifest)
    (tmp_path / "lnk").symlink_to(tmp_path / "b")
    refused(tidings("restore", str(tmp_path / "lnk"), "--data-dir", str(store), "--force"), "symbolic link")

    assert digest(store / "tidings.db") == before
    assert sorted(p.name for p in store.iterdir()) == ["tidings.db"]  # no work folder left

    refused(tidings("restore", str(tmp_path / "b"), "--data-dir", str(store)), "--force")  # holds a store
    assert digest(store / "tidings.db") == before
    assert tidings("restore", str(tmp_path / "b"), "--data-dir", str(store), "--force").returncode == 0
    assert digest(store / "tidings.db") == digest(backup_db)


def test_restore_from_a_newer_tidings_is_refused(store: Path, tmp_path: Path) -> None:
    assert tidings("backup", str(tmp_path / "b"), "--data-dir", str(store)).returncode == 0
    # A backup written by a tidings at a later schema version, as it would make it.
    c = sqlite3.connect(tmp_path / "b" / "tidings.db")
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.close()
    import json

    m = json.loads((tmp_path / "b" / "backup.json").read_text())
    m["store"]["sha256"] = digest(tmp_path / "b" / "tidings.db")
    (tmp_path / "b" / "backup.json").write_text(json.dumps(m))
    err = refused(tidings("restore", str(tmp_path / "b"), "--data-dir", str(tmp_path / "new")), "newer")
    assert f"schema version {SCHEMA_VERSION + 1}" in err and f"({SCHEMA_VERSION})" in err
    assert not (tmp_path / "new" / "tidings.db").exists()


def test_restore_into_a_full_filesystem_leaves_the_store(tmp_path: Path) -> None:
    make_store(tmp_path / "big", padding=2 << 20)
    assert tidings("backup", str(tmp_path / "b"), "--data-dir", str(tmp_path / "big")).returncode == 0
    with tiny_fs(tmp_path / "full", "1m") as full:
        make_store(full / "data")
        before = digest(full / "data" / "tidings.db")
        refused(tidings("restore", str(tmp_path / "b"), "--data-dir", str(full / "data"), "--force"),
                "no space left")
        assert digest(full / "data" / "tidings.db") == before
        assert sorted(p.name for p in (full / "data").iterdir()) == ["tidings.db"]


async def test_restore_refuses_a_live_store_and_a_store_cannot_open_during_a_restore(tmp_path: Path) -> None:
    make_store(tmp_path / "src")
    make_store(tmp_path / "live")
    assert tidings("backup", str(tmp_path / "b"), "--data-dir", str(tmp_path / "src")).returncode == 0
    live = SQLiteStore(tmp_path / "live" / "tidings.db")
    await live.open()
    try:
        out = await asyncio.to_thread(tidings, "restore", str(tmp_path / "b"), "--data-dir", str(tmp_path / "live"),
                                      "--force")
        refused(out, "in use")
        assert await live.principal_by_token(b"h" * 32) is not None  # still the live store, untouched
    finally:
        await live.close()

    from tidings.errors import StoreError
    from tidings.store.backup import hold_folder

    lock = hold_folder(tmp_path / "live", exclusive=True)  # what a restore holds
    try:
        with pytest.raises(StoreError, match="restore"):
            await SQLiteStore(tmp_path / "live" / "tidings.db").open()
    finally:
        os.close(lock)


def test_backup_finds_the_data_folder_in_the_config_file(store: Path, tmp_path: Path) -> None:
    config = tmp_path / "t.toml"
    config.write_text(f'data_dir = "{store}"\n')
    out = tidings("backup", str(tmp_path / "b"), "--config", str(config))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "b" / "tidings.db").exists()
    config.write_text(f'data_dir = "{store}"\nstore = "postgresql://u:pw@h/db"\n')
    refused(tidings("backup", str(tmp_path / "c"), "--config", str(config)), "pg_dump")
