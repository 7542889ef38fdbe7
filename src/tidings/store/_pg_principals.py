"""Principals and their tokens in the PostgreSQL store."""

from __future__ import annotations

import asyncpg

from ._base import PrincipalStore
from ._pg_db import PgAccess
from ._records import PrincipalRecord

__all__ = ["PgPrincipalStore"]


class PgPrincipalStore(PgAccess, PrincipalStore):
    async def create_principal(self, record: PrincipalRecord, token_hash: bytes) -> bool:
        async def job(c: asyncpg.Connection) -> bool:
            made = await c.fetchval(
                "INSERT INTO principals(name, admin, created_at) VALUES ($1, $2, $3) "
                "ON CONFLICT (name) DO NOTHING RETURNING true",
                record.name, bool(record.admin), record.created_at,
            )
            if not made:
                return False
            await c.execute("INSERT INTO tokens(hash, principal) VALUES ($1, $2)", token_hash, record.name)
            return True

        return await self._tx(job)

    async def add_token(self, name: str, token_hash: bytes) -> bool:
        async def job(c: asyncpg.Connection) -> bool:
            if await c.fetchval("SELECT 1 FROM principals WHERE name = $1", name) is None:
                return False
            await c.execute("INSERT INTO tokens(hash, principal) VALUES ($1, $2)", token_hash, name)
            return True

        return await self._tx(job)

    async def principal_by_token(self, token_hash: bytes) -> PrincipalRecord | None:
        rows = await self._fetch(
            "SELECT p.name, p.admin, p.created_at FROM tokens t JOIN principals p ON p.name = t.principal "
            "WHERE t.hash = $1",
            token_hash,
        )
        return PrincipalRecord(name=rows[0][0], admin=rows[0][1], created_at=rows[0][2]) if rows else None

    async def revoke_tokens(self, name: str, token_hash: bytes | None = None) -> int:
        async def job(c: asyncpg.Connection) -> int:
            if token_hash is None:
                gone = await c.fetch("DELETE FROM tokens WHERE principal = $1 RETURNING 1", name)
            else:
                gone = await c.fetch(
                    "DELETE FROM tokens WHERE principal = $1 AND hash = $2 RETURNING 1", name, token_hash
                )
            return len(gone)

        return await self._tx(job)

    async def list_principals(self) -> list[PrincipalRecord]:
        rows = await self._fetch("SELECT name, admin, created_at FROM principals ORDER BY name")
        return [PrincipalRecord(name=r[0], admin=r[1], created_at=r[2]) for r in rows]
