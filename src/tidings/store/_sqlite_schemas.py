"""The schema registry's tables in the SQLite store (mixed into ``SQLiteStore``)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from ._schemas import SchemaChange, SchemaConflict, SchemaRecord, SchemaSnapshot, SchemaStore, SchemaVersion
from ._sqlite_db import SQLiteAccess

__all__ = ["SCHEMA_DDL", "SQLiteSchemaStore", "migrate_schemas"]

T = TypeVar("T")

SCHEMA_DDL = """
CREATE TABLE IF NOT EXISTS schemas (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    format TEXT NOT NULL,
    model TEXT NOT NULL,
    canonical TEXT NOT NULL,
    replaces INTEGER,
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    state TEXT NOT NULL,
    valid_from INTEGER,
    valid_to INTEGER,
    retention_s INTEGER,
    starting_at INTEGER NOT NULL DEFAULT 0,
    deleted_at INTEGER,
    refs TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS schema_versions (
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    schema_id INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    deleted_at INTEGER,
    soft_deleted_at INTEGER,
    PRIMARY KEY (name, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS schema_settings (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS schema_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    schema_id INTEGER,
    at INTEGER NOT NULL,
    by TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS schema_changes_schema ON schema_changes(schema_id, seq);
"""

_COLS = (
    "id, format, model, canonical, replaces, created_at, created_by, state, valid_from, valid_to, "
    "retention_s, starting_at, deleted_at, refs"
)


def migrate_schemas(conn: sqlite3.Connection) -> None:
    """Add the columns a store made before schema references and soft deletes lacks."""
    if "refs" not in {r[1] for r in conn.execute("PRAGMA table_info(schemas)")}:
        conn.execute("ALTER TABLE schemas ADD COLUMN refs TEXT NOT NULL DEFAULT '[]'")
    if "soft_deleted_at" not in {r[1] for r in conn.execute("PRAGMA table_info(schema_versions)")}:
        conn.execute("ALTER TABLE schema_versions ADD COLUMN soft_deleted_at INTEGER")


def _record(r: tuple[Any, ...]) -> SchemaRecord:
    return SchemaRecord(
        id=r[0], format=r[1], model=r[2], canonical=r[3], replaces=r[4], created_at=r[5], created_by=r[6],
        state=r[7], valid_from=r[8], valid_to=r[9], retention_s=r[10], starting_at=r[11], deleted_at=r[12],
        references=msgspec.json.decode(r[13]),
    )


def _put_versions(c: sqlite3.Connection, versions: Sequence[SchemaVersion]) -> None:
    c.executemany(
        "INSERT INTO schema_versions(name, version, schema_id, created_at, deleted_at, soft_deleted_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name, version) DO UPDATE SET schema_id = excluded.schema_id, "
        "deleted_at = excluded.deleted_at, soft_deleted_at = excluded.soft_deleted_at",
        [(v.name, v.version, v.schema_id, v.created_at, v.deleted_at, v.soft_deleted_at) for v in versions],
    )


def _seq(c: sqlite3.Connection) -> int:
    return int(c.execute("SELECT COALESCE(MAX(seq), 0) FROM schema_changes").fetchone()[0])


def _expect(c: sqlite3.Connection, expect_seq: int | None) -> None:
    # The single writer serialises the writes: the check and the write are one step.
    if expect_seq is not None and _seq(c) != expect_seq:
        raise SchemaConflict("the schema registry changed meanwhile")


def _put_changes(c: sqlite3.Connection, changes: Sequence[SchemaChange]) -> None:
    for x in changes:
        cur = c.execute(
            "INSERT INTO schema_changes(schema_id, at, by, action, detail) VALUES (?, ?, ?, ?, ?)",
            (x.schema_id, x.at, x.by, x.action, x.detail),
        )
        x.seq = int(cur.lastrowid or 0)


def _in_one_read(c: sqlite3.Connection, q: Any) -> Any:
    if c.in_transaction:
        return q(c)
    c.execute("BEGIN")
    try:
        return q(c)
    finally:
        c.execute("COMMIT")


class SQLiteSchemaStore(SQLiteAccess, SchemaStore):
    """Relies on ``SQLiteStore``'s ``_read`` and ``_write`` (the single writer thread)."""

    async def load_schemas(self) -> SchemaSnapshot:
        def q(c: sqlite3.Connection) -> SchemaSnapshot:
            schemas = [_record(r) for r in c.execute(f"SELECT {_COLS} FROM schemas ORDER BY id")]
            versions = [
                SchemaVersion(name=r[0], version=r[1], schema_id=r[2], created_at=r[3], deleted_at=r[4],
                              soft_deleted_at=r[5])
                for r in c.execute(
                    "SELECT name, version, schema_id, created_at, deleted_at, soft_deleted_at FROM schema_versions "
                    "ORDER BY name, version"
                )
            ]
            settings = {k: msgspec.json.decode(v) for k, v in c.execute("SELECT key, value FROM schema_settings")}
            return SchemaSnapshot(schemas=schemas, versions=versions, settings=settings, seq=_seq(c))

        # One read transaction, so the seq is the snapshot's.
        result: SchemaSnapshot = await self._read(lambda c: _in_one_read(c, q))
        return result

    async def schema_seq(self) -> int:
        result: int = await self._read(_seq)
        return result

    async def create_schema(
        self, record: SchemaRecord, versions: Sequence[SchemaVersion], change: SchemaChange,
        *, expect_seq: int | None = None,
    ) -> SchemaRecord:
        def job(c: sqlite3.Connection, w: object) -> SchemaRecord:
            _expect(c, expect_seq)
            r = record
            cur = c.execute(
                "INSERT INTO schemas(id, format, model, canonical, replaces, created_at, created_by, state, "
                "valid_from, valid_to, retention_s, starting_at, deleted_at, refs) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.id or None, r.format, r.model, r.canonical, r.replaces, r.created_at, r.created_by, r.state,
                 r.valid_from, r.valid_to, r.retention_s, r.starting_at, r.deleted_at,
                 msgspec.json.encode(r.references).decode()),
            )
            new_id = int(cur.lastrowid or 0)
            for v in versions:
                v.schema_id = new_id
            change.schema_id = new_id
            _put_versions(c, versions)
            _put_changes(c, [change])
            r.id = new_id
            return r

        fut: asyncio.Future[SchemaRecord] = self._write(job)
        return await fut

    async def save_schema(
        self,
        record: SchemaRecord | None,
        versions: Sequence[SchemaVersion],
        changes: Sequence[SchemaChange],
        *, expect_seq: int | None = None,
    ) -> None:
        def job(c: sqlite3.Connection, w: object) -> None:
            _expect(c, expect_seq)
            if record is not None:
                r = record
                c.execute(
                    "UPDATE schemas SET state = ?, valid_from = ?, valid_to = ?, retention_s = ?, starting_at = ?, "
                    "deleted_at = ?, model = ?, canonical = ? WHERE id = ?",
                    (r.state, r.valid_from, r.valid_to, r.retention_s, r.starting_at, r.deleted_at, r.model,
                     r.canonical, r.id),
                )
            _put_versions(c, versions)
            _put_changes(c, changes)

        await self._write(job)

    async def put_schema_setting(
        self, key: str, value: Any, change: SchemaChange, *, expect_seq: int | None = None
    ) -> None:
        def job(c: sqlite3.Connection, w: object) -> None:
            _expect(c, expect_seq)
            if value is None:
                c.execute("DELETE FROM schema_settings WHERE key = ?", (key,))
            else:
                c.execute(
                    "INSERT INTO schema_settings(key, value) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, msgspec.json.encode(value)),
                )
            _put_changes(c, [change])

        await self._write(job)

    async def schema_changes(
        self, schema_id: int | None, after: int = 0, limit: int | None = None
    ) -> list[SchemaChange]:
        def q(c: sqlite3.Connection) -> list[SchemaChange]:
            where = "seq > ?" if schema_id is None else "schema_id = ? AND seq > ?"
            args: tuple[Any, ...] = (after,) if schema_id is None else (schema_id, after)
            rows = c.execute(
                f"SELECT seq, schema_id, at, by, action, detail FROM schema_changes WHERE {where} "
                "ORDER BY seq LIMIT ?",
                (*args, -1 if limit is None else limit),
            ).fetchall()
            return [
                SchemaChange(seq=r[0], schema_id=r[1], at=r[2], by=r[3], action=r[4], detail=r[5]) for r in rows
            ]

        result: list[SchemaChange] = await self._read(q)
        return result
