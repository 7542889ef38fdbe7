"""Backups of the embedded store, taken while it runs, and their restore.

A backup is a folder (0700) holding ``tidings.db`` (the store, 0600), ``admin.token``
when the data folder has one, and ``backup.json`` (what was copied: the schema version,
the log's last ``seq`` and each publication's last event id, the store file's size and
SHA-256). It is written as ``.DEST.partial-*`` beside ``DEST`` and renamed to ``DEST``
only once complete and checked, so a failed or interrupted backup leaves no ``DEST``.

The copy is SQLite's online backup (``sqlite3_backup``) from a connection that holds one
read transaction for the whole copy: every page comes from the same snapshot, which is
what makes it consistent, and the writer keeps committing to the WAL meanwhile (a copy
made page by page without it would start again at every commit, never ending on a busy
store). Steps of ``_STEP_PAGES`` pages report progress.

A restore checks the backup (the file's SHA-256 against ``backup.json``, SQLite's
``quick_check``, a schema version this tidings knows) on a copy beside the target, then
swaps it in under an exclusive ``flock`` of the data folder. Every ``SQLiteStore`` holds
a shared one while open (``hold_folder``), so a restore never replaces a store in use,
and a server cannot open a store while a restore replaces it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from ..errors import BackupError, StoreError
from ._sqlite_migrations import SCHEMA_VERSION, refuse_newer, version_of

__all__ = [
    "SCHEMA_VERSION", "BackupSummary", "backup", "hold_folder", "read_manifest", "restore", "throttled_progress",
]

STORE: Final = "tidings.db"
TOKEN: Final = "admin.token"
MANIFEST: Final = "backup.json"
_FORMAT: Final = "tidings-backup/1"
_STEP_PAGES: Final = 1024
_CHUNK: Final = 1 << 20

Progress = Callable[[int, int], None]
"""Called with (pages copied, pages in all) after each step of a copy."""


@dataclass(frozen=True, slots=True)
class BackupSummary:
    path: Path
    bytes: int
    schema_version: int
    last_seq: int
    namespaces: dict[str, int]


def hold_folder(folder: Path, *, exclusive: bool = False) -> int:
    """Lock ``folder`` (shared: a store in use; exclusive: a restore); return the descriptor
    to close when done. A directory's ``flock`` is separate from the POSIX locks SQLite
    takes on its files, so closing it never drops those (SQLite's documented hazard)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        if exclusive:
            raise BackupError(
                f"the store in {folder} is in use (a running tidings serve, or another tidings command): "
                "stop it first; nothing was changed"
            ) from None
        raise StoreError(f"a restore into {folder} is under way: start when it has finished") from None
    return fd


def _refuse_link(path: Path, what: str) -> None:
    if path.is_symlink():
        raise BackupError(f"{what} {path} is a symbolic link: give the real path")


def _fail(what: str, path: Path, e: BaseException) -> BackupError:
    if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "disk is full" in str(e):
        return BackupError(f"no space left on the device of {path} while {what}")
    if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return BackupError(f"{path} is not writable ({what}): {e.strerror}")
    return BackupError(f"{what} {path} failed: {e}")


def _private_file(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # whatever the umask
    return fd


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _connect(path: Path, mode: str) -> Iterator[sqlite3.Connection]:
    """A connection to an existing file (``mode`` ``rw`` or ``ro``), never creating one."""
    uri = "file:" + str(path.absolute()).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    conn = sqlite3.connect(f"{uri}?mode={mode}", uri=True, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def _describe(conn: sqlite3.Connection) -> tuple[int, int, dict[str, int]]:
    """(schema version, last seq, each publication's last event id) of a store."""
    seq = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
    names = dict(conn.execute("SELECT namespace, last_event_id FROM publications ORDER BY namespace").fetchall())
    return version_of(conn), int(seq), {str(k): int(v) for k, v in names.items()}


def backup(data_dir: Path, dest: Path, progress: Progress | None = None) -> BackupSummary:
    """Copy the store in ``data_dir`` (running or not) to the new folder ``dest``."""
    source = data_dir / STORE
    _refuse_link(dest, "the backup destination")
    if dest.exists():
        raise BackupError(f"the backup destination {dest} exists: give a new path")
    if not source.is_file():
        raise BackupError(f"no store at {source}")
    parent = dest.absolute().parent
    if not parent.is_dir():
        raise BackupError(f"the folder {parent} of the backup destination does not exist")
    try:
        partial = Path(_mkdtemp(parent, f".{dest.name}.partial-"))
    except OSError as e:
        raise _fail("creating the backup in", parent, e) from e
    try:
        summary = _copy(source, partial, progress)
        token = data_dir / TOKEN
        if token.is_file() and not token.is_symlink():
            _copy_file(token, partial / TOKEN)
        manifest = {
            "format": _FORMAT,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "schema_version": summary.schema_version,
            "last_seq": summary.last_seq,
            "namespaces": summary.namespaces,
            "store": {"file": STORE, "bytes": summary.bytes, "sha256": _sha256(partial / STORE)},
        }
        _write_file(partial / MANIFEST, json.dumps(manifest, indent=2).encode() + b"\n")
        _fsync_dir(partial)
        os.rename(partial, dest)  # fails, rather than follows, if dest appeared meanwhile
        _fsync_dir(parent)
    except BaseException as e:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(e, BackupError):
            raise
        if isinstance(e, sqlite3.Error | OSError):
            raise _fail("writing the backup to", dest, e) from e
        raise
    return BackupSummary(dest, summary.bytes, summary.schema_version, summary.last_seq, summary.namespaces)


def _mkdtemp(parent: Path, prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=parent)  # 0700


def _copy(source: Path, folder: Path, progress: Progress | None) -> BackupSummary:
    target = folder / STORE
    os.close(_private_file(target))
    with _connect(source, "rw") as src, _connect(target, "rw") as dst:
        src.execute("PRAGMA query_only=ON")
        src.execute("PRAGMA busy_timeout=10000")
        # One read transaction for the whole copy: one snapshot (see the module's docstring).
        src.execute("BEGIN")
        version, seq, names = _describe(src)
        src.backup(dst, pages=_STEP_PAGES, progress=(lambda _s, left, total: progress(total - left, total))
                   if progress else None)
        src.execute("COMMIT")
        # The copy is a plain file: reading it (the restore's check, an operator's sqlite3)
        # leaves no -wal and -shm beside it. The store turns WAL on again when it opens it.
        dst.execute("PRAGMA journal_mode=DELETE")
        check = dst.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise BackupError(f"the copy in {target} does not check: {check}")
    with open(target, "rb+") as f:
        os.fsync(f.fileno())
    return BackupSummary(target, target.stat().st_size, version, seq, names)


def _write_file(path: Path, data: bytes) -> None:
    fd = _private_file(path)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_file(source: Path, target: Path, *, digest: Any = None) -> None:
    """Copy ``source`` to the new file ``target`` (0600) and fsync it; feed ``digest``."""
    fd = _private_file(target)
    try:
        with open(source, "rb") as f:
            while chunk := f.read(_CHUNK):
                if digest is not None:
                    digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(src: Path) -> dict[str, Any]:
    _refuse_link(src, "the backup")
    if not src.is_dir():
        raise BackupError(f"{src} is not a backup folder (made by 'tidings backup')")
    path = src / MANIFEST
    _refuse_link(path, "the backup's manifest")
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise BackupError(
            f"{src} has no {MANIFEST}: not a backup made by 'tidings backup', or an unfinished one"
        ) from None
    except (OSError, ValueError) as e:
        raise BackupError(f"{path} is unreadable or damaged: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise BackupError(f"{path} is not a tidings backup manifest ({_FORMAT})")
    store = manifest.get("store")
    if not isinstance(store, dict) or not isinstance(store.get("sha256"), str):
        raise BackupError(f"{path} does not say which store file it holds")
    return manifest


def restore(src: Path, data_dir: Path, *, force: bool = False) -> dict[str, Any]:
    """Put the backup ``src`` in ``data_dir`` as its store; return the backup's manifest.

    Refuses a data folder whose store is in use, and one that holds a store unless
    ``force``; whatever fails, the data folder is left as it was."""
    manifest = read_manifest(src)
    _refuse_link(data_dir, "the data folder")
    _refuse_link(src / STORE, "the backup's store")
    if not (src / STORE).is_file():
        raise BackupError(f"{src} has no {STORE}")
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise _fail("creating the data folder", data_dir, e) from e
    lock = hold_folder(data_dir, exclusive=True)
    try:
        live = data_dir / STORE
        _refuse_link(live, "the store")
        if live.exists() and not force:
            raise BackupError(f"{data_dir} already holds a store: give --force to replace it; nothing was changed")
        try:
            work = Path(_mkdtemp(data_dir, ".restore-"))
        except OSError as e:
            raise _fail("restoring into", data_dir, e) from e
        try:
            _check_copy(src, work, manifest)
            if (src / TOKEN).is_file() and not (src / TOKEN).is_symlink():
                _copy_file(src / TOKEN, work / TOKEN)
            _swap(data_dir, work)
        except BaseException as e:
            if isinstance(e, sqlite3.Error | OSError):
                raise _fail("restoring into", data_dir, e) from e
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        os.close(lock)
    return manifest


def _check_copy(src: Path, work: Path, manifest: dict[str, Any]) -> None:
    digest = hashlib.sha256()
    _copy_file(src / STORE, work / STORE, digest=digest)
    if digest.hexdigest() != manifest["store"]["sha256"]:
        raise BackupError(
            f"{src / STORE} does not match its manifest (truncated or altered since the backup): nothing was changed"
        )
    with _connect(work / STORE, "rw") as conn:
        try:
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            version = version_of(conn)
        except sqlite3.DatabaseError as e:
            raise BackupError(f"{src / STORE} is not a readable store ({e}): nothing was changed") from e
        if check != "ok":
            raise BackupError(f"{src / STORE} does not check ({check}): nothing was changed")
        try:
            refuse_newer(version, f"the backup {src}")
        except StoreError as e:
            raise BackupError(str(e)) from e
    # The check's connection was the only one: closing it left no -wal or -shm behind.


def _swap(data_dir: Path, work: Path) -> None:
    """Move the old store (and its -wal, -shm) into ``work``, the new one in; undo the moves
    if one fails. An old -wal left beside the new file would be replayed into it."""
    names = [STORE, STORE + "-wal", STORE + "-shm", TOKEN]
    aside = work / "old"
    aside.mkdir()
    moved: list[str] = []
    placed: list[str] = []
    try:
        for name in names:
            if (data_dir / name).exists():
                os.rename(data_dir / name, aside / name)
                moved.append(name)
        for name in (STORE, TOKEN):
            if (work / name).exists():
                os.rename(work / name, data_dir / name)
                placed.append(name)
        _fsync_dir(data_dir)
    except BaseException:
        for name in placed:
            with contextlib.suppress(OSError):
                os.rename(data_dir / name, work / name)
        for name in moved:
            with contextlib.suppress(OSError):
                os.rename(aside / name, data_dir / name)
        raise


def throttled_progress(every_s: float, out: Callable[[str], None]) -> Progress:
    """A progress callback printing at most every ``every_s`` seconds, and at the end."""
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] >= every_s:
            last[0] = now
            out(f"copied {done} of {total} pages ({100 * done // max(total, 1)}%)")

    return report

