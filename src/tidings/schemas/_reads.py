"""The schema registry's reads (``icrc_schemas_get*``, the queries, the limits): a base of
:class:`~tidings.schemas.registry.SchemaRegistry`, which holds what they read; kept apart
so that the registry's module holds the rules that change it."""

from __future__ import annotations

from collections.abc import Sequence

from ..core import schemas as rules
from ..core.wire_schemas import (
    SchemaChangeInfo,
    SchemaInfo,
    SchemaLimits,
    SchemaPolicy,
    SchemaQuery,
    SchemaValidity,
    SchemaVersionInfo,
)
from ..store import SchemaRecord, SchemaVersion, Store

__all__ = ["SchemaReads"]


class SchemaReads:
    # Held by SchemaRegistry; declared here for the reads.
    _store: Store
    schemas: dict[int, SchemaRecord]
    _versions: dict[str, list[SchemaVersion]]
    _names_of: dict[int, list[SchemaVersion]]
    _replaced_by: dict[int, list[int]]
    limits: rules.Limits

    def live(self, schema_id: int) -> SchemaRecord | None:
        r = self.schemas.get(schema_id)
        return r if r is not None and r.deleted_at is None else None

    def count(self) -> int:
        return sum(1 for r in self.schemas.values() if r.deleted_at is None)

    def info(self, schema_id: int) -> SchemaInfo | None:
        r = self.live(schema_id)
        if r is None:
            return None
        return SchemaInfo(
            id=r.id, format=r.format, model=r.model,
            versions=[SchemaVersionInfo(name=v.name, version=v.version, id=r.id) for v in self._names_of[r.id]],
            replaces=r.replaces,
            replaced_by=[i for i in self._replaced_by.get(r.id, ()) if self.live(i) is not None],
            validity=self.validity_info(r), policy=SchemaPolicy(retention_s=r.retention_s, starting_at=r.starting_at),
            created_at=r.created_at, created_by=r.created_by,
        )

    @staticmethod
    def validity(r: SchemaRecord) -> rules.Validity:
        return rules.Validity(rules.SchemaState(r.state), r.valid_from, r.valid_to)

    def validity_info(self, r: SchemaRecord) -> SchemaValidity:
        return SchemaValidity(state=r.state, valid_from=r.valid_from, valid_to=r.valid_to)  # type: ignore[arg-type]

    def get(self, ids: Sequence[int]) -> list[SchemaInfo | None]:
        return [self.info(i) for i in ids]

    def get_state(self, ids: Sequence[int]) -> list[SchemaValidity | None]:
        return [None if (r := self.live(i)) is None else self.validity_info(r) for i in ids]

    def get_retention(self, ids: Sequence[int]) -> list[SchemaPolicy | None]:
        return [
            None if (r := self.live(i)) is None else SchemaPolicy(retention_s=r.retention_s, starting_at=r.starting_at)
            for i in ids
        ]

    def query(self, q: SchemaQuery, max_take: int) -> list[SchemaInfo]:
        if q.name is not None:
            ids = sorted({v.schema_id for v in self._versions.get(q.name, ())})
        else:
            ids = sorted(i for i, r in self.schemas.items() if r.deleted_at is None)
        take = max_take if q.take is None else min(q.take, max_take)
        out: list[SchemaInfo] = []
        for i in ids:
            if len(out) >= take:
                break
            if (q.prev is not None and i <= q.prev) or (q.state is not None and self.schemas[i].state != q.state):
                continue
            info = self.info(i)
            if info is not None:
                out.append(info)
        return out

    def get_versions(self, names: Sequence[str]) -> list[list[SchemaVersionInfo] | None]:
        return [
            [SchemaVersionInfo(name=v.name, version=v.version, id=v.schema_id) for v in vs] or None
            for vs in (self._versions.get(n, []) for n in names)
        ]

    def get_replacements(self, ids: Sequence[int]) -> list[list[int] | None]:
        return [
            None if self.live(i) is None else [j for j in self._replaced_by.get(i, ()) if self.live(j) is not None]
            for i in ids
        ]

    async def history(self, schema_id: int | None, prev: int | None, take: int) -> list[SchemaChangeInfo]:
        changes = await self._store.schema_changes(schema_id, prev or 0, take)
        return [
            SchemaChangeInfo(seq=c.seq, schema_id=c.schema_id, at=c.at, by=c.by, action=c.action, detail=c.detail)
            for c in changes
        ]

    def limits_info(self) -> SchemaLimits:
        lim = self.limits
        return SchemaLimits(
            max_count=lim.max_count, min_size=lim.min_size, max_size=lim.max_size,
            open_registration=lim.open_registration, registrars=list(lim.registrars),
            default_compatibility=lim.default_compatibility, count=self.count(),
        )
