"""The schema registry's part of the in-memory store (mixed into ``MemoryStore``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ._memory_state import MemoryState
from ._schemas import SchemaChange, SchemaConflict, SchemaRecord, SchemaSnapshot, SchemaStore, SchemaVersion

__all__ = ["MemorySchemaStore"]


class MemorySchemaStore(MemoryState, SchemaStore):
    """Copies in and out, so callers never share the store's objects (as with SQLite)."""

    def _schema_state(self) -> dict[str, Any]:
        st: dict[str, Any] | None = getattr(self, "_schemas_mem", None)
        if st is None:
            st = {"schemas": {}, "versions": {}, "settings": {}, "changes": [], "last_id": 0}
            self._schemas_mem = st
        return st

    async def load_schemas(self) -> SchemaSnapshot:
        self._check()
        st = self._schema_state()
        return SchemaSnapshot(
            schemas=[copy.copy(r) for _, r in sorted(st["schemas"].items())],
            versions=[copy.copy(v) for _, v in sorted(st["versions"].items())],
            settings=copy.deepcopy(st["settings"]), seq=len(st["changes"]),
        )

    async def schema_seq(self) -> int:
        self._check()
        return len(self._schema_state()["changes"])

    def _expect(self, expect_seq: int | None) -> None:
        if expect_seq is not None and expect_seq != len(self._schema_state()["changes"]):
            raise SchemaConflict("the schema registry changed meanwhile")

    async def create_schema(
        self, record: SchemaRecord, versions: Sequence[SchemaVersion], change: SchemaChange,
        *, expect_seq: int | None = None,
    ) -> SchemaRecord:
        self._check()
        self._expect(expect_seq)
        st = self._schema_state()
        if record.id > 0:
            st["last_id"] = max(st["last_id"], record.id)
        else:
            st["last_id"] += 1
            record.id = st["last_id"]
        change.schema_id = record.id
        for v in versions:
            v.schema_id = record.id
        st["schemas"][record.id] = copy.copy(record)
        self._put_versions(versions)
        self._put_changes([change])
        return record

    def _put_versions(self, versions: Sequence[SchemaVersion]) -> None:
        for v in versions:
            self._schema_state()["versions"][(v.name, v.version)] = copy.copy(v)

    def _put_changes(self, changes: Sequence[SchemaChange]) -> None:
        log: list[SchemaChange] = self._schema_state()["changes"]
        for x in changes:
            x.seq = len(log) + 1
            log.append(copy.copy(x))

    async def save_schema(
        self,
        record: SchemaRecord | None,
        versions: Sequence[SchemaVersion],
        changes: Sequence[SchemaChange],
        *, expect_seq: int | None = None,
    ) -> None:
        self._check()
        self._expect(expect_seq)
        if record is not None and record.id in self._schema_state()["schemas"]:
            self._schema_state()["schemas"][record.id] = copy.copy(record)
        self._put_versions(versions)
        self._put_changes(changes)

    async def put_schema_setting(
        self, key: str, value: Any, change: SchemaChange, *, expect_seq: int | None = None
    ) -> None:
        self._check()
        self._expect(expect_seq)
        settings = self._schema_state()["settings"]
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = copy.deepcopy(value)
        self._put_changes([change])

    async def schema_changes(
        self, schema_id: int | None, after: int = 0, limit: int | None = None
    ) -> list[SchemaChange]:
        self._check()
        found = [
            copy.copy(x) for x in self._schema_state()["changes"]
            if x.seq > after and (schema_id is None or x.schema_id == schema_id)
        ]
        return found if limit is None or limit < 0 else found[:limit]
