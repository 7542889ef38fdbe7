"""The embedded store's schema version, and the steps that bring an older store up to it.

The version is SQLite's ``user_version`` in the database header: the number of steps of
``STEPS`` applied. At open the writing connection applies the missing steps in order,
each in the transaction that sets the version it reaches, so a store is at one version
or the next, never between; a store at a version above ``len(STEPS)`` was written by a
newer tidings and is refused before anything is written to it.

Never edit a step that has shipped: append the next one (the fixture stores under
``tests/fixtures/stores`` hold each released version to it). Step 1 is the schema as it
was when versions began; stores made before then carry version 0, and step 1 also brings
those up to date (the columns each earlier version lacked), which is why its statements
are idempotent.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ..errors import StoreError
from ._sqlite_db import DDL
from ._sqlite_deliveries import BATCH_INDEX, DELIVERIES_DDL
from ._sqlite_keys import V_KEY_COLUMNS, V_KEYS_IN_EVENTS
from ._sqlite_replays import REPLAY_DDL
from ._sqlite_schemas import SCHEMA_DDL, migrate_schemas

__all__ = ["SCHEMA_VERSION", "STEPS", "NewerStore", "header_version", "migrate", "refuse_newer", "version_of"]


class NewerStore(StoreError):
    """The store was written by a newer tidings than this one."""


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _v1(conn: sqlite3.Connection) -> None:
    for script in (DDL, SCHEMA_DDL, DELIVERIES_DDL, REPLAY_DDL):
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)
    if "sent" not in _columns(conn, "notifications"):
        # Earlier versions counted a notification as sent when it was recorded: the rows
        # pending now were counted already.
        conn.execute("ALTER TABLE notifications ADD COLUMN sent INTEGER NOT NULL DEFAULT 1")
    if "items" not in _columns(conn, "deliveries"):
        # Earlier versions kept a row per record: none of theirs is packed.
        conn.execute("ALTER TABLE deliveries ADD COLUMN n INTEGER")
        conn.execute("ALTER TABLE deliveries ADD COLUMN items BLOB")
    conn.execute(BATCH_INDEX)
    migrate_schemas(conn)


def _v_publish_keys(conn: sqlite3.Connection) -> None:
    # WITHOUT ROWID: the key is the row, looked up by its primary key on every keyed
    # publish; the expiry index lets the reclaimer delete the oldest without a scan. IF NOT
    # EXISTS, as step 1: a store marked version 0 by hand may hold the table already.
    conn.execute(
        "CREATE TABLE IF NOT EXISTS publish_keys (namespace TEXT NOT NULL, key TEXT NOT NULL, "
        "fingerprint BLOB NOT NULL, source TEXT NOT NULL, event_id INTEGER NOT NULL, expires_at INTEGER NOT NULL, "
        "PRIMARY KEY (namespace, key)) WITHOUT ROWID"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS publish_keys_expiry ON publish_keys(expires_at)")


def _v_keys_in_events(conn: sqlite3.Connection) -> None:
    # Idempotent, as step 2: a store marked version 0 by hand may have the columns already.
    for table, column in V_KEY_COLUMNS:
        if column.split()[0] not in _columns(conn, table):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
    for statement in V_KEYS_IN_EVENTS:
        conn.execute(statement)


STEPS: Final[tuple[tuple[str, Callable[[sqlite3.Connection], None]], ...]] = (
    ("the registry, the event log, deliveries, statistics, replays and schemas", _v1),
    ("publishers' idempotency keys, written in the commit of their events", _v_publish_keys),
    ("idempotency keys in their events' rows, found through the writer's memory", _v_keys_in_events),
)
"""(what it does, how), in order: the store's version is how many of them it has had."""

SCHEMA_VERSION: Final = len(STEPS)


def header_version(path: str) -> int | None:
    """The version of the store at ``path`` (None: no database there yet), read on a
    read-only connection: a newer store is refused before the writer's first pragma
    (``journal_mode=WAL`` rewrites the header of a file in another mode).

    Through SQLite, never ``open()``: closing any descriptor of a file drops every POSIX
    lock this process holds on it, those of SQLite's own connections to it included (a
    killed job then left a truncated file, SQLITE_IOERR_SHORT_READ); SQLite shares its
    descriptors and locks between the connections of one process."""
    if not os.path.exists(path):
        return None
    try:
        conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        return version_of(conn)
    except sqlite3.DatabaseError:
        return None  # not a database: the writer says so
    finally:
        conn.close()


def version_of(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def refuse_newer(version: int, where: str) -> None:
    if version > SCHEMA_VERSION:
        raise NewerStore(
            f"{where} is at schema version {version}, newer than this tidings knows ({SCHEMA_VERSION}): "
            "run the tidings that wrote it, or a later one"
        )


def migrate(conn: sqlite3.Connection, where: str) -> list[int]:
    """Apply the steps the store at ``conn`` lacks (``conn`` in autocommit mode); return
    the versions reached."""
    refuse_newer(version_of(conn), where)
    applied: list[int] = []
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the write lock: another process may have migrated meanwhile.
            done = version_of(conn)
            refuse_newer(done, where)
            if done == SCHEMA_VERSION:
                conn.execute("COMMIT")
                return applied
            STEPS[done][1](conn)
            conn.execute(f"PRAGMA user_version = {done + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(done + 1)
