"""The schema registry's tables in the PostgreSQL store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import msgspec

from ._cluster import CHANGE_REGISTRY
from ._pg_db import PgAccess
from ._schemas import SchemaChange, SchemaConflict, SchemaRecord, SchemaSnapshot, SchemaStore, SchemaVersion

__all__ = ["PgSchemaStore"]

_COLS = (
    "id, format, model, canonical, replaces, created_at, created_by, state, valid_from, valid_to, "
    "retention_s, starting_at, deleted_at, refs"
)


def _record(r: Any) -> SchemaRecord:
    return SchemaRecord(
        id=r[0], format=r[1], model=r[2], canonical=r[3], replaces=r[4], created_at=r[5], created_by=r[6],
        state=r[7], valid_from=r[8], valid_to=r[9], retention_s=r[10], starting_at=r[11], deleted_at=r[12],
        references=msgspec.json.decode(r[13]),
    )


async def _put_versions(c: asyncpg.Connection, versions: Sequence[SchemaVersion]) -> None:
    if versions:
        await c.executemany(
            "INSERT INTO schema_versions(name, version, schema_id, created_at, deleted_at, soft_deleted_at) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name, version) DO UPDATE SET "
            "schema_id = excluded.schema_id, deleted_at = excluded.deleted_at, "
            "soft_deleted_at = excluded.soft_deleted_at",
            [(v.name, v.version, v.schema_id, v.created_at, v.deleted_at, v.soft_deleted_at) for v in versions],
        )


_SEQ = "SELECT COALESCE(MAX(seq), 0) FROM schema_changes"


async def _expect(c: asyncpg.Connection, expect_seq: int | None) -> None:
    """Serialise the registry's writes (every broadcaster's) on the audit log, so that
    its seqs commit in order and its last seq is the registry's version; then check it."""
    await c.execute("LOCK TABLE schema_changes IN EXCLUSIVE MODE")
    if expect_seq is not None and await c.fetchval(_SEQ) != expect_seq:
        raise SchemaConflict("the schema registry changed meanwhile")


async def _put_changes(c: asyncpg.Connection, changes: Sequence[SchemaChange]) -> None:
    for x in changes:
        x.seq = int(await c.fetchval(
            "INSERT INTO schema_changes(schema_id, at, by, action, detail) VALUES ($1, $2, $3, $4, $5) "
            "RETURNING seq",
            x.schema_id, x.at, x.by, x.action, x.detail,
        ))


class PgSchemaStore(PgAccess, SchemaStore):
    async def load_schemas(self) -> SchemaSnapshot:
        async def q(c: asyncpg.Connection) -> SchemaSnapshot:
            async with c.transaction(isolation="repeatable_read", readonly=True):
                schemas = [_record(r) for r in await c.fetch(f"SELECT {_COLS} FROM schemas ORDER BY id")]
                versions = [
                    SchemaVersion(name=r[0], version=r[1], schema_id=r[2], created_at=r[3], deleted_at=r[4],
                                  soft_deleted_at=r[5])
                    for r in await c.fetch(
                        "SELECT name, version, schema_id, created_at, deleted_at, soft_deleted_at "
                        "FROM schema_versions ORDER BY name, version"
                    )
                ]
                settings = {
                    r[0]: msgspec.json.decode(r[1]) for r in await c.fetch("SELECT key, value FROM schema_settings")
                }
                seq = await c.fetchval(_SEQ)
            return SchemaSnapshot(schemas=schemas, versions=versions, settings=settings, seq=int(seq))

        return await self._read(q)

    async def schema_seq(self) -> int:
        return int(await self._fetchval(_SEQ))

    async def create_schema(
        self, record: SchemaRecord, versions: Sequence[SchemaVersion], change: SchemaChange,
        *, expect_seq: int | None = None,
    ) -> SchemaRecord:
        async def job(c: asyncpg.Connection) -> SchemaRecord:
            await _expect(c, expect_seq)
            r = record
            if r.id:
                # An id never used before, chosen by the registry: later ones go on above it.
                await c.execute(
                    "SELECT setval('schemas_id_seq', GREATEST($1, (SELECT last_value FROM schemas_id_seq)), true)",
                    r.id,
                )
            new_id = await c.fetchval(
                "INSERT INTO schemas(id, format, model, canonical, replaces, created_at, created_by, state, "
                "valid_from, valid_to, retention_s, starting_at, deleted_at, refs) "
                "VALUES (COALESCE($1, nextval('schemas_id_seq')), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, "
                "$13, $14) RETURNING id",
                r.id or None, r.format, r.model, r.canonical, r.replaces, r.created_at, r.created_by, r.state,
                r.valid_from, r.valid_to, r.retention_s, r.starting_at, r.deleted_at,
                msgspec.json.encode(r.references).decode(),
            )
            new_id = int(new_id)
            for v in versions:
                v.schema_id = new_id
            change.schema_id = new_id
            await _put_versions(c, versions)
            await _put_changes(c, [change])
            await self._signal(c, CHANGE_REGISTRY, "schema:")
            r.id = new_id
            return r

        return await self._tx(job)

    async def save_schema(
        self,
        record: SchemaRecord | None,
        versions: Sequence[SchemaVersion],
        changes: Sequence[SchemaChange],
        *, expect_seq: int | None = None,
    ) -> None:
        async def job(c: asyncpg.Connection) -> None:
            await _expect(c, expect_seq)
            if record is not None:
                r = record
                await c.execute(
                    "UPDATE schemas SET state = $1, valid_from = $2, valid_to = $3, retention_s = $4, "
                    "starting_at = $5, deleted_at = $6, model = $7, canonical = $8 WHERE id = $9",
                    r.state, r.valid_from, r.valid_to, r.retention_s, r.starting_at, r.deleted_at, r.model,
                    r.canonical, r.id,
                )
            await _put_versions(c, versions)
            await _put_changes(c, changes)
            await self._signal(c, CHANGE_REGISTRY, "schema:")

        await self._tx(job)

    async def put_schema_setting(
        self, key: str, value: Any, change: SchemaChange, *, expect_seq: int | None = None
    ) -> None:
        async def job(c: asyncpg.Connection) -> None:
            await _expect(c, expect_seq)
            if value is None:
                await c.execute("DELETE FROM schema_settings WHERE key = $1", key)
            else:
                await c.execute(
                    "INSERT INTO schema_settings(key, value) VALUES ($1, $2) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    key, msgspec.json.encode(value),
                )
            await _put_changes(c, [change])
            await self._signal(c, CHANGE_REGISTRY, "schema:")

        await self._tx(job)

    async def schema_changes(
        self, schema_id: int | None, after: int = 0, limit: int | None = None
    ) -> list[SchemaChange]:
        lim = 2**62 if limit is None or limit < 0 else limit
        if schema_id is None:
            rows = await self._fetch(
                "SELECT seq, schema_id, at, by, action, detail FROM schema_changes WHERE seq > $1 "
                "ORDER BY seq LIMIT $2", after, lim,
            )
        else:
            rows = await self._fetch(
                "SELECT seq, schema_id, at, by, action, detail FROM schema_changes WHERE schema_id = $1 "
                "AND seq > $2 ORDER BY seq LIMIT $3", schema_id, after, lim,
            )
        return [SchemaChange(seq=r[0], schema_id=r[1], at=r[2], by=r[3], action=r[4], detail=r[5]) for r in rows]
