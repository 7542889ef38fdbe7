"""Principals and their tokens in the in-memory store."""

from __future__ import annotations

from ..errors import StoreError
from ._base import PrincipalStore
from ._memory_state import MemoryState
from ._records import PrincipalRecord

__all__ = ["MemoryPrincipalStore"]


class MemoryPrincipalStore(MemoryState, PrincipalStore):
    async def create_principal(self, record: PrincipalRecord, token_hash: bytes) -> bool:
        self._check()
        if record.name in self._principals:
            return False
        if token_hash in self._tokens:
            raise StoreError("token hash already in use")
        self._principals[record.name] = PrincipalRecord(
            name=record.name, admin=bool(record.admin), created_at=record.created_at
        )
        self._tokens[token_hash] = record.name
        return True

    async def add_token(self, name: str, token_hash: bytes) -> bool:
        self._check()
        if name not in self._principals:
            return False
        if token_hash in self._tokens:
            raise StoreError("token hash already in use")
        self._tokens[token_hash] = name
        return True

    async def principal_by_token(self, token_hash: bytes) -> PrincipalRecord | None:
        self._check()
        name = self._tokens.get(token_hash)
        return None if name is None else self._principals[name]

    async def revoke_tokens(self, name: str, token_hash: bytes | None = None) -> int:
        self._check()
        gone = [h for h, n in self._tokens.items() if n == name and (token_hash is None or h == token_hash)]
        for h in gone:
            del self._tokens[h]
        return len(gone)

    async def list_principals(self) -> list[PrincipalRecord]:
        self._check()
        return [self._principals[n] for n in sorted(self._principals)]
