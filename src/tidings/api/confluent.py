"""A REST face compatible with the Confluent Schema Registry, at the root of the server.

Existing schema registry clients (confluent-kafka's ``SchemaRegistryClient``, curl
scripts written for Confluent) work against tidings unchanged: subjects are schema
names, versions their versions, ids the registry's ids. Every request needs a tidings
token, as ``Authorization: Bearer <token>`` or as the password of HTTP Basic
credentials (the user name is ignored). Errors are ``{"error_code": N, "message": ...}``
with Confluent's codes. docs/confluent.md lists the endpoints and what differs.
"""

from __future__ import annotations

import msgspec
from starlette.routing import BaseRoute

from ..broker import Broker
from ..core.schemas import valid_name
from ..core.wire_schemas import (
    CompatibilityConfig,
    SchemaErr,
    SchemaLimitsUpdate,
    SchemaRegistered,
    SchemaRegistration,
    SchemaVersionInfo,
)
from ..errors import BadRequest
from ..schemas.formats import MalformedSchema
from ..store import SchemaRecord, SchemaVersion
from ._confluent_router import Call, Handler, Raw, Router, page
from ._confluent_wire import (
    SCHEMA_TYPES,
    CompatibilityOut,
    ConfigBody,
    ConfigOut,
    ConfluentError,
    IdOut,
    LevelOut,
    ModeBody,
    SchemaBody,
    SchemaOut,
    SubjectVersionOut,
    SubjectVersionPair,
    decode,
    error_from,
    flag,
    issue_messages,
    level,
    parse_version,
    schema_type_out,
)

__all__ = ["confluent_routes"]

_SCHEMA_BODY = msgspec.json.Decoder(SchemaBody)
_CONFIG_BODY = msgspec.json.Decoder(ConfigBody)
_MODE_BODY = msgspec.json.Decoder(ModeBody)
_READWRITE = ModeBody(mode="READWRITE")


ENDPOINTS: list[tuple[str, tuple[str, ...], str]] = [
    ("GET", ("schemas",), "list_schemas"),
    ("GET", ("schemas", "types"), "types"),
    ("GET", ("schemas", "ids", "*"), "by_id"),
    ("GET", ("schemas", "ids", "*", "schema"), "by_id_schema"),
    ("GET", ("schemas", "ids", "*", "versions"), "by_id_versions"),
    ("GET", ("schemas", "ids", "*", "subjects"), "by_id_subjects"),
    ("GET", ("subjects",), "subjects"),
    ("POST", ("subjects", "*"), "lookup"),
    ("DELETE", ("subjects", "*"), "delete_subject"),
    ("GET", ("subjects", "*", "versions"), "versions"),
    ("POST", ("subjects", "*", "versions"), "register"),
    ("GET", ("subjects", "*", "versions", "*"), "version"),
    ("DELETE", ("subjects", "*", "versions", "*"), "delete_version"),
    ("GET", ("subjects", "*", "versions", "*", "schema"), "version_schema"),
    ("GET", ("subjects", "*", "versions", "*", "referencedby"), "referenced_by"),
    ("POST", ("compatibility", "subjects", "*", "versions"), "compatible_all"),
    ("POST", ("compatibility", "subjects", "*", "versions", "*"), "compatible_with"),
    ("GET", ("config",), "get_default"),
    ("PUT", ("config",), "put_default"),
    ("DELETE", ("config",), "delete_default"),
    ("GET", ("config", "*"), "get_config"),
    ("PUT", ("config", "*"), "put_config"),
    ("DELETE", ("config", "*"), "delete_config"),
    ("GET", ("mode",), "get_mode"),
    ("PUT", ("mode",), "put_mode"),
    ("GET", ("mode", "*"), "get_mode"),
    ("PUT", ("mode", "*"), "put_mode"),
    ("GET", ("contexts",), "contexts"),
]
"""The face's endpoints: verb, path pattern (``*`` one segment), handler name; the OpenAPI
document lists them too."""


class _Face:
    """The endpoints, over one registry; ``table`` maps ``(verb, path pattern)`` to them."""

    def __init__(self, broker: Broker) -> None:
        self.reg = broker.schemas
        self.table: list[tuple[str, tuple[str, ...], Handler]] = [
            (verb, pattern, getattr(self, name)) for verb, pattern, name in ENDPOINTS
        ]

    # -- shared lookups ------------------------------------------------------------------

    def _record(self, text: str) -> SchemaRecord:
        r = self.reg.live(int(text)) if text.isascii() and text.isdigit() else None
        if r is None:
            raise ConfluentError.schema_not_found(text)
        return r

    def _names(self) -> list[str]:
        names: set[str] = set()
        for i in list(self.reg.schemas):
            info = self.reg.info(i)
            if info is not None:
                names.update(v.name for v in info.versions)
        return sorted(names)

    def _versions(self, subject: str) -> list[SchemaVersion]:
        vs = self.reg.versions_of(subject)
        if not vs:
            raise ConfluentError.subject_not_found(subject)
        return vs

    def _resolve(self, subject: str, text: str) -> SchemaVersion:
        n = parse_version(text)
        vs = self._versions(subject)
        v = vs[-1] if n is None else next((v for v in vs if v.version == n), None)
        if v is None:
            raise ConfluentError.version_not_found(subject, text)
        return v

    def _out(self, v: SchemaVersion) -> SubjectVersionOut:
        r = self.reg.schemas[v.schema_id]
        return SubjectVersionOut(subject=v.name, version=v.version, id=v.schema_id, schema=r.model,
                                 schema_type=schema_type_out(r.format))

    async def _schema_body(self, c: Call) -> SchemaBody:
        body: SchemaBody = decode(await c.body(), _SCHEMA_BODY, 42201)
        if body.references:
            raise ConfluentError.invalid_schema("schema references are not supported by tidings")
        if body.metadata is not None or body.rule_set is not None:
            raise ConfluentError.invalid_schema("metadata and ruleSet (data contracts) are not supported by tidings")
        return body

    # -- /schemas ------------------------------------------------------------------------

    async def types(self, c: Call) -> list[str]:
        return list(SCHEMA_TYPES)

    async def list_schemas(self, c: Call) -> list[SubjectVersionOut]:
        prefix, latest = c.query.get("subjectPrefix", ""), flag(c.query, "latestOnly")
        out = []
        for name in self._names():
            if name.startswith(prefix):
                vs = self.reg.versions_of(name)
                out += [self._out(v) for v in (vs[-1:] if latest else vs)]
        return page(out, c.query)

    async def by_id(self, c: Call) -> SchemaOut:
        r = self._record(c.args[0])
        return SchemaOut(schema=r.model, schema_type=schema_type_out(r.format))

    async def by_id_schema(self, c: Call) -> Raw:
        return Raw(self._record(c.args[0]).model)

    def _pairs(self, c: Call) -> list[SchemaVersionInfo]:
        info = self.reg.info(self._record(c.args[0]).id)
        only = c.query.get("subject")
        return [v for v in (info.versions if info else []) if only is None or v.name == only]

    async def by_id_versions(self, c: Call) -> list[SubjectVersionPair]:
        return page([SubjectVersionPair(v.name, v.version) for v in self._pairs(c)], c.query)

    async def by_id_subjects(self, c: Call) -> list[str]:
        return page(list(dict.fromkeys(v.name for v in self._pairs(c))), c.query)

    # -- /subjects -----------------------------------------------------------------------

    async def subjects(self, c: Call) -> list[str]:
        if flag(c.query, "deletedOnly") or flag(c.query, "deleted_only"):
            return []  # deletions are not kept readable: there is nothing soft-deleted to list
        prefix = c.query.get("subjectPrefix", "")
        return page([n for n in self._names() if n.startswith(prefix)], c.query)

    async def versions(self, c: Call) -> list[int]:
        vs = self._versions(c.args[0])
        return [] if flag(c.query, "deletedOnly") else page([v.version for v in vs], c.query)

    async def version(self, c: Call) -> SubjectVersionOut:
        return self._out(self._resolve(*c.args))

    async def version_schema(self, c: Call) -> Raw:
        return Raw(self.reg.schemas[self._resolve(*c.args).schema_id].model)

    async def referenced_by(self, c: Call) -> list[int]:
        self._resolve(*c.args)
        return []  # references are not supported, so nothing refers to a version

    async def register(self, c: Call) -> IdOut:
        subject = c.args[0]
        body = await self._schema_body(c)
        if (body.id is not None and body.id >= 0) or (body.version is not None and body.version > 0):
            raise ConfluentError(422, 42205, "tidings assigns ids and versions itself (IMPORT mode is not supported)")
        item = SchemaRegistration(model=body.schema, format=body.schema_type or "AVRO", name=subject)
        [res] = await self.reg.register(c.caller, [item])
        if isinstance(res.Err, SchemaErr):
            raise error_from(res.Err, subject, self.reg.compatibility(subject))
        if not isinstance(res.Ok, SchemaRegistered):
            raise ConfluentError(500, 50001, "the registry answered without an id")
        return IdOut(id=res.Ok.id)

    async def lookup(self, c: Call) -> SubjectVersionOut:
        subject = c.args[0]
        body = await self._schema_body(c)
        vs = self._versions(subject)
        try:
            m = self.reg.parse(body.schema_type or "AVRO", body.schema)
        except MalformedSchema as e:
            raise ConfluentError.invalid_schema(f"Invalid schema: {e.message}") from None
        key = (str(m.format), m.canonical)
        for v in vs:
            r = self.reg.schemas[v.schema_id]
            if (r.format, r.canonical) == key:
                return self._out(v)
        raise ConfluentError.schema_not_found()

    def _admin(self, c: Call) -> None:
        if not c.caller.admin:
            raise ConfluentError.forbidden("only an admin deletes schemas")

    async def _delete(self, c: Call, subject: str, versions: list[SchemaVersion]) -> None:
        """Delete the schemas behind ``versions``, unless one also sits under another subject."""
        for v in versions:
            info = self.reg.info(v.schema_id)
            shared = [f"'{x.name}' version {x.version}" for x in (info.versions if info else []) if x.name != subject]
            if shared:
                raise ConfluentError(422, 42205, f"schema {v.schema_id} is also registered under {', '.join(shared)}; "
                                                 "tidings deletes whole schemas: use POST /v1/delete_schema to "
                                                 "remove it from every subject")
        for res in await self.reg.delete(c.caller, [v.schema_id for v in versions]):
            if isinstance(res.Err, SchemaErr):
                raise error_from(res.Err, subject, "")

    async def delete_version(self, c: Call) -> int:
        subject, text = c.args
        self._admin(c)
        n = parse_version(text)
        if n is not None and flag(c.query, "permanent") and all(v.version != n for v in self.reg.versions_of(subject)):
            return n  # tidings deletions are permanent already: a permanent delete of what is gone succeeds
        v = self._resolve(subject, text)
        await self._delete(c, subject, [v])
        return v.version

    async def delete_subject(self, c: Call) -> list[int]:
        subject = c.args[0]
        self._admin(c)
        permanent, vs = flag(c.query, "permanent"), self.reg.versions_of(subject)
        if vs:
            await self._delete(c, subject, vs)
        elif not permanent:
            raise ConfluentError.subject_not_found(subject)
        if permanent and valid_name(subject):
            await self._set_level(c, subject, None)
        return [v.version for v in vs]

    # -- /compatibility ------------------------------------------------------------------

    async def compatible_all(self, c: Call) -> CompatibilityOut:
        return self._check(c, c.args[0], await self._schema_body(c), None)

    async def compatible_with(self, c: Call) -> CompatibilityOut:
        subject, text = c.args
        body = await self._schema_body(c)
        if parse_version(text) is None and not self.reg.versions_of(subject):
            return CompatibilityOut(is_compatible=True, messages=[])
        return self._check(c, subject, body, self._resolve(subject, text).version)

    def _check(self, c: Call, subject: str, body: SchemaBody, version: int | None) -> CompatibilityOut:
        try:
            issues = self.reg.test_compatibility(subject, body.schema_type or "AVRO", body.schema, version)
        except BadRequest as e:
            raise ConfluentError.invalid_schema(f"Invalid schema: {e.message}") from None
        verbose = flag(c.query, "verbose") and bool(issues)
        messages = issue_messages(issues, self.reg.compatibility(subject)) if verbose else []
        return CompatibilityOut(is_compatible=not issues, messages=messages)

    # -- /config and /mode ---------------------------------------------------------------

    async def get_default(self, c: Call) -> ConfigOut:
        return ConfigOut(self.reg.limits.default_compatibility)

    async def _set_default(self, c: Call, value: str) -> None:
        try:
            await self.reg.update_limits(c.caller, SchemaLimitsUpdate(default_compatibility=value))
        except BadRequest as e:
            raise ConfluentError(422, 42203, e.message) from None

    async def put_default(self, c: Call) -> LevelOut:
        value = level(decode(await c.body(), _CONFIG_BODY, 42203))
        await self._set_default(c, value)
        return LevelOut(value)

    async def delete_default(self, c: Call) -> ConfigOut:
        old = self.reg.limits.default_compatibility
        await self._set_default(c, "BACKWARD")
        return ConfigOut(old)

    async def _set_level(self, c: Call, subject: str, value: str | None) -> None:
        [res] = await self.reg.set_compatibility(c.caller, [CompatibilityConfig(name=subject, compatibility=value)])
        if isinstance(res.Err, SchemaErr):
            raise error_from(res.Err, subject, "")

    async def get_config(self, c: Call) -> ConfigOut:
        return ConfigOut(self.reg.compatibility(c.args[0]))

    async def put_config(self, c: Call) -> LevelOut:
        value = level(decode(await c.body(), _CONFIG_BODY, 42203))
        await self._set_level(c, c.args[0], value)
        return LevelOut(value)

    async def delete_config(self, c: Call) -> ConfigOut:
        old = self.reg.compatibility(c.args[0])
        await self._set_level(c, c.args[0], None)
        return ConfigOut(old)

    async def get_mode(self, c: Call) -> ModeBody:
        return _READWRITE

    async def put_mode(self, c: Call) -> ModeBody:
        if not c.caller.admin:
            raise ConfluentError.forbidden("only an admin sets the mode")
        body: ModeBody = decode(await c.body(), _MODE_BODY, 42204)
        if body.mode.strip().upper() != "READWRITE":
            raise ConfluentError(422, 42204, f"Invalid mode {body.mode!r}: tidings is always READWRITE")
        return _READWRITE

    async def contexts(self, c: Call) -> list[str]:
        return ["."]


def confluent_routes(broker: Broker) -> list[BaseRoute]:
    """Routes of the Confluent-compatible API over ``broker``'s schema registry, for ``create_app``."""
    return Router(broker, _Face(broker).table).routes()
