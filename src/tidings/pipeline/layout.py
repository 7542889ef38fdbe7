"""The archive on disk: Parquet partitions, file names, the manifest, durable renames.

::

    <archive>/namespace=<ns>/date=<YYYY-MM-DD>/part-<lo>-<hi>-<k>.parquet
    <archive>/_tidings/manifest.json     {"version": 1, "namespaces": {ns: {"hwm": id, ...}}}
    <archive>/_tidings/lock              held (flock) by the one archive job running
    <archive>/_tidings/staging/run-*/    the staged files of the run in progress

``<ns>`` is escaped as Spark escapes partition values, so Spark's partition discovery
reads the namespace back. ``lo`` to ``hi`` is the id range the run archived for that
namespace (20 digits), ``k`` numbers the files of one date. The manifest's ``hwm``
(high-water mark) is the highest id of the namespace whose events are all in the
archive; a file whose ``lo`` is above it belongs to a run that did not finish and is
deleted by the next run. Names starting with ``_`` are invisible to Spark readers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgspec

from .errors import PipelineError

__all__ = [
    "Manifest",
    "NamespaceState",
    "date_dirs",
    "escape",
    "file_name",
    "fsync_dir",
    "fsync_file",
    "lock",
    "namespace_dir",
    "namespace_dirs",
    "parse_file_name",
    "unescape",
]

META: Final = "_tidings"
_ESCAPE: Final = frozenset([chr(c) for c in range(1, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))
_FILE: Final = re.compile(r"part-(\d{20})-(\d{20})-(\d+)\.parquet")


def escape(value: str) -> str:
    """A partition value as Spark writes it in a directory name (``%XX`` for special characters)."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in value)


def unescape(name: str) -> str:
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), name)


def namespace_dir(archive: Path, namespace: str) -> Path:
    return archive / f"namespace={escape(namespace)}"


def namespace_dirs(archive: Path) -> Iterator[tuple[str, Path]]:
    """``(namespace, directory)`` of every namespace in the archive."""
    if archive.is_dir():
        for d in sorted(archive.iterdir()):
            if d.is_dir() and d.name.startswith("namespace="):
                yield unescape(d.name.removeprefix("namespace=")), d


def date_dirs(ns_dir: Path) -> Iterator[tuple[str, Path]]:
    """``(YYYY-MM-DD, directory)`` of every date partition of one namespace."""
    for d in sorted(ns_dir.iterdir()):
        if d.is_dir() and d.name.startswith("date="):
            yield d.name.removeprefix("date="), d


def file_name(lo: int, hi: int, k: int) -> str:
    return f"part-{lo:020d}-{hi:020d}-{k}.parquet"


def parse_file_name(name: str) -> tuple[int, int, int] | None:
    m = _FILE.fullmatch(name)
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))


class NamespaceState(msgspec.Struct, kw_only=True):
    hwm: int = 0
    """Every event of the namespace with an id up to this one is in the archive."""
    archived_at: int = 0
    """UTC ns of the run that last moved the mark."""


class Manifest(msgspec.Struct, kw_only=True):
    version: int = 1
    namespaces: dict[str, NamespaceState] = msgspec.field(default_factory=dict)

    @classmethod
    def path(cls, archive: Path) -> Path:
        return archive / META / "manifest.json"

    @classmethod
    def load(cls, archive: Path) -> Manifest:
        p = cls.path(archive)
        return msgspec.json.decode(p.read_bytes(), type=cls) if p.exists() else cls()

    def hwm(self, namespace: str) -> int:
        s = self.namespaces.get(namespace)
        return 0 if s is None else s.hwm

    def save(self, archive: Path) -> None:
        """Replace the manifest atomically and durably (write, fsync, rename, fsync the folder)."""
        p = self.path(archive)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(msgspec.json.format(msgspec.json.encode(self)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
        fsync_dir(p.parent)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fsync_file(path)


@contextlib.contextmanager
def lock(archive: Path) -> Iterator[Any]:
    """Hold the archive's lock for the block; :class:`PipelineError` ``archive_busy`` if taken.

    An flock dies with its process, so a killed job never leaves the archive locked.
    """
    d = archive / META
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "lock", "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise PipelineError(f"another archive job is running on {archive}", code="archive_busy") from e
        try:
            yield f
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
