"""What the registry does per subject (a schema name) for the Confluent face: soft and
permanent deletes, modes, references between versions. Mixed into ``SchemaRegistry``.

A version is live, soft-deleted or gone. A soft delete hides the version from listings,
from compatibility checks and from publication bindings by name; the schema behind it
keeps its id and stays readable. A permanent delete (only of a soft-deleted version)
removes the version; when a schema is left with no version at all, it is deleted
itself, so its id answers "not found" from then on (ids and version numbers are never
reused). Removing a subject's last version also removes its compatibility level and mode.

Modes: READWRITE (the default), READONLY and READONLY_OVERRIDE (no registration, no
deletion), IMPORT (registration keeps the id and version it is given, and skips the
compatibility check). A subject's own mode wins over the global one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..core import schemas as rules
from ..core.wire_schemas import CompatibilityConfig, SchemaResult, schema_err, schema_ok
from ..errors import BadRequest, Forbidden
from ..store import PrincipalRecord, SchemaChange, SchemaRecord, SchemaVersion, Store
from .formats import CompatibilityMode
from .references import RefTarget

if TYPE_CHECKING:
    from .formats import Model

__all__ = ["MODES", "SubjectOps", "compat_level"]

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
_READ_ONLY = ("READONLY", "READONLY_OVERRIDE")

T = TypeVar("T")


class SubjectOps:
    _store: Store
    _clock: Callable[[], int]
    schemas: dict[int, SchemaRecord]
    _models: dict[int, Model]
    _by_canonical: dict[tuple[str, str], int]
    _versions: dict[str, list[SchemaVersion]]
    _deleted_versions: dict[str, list[int]]
    _names_of: dict[int, list[SchemaVersion]]
    _soft: dict[str, list[SchemaVersion]]
    _soft_of: dict[int, list[SchemaVersion]]
    _compat: dict[str, str]
    _modes: dict[str, str]
    generation: int

    def _change(self, caller: str, action: str, schema_id: int | None, detail: Any = "") -> SchemaChange:
        raise NotImplementedError  # SchemaRegistry's

    async def _consistently(self, fn: Callable[[], Awaitable[T]]) -> T:
        raise NotImplementedError  # SchemaRegistry's: a change on a copy brought up to the store

    async def _save(
        self, record: SchemaRecord | None, versions: Sequence[SchemaVersion], changes: Sequence[SchemaChange]
    ) -> None:
        raise NotImplementedError  # SchemaRegistry's: the store's, as a compare-and-set

    async def _put_setting(self, key: str, value: Any, change: SchemaChange) -> None:
        raise NotImplementedError  # SchemaRegistry's: the store's, as a compare-and-set

    # -- reads ----------------------------------------------------------------------------

    def soft_deleted_of(self, name: str) -> list[SchemaVersion]:
        """The soft-deleted versions of ``name``, oldest first."""
        return list(self._soft.get(name, ()))

    def subjects(self, *, deleted: bool = False) -> list[str]:
        """Names with a live version; with ``deleted``, also those with only soft-deleted ones."""
        names = {n for n, vs in self._versions.items() if vs}
        if deleted:
            names |= {n for n, vs in self._soft.items() if vs}
        return sorted(names)

    def versions_of_id(self, schema_id: int, *, deleted: bool = False) -> list[SchemaVersion]:
        """The (name, version) pairs of a schema; with ``deleted``, soft-deleted ones too."""
        out = list(self._names_of.get(schema_id, ()))
        if deleted:
            out += self._soft_of.get(schema_id, ())
        return sorted(out, key=lambda v: (v.name, v.version))

    def taken_versions(self, name: str) -> list[int]:
        return ([v.version for v in self._versions.get(name, ())] + [v.version for v in self._soft.get(name, ())]
                + self._deleted_versions.get(name, []))

    def find_version(self, name: str, version: int | None, *, deleted: bool = False) -> SchemaVersion | None:
        """A live version of ``name`` (``None``: the latest); with ``deleted``, soft-deleted ones too."""
        vs = list(self._versions.get(name, ()))
        if deleted:
            vs = sorted(vs + self._soft.get(name, []), key=lambda v: v.version)
        if version is None:
            return vs[-1] if vs else None
        return next((v for v in vs if v.version == version), None)

    def ref_target(self, subject: str, version: int) -> RefTarget | None:
        """What a reference to ``version`` (-1: the latest) of ``subject`` reads, if it exists."""
        v = self.find_version(subject, None if version == -1 else version, deleted=True)
        r = None if v is None else self.schemas.get(v.schema_id)
        return None if r is None or r.deleted_at is not None else (r.format, r.model, r.references)

    def referrers(self, subject: str, version: int, *, deleted: bool = False) -> list[int]:
        """Ids of schemas that reference ``version`` of ``subject`` and have a live version
        (with ``deleted``, a soft-deleted one counts too), or no name at all."""
        out = []
        for i, r in self.schemas.items():
            if r.deleted_at is None and any(ref[1] == subject and ref[2] == version for ref in r.references):
                named = bool(self._names_of.get(i)) or (deleted and bool(self._soft_of.get(i)))
                if named or not (self._names_of.get(i) or self._soft_of.get(i)):
                    out.append(i)
        return sorted(out)

    # -- modes ----------------------------------------------------------------------------

    def mode(self, name: str | None) -> str:
        """The mode in force for ``name`` (``None``: the global mode)."""
        return self._modes.get(name or "") or self._modes.get("", "READWRITE")

    def own_mode(self, name: str) -> str | None:
        return self._modes.get(name)

    def own_compatibility(self, name: str) -> str | None:
        """The compatibility level set on ``name`` itself, if any."""
        return self._compat.get(name)

    def mode_refusal(
        self, name: str | None, mode: str, key: str, forced_id: int | None, forced_version: int | None
    ) -> str | None:
        """Why a registration may not happen in ``mode``, or None."""
        what = f"subject {name!r}" if name else "the registry"
        if mode in _READ_ONLY:
            return f"{what} is in {mode} mode: nothing can be registered"
        if forced_id is None and forced_version is None:
            return None
        if mode != "IMPORT":
            return f"{what} is not in IMPORT mode: the registry assigns ids and versions itself"
        if forced_id is not None:
            r = self.schemas.get(forced_id)
            if r is not None and (r.deleted_at is not None or r.canonical != key):
                return f"id {forced_id} is already taken by another schema"
            held = next((i for (_, k), i in self._by_canonical.items() if k == key), None)
            if r is None and held is not None:
                return f"this schema is registered already, as id {held}"
        if forced_version is not None and name is not None and forced_version in self.taken_versions(name):
            return f"version {forced_version} of subject {name!r} is taken"
        return None

    async def set_mode(self, caller: PrincipalRecord, name: str | None, mode: str | None, *, force: bool) -> None:
        """Set (``mode`` None: remove) the mode of ``name`` or, for ``None``, the global one."""
        await self._consistently(lambda: self._set_mode(caller, name, mode, force=force))

    async def _set_mode(self, caller: PrincipalRecord, name: str | None, mode: str | None, *, force: bool) -> None:
        if not caller.admin:
            raise Forbidden("only an admin sets modes")
        if name is not None and not rules.valid_name(name):
            raise BadRequest(f"{name!r} is not a schema name", code="improper_name")
        if mode == "IMPORT" and not force and (self._versions.get(name) if name else self.subjects()):
            raise BadRequest(f"{'subject ' + repr(name) if name else 'the registry'} has schemas: switching to "
                             "IMPORT needs force=true", code="invalid_state")
        key = "mode" if name is None else f"mode:{name}"
        await self._put_setting(key, mode, self._change(caller.name, "mode", None,
                                                                     {"name": name, "mode": mode}))
        if mode is None:
            self._modes.pop(name or "", None)
        else:
            self._modes[name or ""] = mode
        self.generation += 1

    async def set_compatibility(
        self, caller: PrincipalRecord, items: Sequence[CompatibilityConfig]
    ) -> list[SchemaResult]:
        return await self._consistently(lambda: self._set_compatibility(caller, items))

    async def _set_compatibility(
        self, caller: PrincipalRecord, items: Sequence[CompatibilityConfig]
    ) -> list[SchemaResult]:
        if not caller.admin:  # admin-only: the whole call is refused (docs/rights.md)
            raise Forbidden("only an admin sets compatibility modes")
        out: list[SchemaResult] = []
        for c in items:
            if not rules.valid_name(c.name):
                out.append(schema_err("ImproperName", f"{c.name!r} is not a schema name"))
                continue
            try:
                mode = None if c.compatibility is None else compat_level(c.compatibility)
            except BadRequest as e:
                out.append(schema_err("ImproperConfig", e.message))
                continue
            await self._put_setting(
                "compatibility:" + c.name, mode, self._change(caller.name, "compatibility", None,
                                                          {"name": c.name, "compatibility": mode}),
            )
            if mode is None:
                self._compat.pop(c.name, None)
            else:
                self._compat[c.name] = mode
            out.append(schema_ok(True))
        self.generation += 1
        return out

    # -- deletes --------------------------------------------------------------------------

    async def soft_delete(self, caller: PrincipalRecord, versions: Sequence[SchemaVersion]) -> None:
        """Soft-delete live ``versions``."""
        await self._consistently(lambda: self._soft_delete(caller, versions))

    async def _soft_delete(self, caller: PrincipalRecord, versions: Sequence[SchemaVersion]) -> None:
        now = self._clock()
        wanted = {(v.name, v.version) for v in versions}  # as stored now: they may have been read before
        for v in [x for vs in self._versions.values() for x in vs if (x.name, x.version) in wanted]:
            soft = replace(v, soft_deleted_at=now)
            await self._save(None, [soft], [self._change(
                caller.name, "soft_delete_version", v.schema_id, {"name": v.name, "version": v.version})])
            self._versions[v.name] = [x for x in self._versions[v.name] if x.version != v.version]
            if not self._versions[v.name]:
                del self._versions[v.name]
            self._names_of[v.schema_id] = [
                x for x in self._names_of[v.schema_id] if (x.name, x.version) != (v.name, v.version)
            ]
            self._soft[v.name].append(soft)
            self._soft[v.name].sort(key=lambda x: x.version)
            self._soft_of[v.schema_id].append(soft)
        self.generation += 1

    async def hard_delete(self, caller: PrincipalRecord, versions: Sequence[SchemaVersion]) -> None:
        """Permanently delete soft-deleted ``versions``, and each schema left without a version."""
        await self._consistently(lambda: self._hard_delete(caller, versions))

    async def _hard_delete(self, caller: PrincipalRecord, versions: Sequence[SchemaVersion]) -> None:
        now = self._clock()
        wanted = {(v.name, v.version) for v in versions}  # as stored now: they may have been read before
        for v in [x for vs in self._soft.values() for x in vs if (x.name, x.version) in wanted]:
            others = [x for x in (*self._names_of.get(v.schema_id, ()), *self._soft_of.get(v.schema_id, ()))
                      if (x.name, x.version) != (v.name, v.version)]
            r = self.schemas[v.schema_id]
            if others or r.deleted_at is not None:
                gone = replace(v, deleted_at=now)
                await self._save(None, [gone], [self._change(
                    caller.name, "delete_version", v.schema_id, {"name": v.name, "version": v.version})])
                self._forget(v)
            else:
                await self.drop_schema(caller, r, [v], "delete")
        self.generation += 1

    def _forget(self, v: SchemaVersion) -> None:
        self._soft[v.name] = [x for x in self._soft.get(v.name, ()) if x.version != v.version]
        self._soft_of[v.schema_id] = [x for x in self._soft_of.get(v.schema_id, ()) if x.version != v.version
                                      or x.name != v.name]
        self._versions[v.name] = [x for x in self._versions.get(v.name, ()) if x.version != v.version]
        self._names_of[v.schema_id] = [x for x in self._names_of.get(v.schema_id, ()) if x.version != v.version
                                       or x.name != v.name]
        for index in (self._soft, self._versions):
            if not index[v.name]:
                del index[v.name]
        self._deleted_versions[v.name].append(v.version)

    async def drop_schema(self, caller: PrincipalRecord, r: SchemaRecord, versions: Sequence[SchemaVersion],
                          action: str) -> None:
        """Delete schema ``r`` and ``versions`` (all it has) for good."""
        await self._consistently(lambda: self._drop_schema(caller, r.id, versions, action))

    async def _drop_schema(self, caller: PrincipalRecord, schema_id: int, versions: Sequence[SchemaVersion],
                           action: str) -> None:
        r = self.schemas.get(schema_id)
        if r is None or r.deleted_at is not None:
            return
        wanted = {(v.name, v.version) for v in versions}  # as stored now: they may have been read before
        versions = [x for x in (*self._names_of.get(r.id, ()), *self._soft_of.get(r.id, ()))
                    if (x.name, x.version) in wanted]
        now = self._clock()
        rec = replace(r, deleted_at=now)
        gone = [replace(v, deleted_at=now) for v in versions]
        await self._save(rec, gone, [self._change(caller.name, action, r.id)])
        self.schemas[r.id] = rec
        self._by_canonical.pop((r.format, r.canonical), None)
        for v in versions:
            self._forget(v)
        self._names_of.pop(r.id, None)
        self._soft_of.pop(r.id, None)
        self._models.pop(r.id, None)
        self.generation += 1

    async def forget_subject(self, caller: PrincipalRecord, name: str) -> None:
        """Drop the compatibility level and mode of a subject that has no version left."""
        await self._consistently(lambda: self._forget_subject(caller, name))

    async def _forget_subject(self, caller: PrincipalRecord, name: str) -> None:
        if self._versions.get(name) or self._soft.get(name) or not rules.valid_name(name):
            return
        for key, index in (("compatibility:", self._compat), ("mode:", self._modes)):
            if name in index:
                await self._put_setting(key + name, None, self._change(
                    caller.name, key.rstrip(":"), None, {"name": name, key.rstrip(":"): None}))
                del index[name]
        self.generation += 1

def compat_level(text: str) -> str:
    try:
        return str(CompatibilityMode(text.upper()))
    except ValueError:
        modes = ", ".join(m.value for m in CompatibilityMode)
        raise BadRequest(f"unknown compatibility mode {text!r}; use one of {modes}", code="invalid_argument") from None
