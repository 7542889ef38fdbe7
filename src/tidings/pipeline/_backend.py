"""Which hot log a location names, the one place the pipeline chooses its store backend;
and where that hot log's archive is by default.

A ``postgresql://`` or ``postgres://`` address is the PostgreSQL store
(:mod:`tidings.pipeline._pg`); anything else is a data dir or its ``tidings.db``
(:mod:`tidings.pipeline._sqlite`). Cheap and without I/O: executors call it on the
location string they were given, then open their own connection.
"""

from __future__ import annotations

from pathlib import Path

from ._hotlog import HotLog
from ._pg import PgLog
from ._sqlite import SQLiteLog
from ._url import is_pg_url

__all__ = ["archive_root", "hot_log"]


def hot_log(location: str | Path | HotLog) -> HotLog:
    """The hot log at ``location`` (a data dir, a ``tidings.db``, or a PostgreSQL address)."""
    if isinstance(location, HotLog):
        return location
    if is_pg_url(location):
        return PgLog(str(location))
    return SQLiteLog(str(location))


def archive_root(location: str | Path, option: str | Path | None) -> Path:
    """The archive of the hot log at ``location``: ``option`` if given, else ``<data dir>/archive``.

    A PostgreSQL store has no data dir of its own: its archive is the one its server's
    replays read (``TIDINGS_ARCHIVE_DIR``, else ``<TIDINGS_DATA_DIR>/archive``), made
    absolute here so executors started in other folders find the same one.
    """
    if option:
        return Path(option)
    if is_pg_url(location):
        from ..settings import Settings

        s = Settings.from_env()
        return (Path(s.archive_dir) if s.archive_dir else s.data_dir / "archive").absolute()
    p = Path(location)
    return (p if p.is_dir() else p.parent) / "archive"
