"""Principals and their tokens in the SQLite store."""

from __future__ import annotations

import sqlite3

from ._base import PrincipalStore
from ._records import PrincipalRecord
from ._sqlite_db import SQLiteAccess
from ._sqlite_writer import Writer

__all__ = ["SQLitePrincipalStore"]


class SQLitePrincipalStore(SQLiteAccess, PrincipalStore):
    async def create_principal(self, record: PrincipalRecord, token_hash: bytes) -> bool:
        def job(c: sqlite3.Connection, w: Writer) -> bool:
            if c.execute("SELECT 1 FROM principals WHERE name = ?", (record.name,)).fetchone():
                return False
            c.execute(
                "INSERT INTO principals(name, admin, created_at) VALUES (?, ?, ?)",
                (record.name, int(record.admin), record.created_at),
            )
            c.execute("INSERT INTO tokens(hash, principal) VALUES (?, ?)", (token_hash, record.name))
            return True

        return await self._write(job)

    async def add_token(self, name: str, token_hash: bytes) -> bool:
        def job(c: sqlite3.Connection, w: Writer) -> bool:
            if not c.execute("SELECT 1 FROM principals WHERE name = ?", (name,)).fetchone():
                return False
            c.execute("INSERT INTO tokens(hash, principal) VALUES (?, ?)", (token_hash, name))
            return True

        return await self._write(job)

    async def principal_by_token(self, token_hash: bytes) -> PrincipalRecord | None:
        def q(c: sqlite3.Connection) -> PrincipalRecord | None:
            row = c.execute(
                "SELECT p.name, p.admin, p.created_at FROM tokens t JOIN principals p "
                "ON p.name = t.principal WHERE t.hash = ?",
                (token_hash,),
            ).fetchone()
            return None if row is None else PrincipalRecord(name=row[0], admin=bool(row[1]), created_at=row[2])

        return await self._read(q)

    async def revoke_tokens(self, name: str, token_hash: bytes | None = None) -> int:
        def job(c: sqlite3.Connection, w: Writer) -> int:
            if token_hash is None:
                return c.execute("DELETE FROM tokens WHERE principal = ?", (name,)).rowcount
            return c.execute("DELETE FROM tokens WHERE principal = ? AND hash = ?", (name, token_hash)).rowcount

        return await self._write(job)

    async def list_principals(self) -> list[PrincipalRecord]:
        def q(c: sqlite3.Connection) -> list[PrincipalRecord]:
            rows = c.execute("SELECT name, admin, created_at FROM principals ORDER BY name").fetchall()
            return [PrincipalRecord(name=r[0], admin=bool(r[1]), created_at=r[2]) for r in rows]

        return await self._read(q)
