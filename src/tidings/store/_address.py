"""Which store an address names."""

from __future__ import annotations

from pathlib import Path

from ..core.addresses import redact_address
from ..errors import ConfigError
from ._base import Store
from .sqlite import SQLiteStore

__all__ = ["redact_address", "store_for"]


def store_for(
    address: str, default_path: Path, *, fsync: bool = True, timeout_s: float = 10.0, name: str = "tidings",
    peers_within_s: float = 15.0,
) -> Store:
    """The store at ``address``: a ``postgresql://`` (or ``postgres://``) address, or empty
    for the SQLite file at ``default_path``. Raises ``ConfigError`` for anything else.
    ``fsync``: the SQLite store's ``commit_fsync`` (PostgreSQL keeps its own
    ``synchronous_commit``); ``timeout_s``: the PostgreSQL store's bound on each wait;
    ``name``: its sessions' ``application_name`` (``pg_stat_activity`` shows who is who);
    ``peers_within_s``: PostgreSQL is migrated only when no other broadcaster was seen
    this recently (``_pg_migrations``)."""
    if not address:
        return SQLiteStore(default_path, fsync=fsync)
    scheme = address.partition("://")[0].lower()
    if scheme in ("postgresql", "postgres"):
        try:
            from .postgresql import PostgresStore
        except ImportError as e:
            raise ConfigError(
                f"TIDINGS_STORE is a PostgreSQL address but {e.name} is not installed: "
                "pip install 'tidings[postgresql]'"
            ) from None
        return PostgresStore(
            address, timeout_s=timeout_s, server_settings={"application_name": name[:63]},
            peers_within_s=peers_within_s,
        )
    if scheme in ("sqlite", "file"):
        return SQLiteStore(address.partition("://")[2] or default_path, fsync=fsync)
    raise ConfigError(
        f"TIDINGS_STORE: unknown store {scheme or address!r}; use postgresql://user@host:port/database, "
        "sqlite:///path/to/file.db, or nothing (the SQLite file in the data folder)"
    )

