"""The schema registry: registration checks, reads, states, retention, evolution.

Every schema lives in memory (there are at most ``max_count``) and is written through
to the store before a call answers. A schema id names one model; names map
``(name, version)`` onto ids, so one id may appear under several names (as in the
Confluent Schema Registry). Registration runs its checks in this order, each with its
own error code: authorised (``Unauthorized``), size (``SchemaTooSmall``,
``SchemaTooLarge``), well formed (``MalformedSchema``), duplicate (answered with the
existing id), name (``ImproperName``), replaced schema (``NotFound``), count
(``TooManySchemas``), compatibility (``IncompatibleSchema``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import msgspec

from ..core import schemas as rules
from ..core.wire_schemas import (
    CompatibilityIssue,
    SchemaLimits,
    SchemaLimitsUpdate,
    SchemaRegistered,
    SchemaRegistration,
    SchemaResult,
    SchemaRetentionUpdate,
    SchemaStateUpdate,
    schema_err,
    schema_ok,
)
from ..errors import BadRequest, Forbidden
from ..store import PrincipalRecord, SchemaChange, SchemaConflict, SchemaRecord, SchemaVersion, Store
from ._reads import SchemaReads
from ._subjects import SubjectOps, compat_level
from .formats import MalformedSchema, Model, check_compatibility, json_canonical, parse_model
from .references import Ref, identity, parse_with_references

__all__ = ["SchemaRegistry"]

T = TypeVar("T")

_CAS_TRIES = 16
"""Tries of a change before it gives up (each lost try means another broadcaster changed
the registry meanwhile; the change is decided again on what it wrote)."""

_LIMITS_KEY = "limits"
_COMPAT_KEY = "compatibility:"
_MODE_KEY = "mode"


def _issue(i: Any, versions: Sequence[int]) -> CompatibilityIssue:
    v = i.version
    return CompatibilityIssue(
        path=i.path, rule=i.rule, message=i.message, version=versions[v] if v is not None else None
    )


class SchemaRegistry(SubjectOps, SchemaReads):
    def __init__(
        self, store: Store, *, assert_formats: bool = False, clock: Callable[[], int] = time.time_ns
    ) -> None:
        self._store = store
        self.assert_formats = assert_formats
        """``format`` asserted in every JSON Schema draft (``TIDINGS_SCHEMA_FORMAT_ASSERTION``)."""
        self._clock = clock
        self._lock = asyncio.Lock()
        self._holder: asyncio.Task[Any] | None = None
        self._seq = -1
        """The store's registry version (``SchemaStore.schema_seq``) this copy holds; -1: none."""
        self._models: dict[int, Model] = {}
        self.limits = rules.DEFAULT_LIMITS
        self.generation = 0
        """Bumped on every change, so what is derived from the registry knows to refresh."""
        self._clear()

    def _clear(self) -> None:
        self.schemas: dict[int, SchemaRecord] = {}
        self._by_canonical: dict[tuple[str, str], int] = {}
        self._versions: dict[str, list[SchemaVersion]] = defaultdict(list)
        self._deleted_versions: dict[str, list[int]] = defaultdict(list)
        self._names_of: dict[int, list[SchemaVersion]] = defaultdict(list)
        self._soft: dict[str, list[SchemaVersion]] = defaultdict(list)
        self._soft_of: dict[int, list[SchemaVersion]] = defaultdict(list)
        self._modes: dict[str, str] = {}
        self._replaced_by: dict[int, list[int]] = defaultdict(list)
        self._compat: dict[str, str] = {}
        self.limits = rules.DEFAULT_LIMITS

    def parse(self, fmt: str, text: str, refs: Sequence[Sequence[Any]] = ()) -> Model:
        """``parse_model`` with this registry's options and ``refs`` resolved (``references.py``);
        MalformedSchema when not well formed."""
        return parse_with_references(fmt, text, refs, self.ref_target, assert_formats=self.assert_formats)

    # -- loading and indexes ------------------------------------------------------------

    async def load(self) -> None:
        await self.refresh()

    async def refresh(self) -> None:
        """Bring this copy up to the store, if another broadcaster changed the registry
        (one cheap read when it did not): asked before every read and change that
        decides, and on signals and the heartbeat (docs/scaling.md, "Shared state")."""
        async with self._held():
            await self._refresh()

    async def _refresh(self) -> None:
        if await self._store.schema_seq() == self._seq:
            return
        snap = await self._store.load_schemas()
        old = self.schemas
        self._clear()
        for r in snap.schemas:
            self._index(r)
        for v in snap.versions:
            self._index_version(v)
        for key, value in snap.settings.items():
            if key == _LIMITS_KEY:
                value["registrars"] = tuple(value.get("registrars", ()))
                # Limits an older version let past the bounds are brought back within them.
                for name, (low, high) in rules.BOUNDS.items():
                    if name in value:
                        value[name] = min(max(value[name], low), high)
                self.limits = replace(rules.DEFAULT_LIMITS, **value)
            elif key.startswith(_COMPAT_KEY):
                self._compat[key[len(_COMPAT_KEY):]] = value
            elif key == _MODE_KEY or key.startswith(_MODE_KEY + ":"):
                self._modes[key[len(_MODE_KEY) + 1:]] = value
        # A parsed model is kept while its schema's text is the same (parsing is the cost).
        for i in [i for i in self._models if i not in self.schemas or _text(self.schemas[i]) != _text(old[i])]:
            del self._models[i]
        self._seq = snap.seq
        self.generation += 1

    @contextlib.asynccontextmanager
    async def _held(self) -> Any:
        """The registry's lock, taken again freely by the task holding it (a change that
        calls another)."""
        me = asyncio.current_task()
        if self._holder is me and me is not None:
            yield
            return
        async with self._lock:
            self._holder = me
            try:
                yield
            finally:
                self._holder = None

    async def _consistently(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run a change on a copy brought up to the store, again from there if another
        broadcaster wrote first (each write is a compare-and-set on the registry's
        version): decided on what is stored, never on a stale copy, so ids and version
        numbers are given once cluster-wide and a duplicate is known through any member."""
        async with self._held():
            for _ in range(_CAS_TRIES):
                await self._refresh()
                try:
                    return await fn()
                except SchemaConflict:
                    self._seq = -1
            raise SchemaConflict("the schema registry kept changing through other broadcasters; try again")

    # -- the store's writes, each a compare-and-set on the registry's version ------------

    async def _create(self, rec: SchemaRecord, versions: Sequence[SchemaVersion], change: SchemaChange) -> SchemaRecord:
        out = await self._store.create_schema(rec, versions, change, expect_seq=self._seq)
        self._seq = change.seq
        return out

    async def _save(
        self, record: SchemaRecord | None, versions: Sequence[SchemaVersion], changes: Sequence[SchemaChange]
    ) -> None:
        await self._store.save_schema(record, versions, changes, expect_seq=self._seq)
        self._seq = max((c.seq for c in changes), default=self._seq)

    async def _put_setting(self, key: str, value: Any, change: SchemaChange) -> None:
        await self._store.put_schema_setting(key, value, change, expect_seq=self._seq)
        self._seq = change.seq

    def _index(self, r: SchemaRecord) -> None:
        if r.format == "JSON" and r.deleted_at is None and not r.references:
            # Stored by an older version, the canonical text may write 1.0 where it now
            # writes 1: recomputed, so the same schema registered again finds its id. (A
            # schema with references came later, and its canonical text is of the bundle.)
            with contextlib.suppress(MalformedSchema):
                r = replace(r, canonical=json_canonical(r.model))
        self.schemas[r.id] = r
        if r.deleted_at is None:
            self._by_canonical[(r.format, r.canonical)] = r.id
        if r.replaces is not None and r.id not in self._replaced_by[r.replaces]:
            self._replaced_by[r.replaces].append(r.id)

    def _index_version(self, v: SchemaVersion) -> None:
        if v.deleted_at is not None:
            self._deleted_versions[v.name].append(v.version)
            return
        if v.soft_deleted_at is not None:
            self._soft[v.name].append(v)
            self._soft[v.name].sort(key=lambda x: x.version)
            self._soft_of[v.schema_id].append(v)
            return
        vs = self._versions[v.name]
        vs.append(v)
        if len(vs) > 1 and vs[-2].version > v.version:  # an imported version below the newest
            vs.sort(key=lambda x: x.version)
        self._names_of[v.schema_id].append(v)

    def model(self, schema_id: int) -> Model:
        m = self._models.get(schema_id)
        if m is None:
            r = self.schemas[schema_id]
            if r.references:
                m = self.parse(r.format, r.model, r.references)
            else:  # read by the rules it was stored under (parse_model's ``stored``)
                m = parse_model(r.format, r.model, assert_formats=self.assert_formats, stored=True)
            self._models[schema_id] = m
        return m

    def versions_of(self, name: str) -> list[SchemaVersion]:
        """The live versions of ``name``, oldest first."""
        return list(self._versions.get(name, ()))

    def compatibility(self, name: str | None) -> str:
        return self._compat.get(name or "", self.limits.default_compatibility)

    def _change(self, caller: str, action: str, schema_id: int | None, detail: Any = "") -> SchemaChange:
        text = detail if isinstance(detail, str) else msgspec.json.encode(detail).decode()
        return SchemaChange(schema_id=schema_id, at=self._clock(), by=caller, action=action, detail=text)

    # -- registration -------------------------------------------------------------------

    async def register(self, caller: PrincipalRecord, items: Sequence[SchemaRegistration]) -> list[SchemaResult]:
        out = []
        for item in items:
            out.append(await self._consistently(lambda item=item: self._register_one(caller, item)))  # type: ignore[misc]
        self.generation += 1
        return out

    async def register_with(
        self, caller: PrincipalRecord, item: SchemaRegistration, refs: Sequence[Ref] = (),
        forced_id: int | None = None, forced_version: int | None = None,
    ) -> SchemaResult:
        """One registration with the Confluent face's extras: references, and in IMPORT
        mode the id and version it is given."""
        out = await self._consistently(lambda: self._register_one(caller, item, refs, forced_id, forced_version))
        self.generation += 1
        return out

    async def _register_one(
        self, caller: PrincipalRecord, item: SchemaRegistration, refs: Sequence[Ref] = (),
        forced_id: int | None = None, forced_version: int | None = None,
    ) -> SchemaResult:
        """One registration; ``refs``, ``forced_id`` and ``forced_version`` come from the
        Confluent face (references; an id and version given in IMPORT mode)."""
        if not self.limits.may_register(caller.name, caller.admin):
            return schema_err("Unauthorized", f"{caller.name} may not register schemas")
        size = len(item.model.encode())
        if size < self.limits.min_size:
            return schema_err("SchemaTooSmall", f"the model is {size} bytes; the minimum is {self.limits.min_size}")
        if size > self.limits.max_size:
            return schema_err("SchemaTooLarge", f"the model is {size} bytes; the maximum is {self.limits.max_size}")
        try:
            model = self.parse(item.format, item.model, refs)
        except MalformedSchema as e:
            return schema_err("MalformedSchema", str(e))
        fmt, key = str(model.format), identity(model, refs)
        name = item.name
        if name is not None and not rules.valid_name(name):
            return schema_err("ImproperName", f"{name!r} is not a schema name: use 1-255 of letters, digits "
                                              "and . _ : @ / - (by convention protocol.descriptor)")
        mode = self.mode(name)
        refusal = self.mode_refusal(name, mode, key, forced_id, forced_version)
        if refusal is not None:
            return schema_err("InvalidState", refusal)
        replaces = item.replaces
        if replaces is not None:
            old = self.live(replaces)
            if old is None:
                return schema_err("NotFound", f"schema {replaces} (the one replaced) does not exist")
            if name is None and self._names_of.get(replaces):
                name = self._names_of[replaces][0].name
        elif name is not None and self._versions.get(name):
            replaces = self._versions[name][-1].schema_id

        existing = self._by_canonical.get((fmt, key))
        if forced_id is not None and existing is None and forced_id in self.schemas:
            existing = forced_id  # the imported id holds this very schema (mode_refusal checked)
        if existing is not None:
            under = next((v for v in self._names_of.get(existing, ()) if v.name == name), None)
            if name is None or under is not None:
                return schema_ok(SchemaRegistered(
                    id=existing, name=name, version=under.version if under else None, duplicate=True
                ))
        elif self.count() >= self.limits.max_count:
            return schema_err("TooManySchemas", f"the registry holds its maximum of {self.limits.max_count} schemas")

        issues = [] if mode == "IMPORT" else self._incompatibilities(name, model, replaces)
        if issues:
            return schema_err("IncompatibleSchema", issues)

        now = self._clock()
        version: int | None = None
        versions: list[SchemaVersion] = []
        if name is not None:
            version = forced_version or self._next_version(name)
            versions.append(SchemaVersion(name=name, version=version, schema_id=existing or 0, created_at=now))
        if existing is not None:  # a known model under a new name: only the version is new
            await self._save(None, versions, [
                self._change(caller.name, "add_version", existing, {"name": name, "version": version})
            ])
            for v in versions:
                self._index_version(v)
            return schema_ok(SchemaRegistered(id=existing, name=name, version=version, duplicate=True))

        rec = SchemaRecord(
            id=forced_id or 0, format=fmt, model=item.model, canonical=key, replaces=replaces, created_at=now,
            created_by=caller.name, valid_from=now, references=[list(r) for r in refs],
        )
        detail = {"name": name, "version": version, "replaces": replaces, "format": fmt}
        rec = await self._create(rec, versions, self._change(caller.name, "register", None, detail))
        self._index(rec)
        self._models[rec.id] = model
        for v in versions:
            self._index_version(v)
        return schema_ok(SchemaRegistered(id=rec.id, name=name, version=version))

    def _next_version(self, name: str) -> int:
        # Versions are never reused, not even those of deleted schemas: the store keeps them all.
        return max(self.taken_versions(name), default=0) + 1

    def _lineage(self, name: str | None, replaces: int | None) -> list[int]:
        """What a new schema is checked against, oldest first: the live, not Retracted
        versions of its name; for an unnamed schema, the chain of what it replaces."""
        if name is not None:
            ids = [v.schema_id for v in self._versions.get(name, ())]
        else:
            ids, seen, cur = [], set(), replaces
            while cur is not None and cur not in seen and self.live(cur) is not None:
                seen.add(cur)
                ids.append(cur)
                cur = self.schemas[cur].replaces
            ids.reverse()
        return [i for i in ids if self.schemas[i].state != rules.SchemaState.Retracted]

    def _incompatibilities(
        self, name: str | None, model: Model, replaces: int | None, mode: str | None = None
    ) -> list[CompatibilityIssue]:
        ids = self._lineage(name, replaces)
        if not ids:
            return []
        found = check_compatibility(mode or self.compatibility(name), model, [self.model(i) for i in ids])
        if name is not None:
            by_id = {v.schema_id: v.version for v in self._versions.get(name, ())}
            labels = [by_id.get(i, i) for i in ids]
        else:
            labels = ids
        return [_issue(i, labels) for i in found]

    def test_compatibility(
        self, name: str, fmt: str, text: str, version: int | None = None, refs: Sequence[Ref] = ()
    ) -> list[CompatibilityIssue]:
        """Would ``text`` be accepted as the next version of ``name`` (or against one
        ``version`` only)? Raises BadRequest when the model is malformed."""
        try:
            model = self.parse(fmt, text, refs)
        except MalformedSchema as e:
            raise BadRequest(str(e), code="malformed_schema") from None
        if version is None:
            return self._incompatibilities(name, model, None)
        v = next((v for v in self._versions.get(name, ()) if v.version == version), None)
        if v is None:
            return []
        mode = self.compatibility(name).removesuffix("_TRANSITIVE")
        found = check_compatibility(mode, model, [self.model(v.schema_id)])
        return [_issue(i, [version]) for i in found]

    # -- governance: admins only ---------------------------------------------------------

    async def update_state(self, caller: PrincipalRecord, items: Sequence[SchemaStateUpdate]) -> list[SchemaResult]:
        _admin_only(caller, "changes schema states")
        out = [await self._consistently(lambda u=u: self._update_state(caller, u)) for u in items]  # type: ignore[misc]
        self.generation += 1
        return out

    async def _update_state(self, caller: PrincipalRecord, u: SchemaStateUpdate) -> SchemaResult:
        r = self.live(u.id)
        if r is None:
            return schema_err("NotFound", f"no schema {u.id}")
        now = self._clock()
        new = rules.Validity(
            rules.SchemaState(u.state), u.valid_from if u.valid_from is not None else now,
            u.valid_to if u.state == rules.SchemaState.Deprecated else None,
        )
        try:
            rules.check_transition(self.validity(r), new)
        except rules.InvalidTransition as e:
            return schema_err("InvalidState", str(e))
        rec = replace(r, state=str(new.state), valid_from=new.valid_from, valid_to=new.valid_to)
        detail = {"state": rec.state, "valid_from": rec.valid_from, "valid_to": rec.valid_to, "was": r.state}
        await self._save(rec, [], [self._change(caller.name, "state", r.id, detail)])
        self.schemas[r.id] = rec
        return schema_ok(True)

    async def delete(self, caller: PrincipalRecord, ids: Sequence[int]) -> list[SchemaResult]:
        _admin_only(caller, "deletes schemas")
        out = [await self._consistently(lambda i=i: self._delete(caller, i)) for i in ids]  # type: ignore[misc]
        self.generation += 1
        return out

    async def _delete(self, caller: PrincipalRecord, i: int) -> SchemaResult:
        r = self.live(i)
        if r is None:
            return schema_err("NotFound", f"no schema {i}")
        await self.drop_schema(caller, r, [*self._names_of.get(i, ()), *self._soft_of.get(i, ())], "delete")
        return schema_ok(True)

    async def update_retention(
        self, caller: PrincipalRecord, items: Sequence[SchemaRetentionUpdate]
    ) -> list[SchemaResult]:
        _admin_only(caller, "changes retention")
        out = [await self._consistently(lambda u=u: self._update_retention(caller, u)) for u in items]  # type: ignore[misc]
        self.generation += 1
        return out

    async def _update_retention(self, caller: PrincipalRecord, u: SchemaRetentionUpdate) -> SchemaResult:
        r = self.live(u.id)
        if r is None:
            return schema_err("NotFound", f"no schema {u.id}")
        if u.retention_s is not None and u.retention_s < 0:
            return schema_err("ImproperConfig", "retention_s must not be negative")
        rec = replace(r, retention_s=u.retention_s or None)
        detail = {"retention_s": rec.retention_s, "was": r.retention_s}
        await self._save(rec, [], [self._change(caller.name, "retention", r.id, detail)])
        self.schemas[r.id] = rec
        return schema_ok(True)

    async def set_starting_position(self, schema_id: int, starting_at: int) -> None:
        """The message store's own call after it trimmed events: not in the public API.
        Written on the stored record as it is now, so a retention changed through
        another broadcaster is never written back to its old value."""
        async def change() -> None:
            r = self.live(schema_id)
            if r is None or starting_at <= r.starting_at:
                return
            rec = replace(r, starting_at=starting_at)
            await self._save(rec, [], [self._change("store", "starting_position", r.id, {"starting_at": starting_at})])
            self.schemas[r.id] = rec

        await self._consistently(change)

    async def update_limits(self, caller: PrincipalRecord, u: SchemaLimitsUpdate) -> SchemaLimits:
        _admin_only(caller, "changes the registry's limits")
        return await self._consistently(lambda: self._update_limits(caller, u))

    async def _update_limits(self, caller: PrincipalRecord, u: SchemaLimitsUpdate) -> SchemaLimits:
        changes = {f: getattr(u, f) for f in u.__struct_fields__ if getattr(u, f) is not msgspec.UNSET}
        if "registrars" in changes:
            changes["registrars"] = tuple(changes["registrars"])
        if "default_compatibility" in changes:
            changes["default_compatibility"] = compat_level(changes["default_compatibility"])
        new = replace(self.limits, **changes)
        problem = new.problem()
        if problem:
            raise BadRequest(problem, code="invalid_argument")
        value = {f: getattr(new, f) for f in new.__dataclass_fields__}
        value["registrars"] = list(new.registrars)
        await self._put_setting(_LIMITS_KEY, value, self._change(caller.name, "limits", None, value))
        self.limits = new
        self.generation += 1
        return self.limits_info()


def _text(r: SchemaRecord) -> tuple[str, str, Any]:
    return r.format, r.model, r.references


def _admin_only(caller: PrincipalRecord, what: str) -> None:
    """A method only admins may call refuses anyone else as a whole, with 403, whatever
    the items (docs/rights.md): the same shape as every admin-only method."""
    if not caller.admin:
        raise Forbidden(f"only an admin {what}")
