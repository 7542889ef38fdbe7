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
from ..core.wire_schemas import SchemaErr, SchemaRegistered, SchemaRegistration
from ..errors import BadRequest
from ..schemas.formats import MalformedSchema
from ..schemas.formats._protobuf import ProtobufModel
from ..schemas.references import identity
from ..store import SchemaRecord, SchemaVersion
from ._confluent_config import ConfigEndpoints
from ._confluent_deletes import DeleteEndpoints
from ._confluent_router import Call, Handler, Raw, Router, page
from ._confluent_wire import (
    SCHEMA_TYPES,
    CompatibilityOut,
    ConfluentError,
    IdOut,
    SchemaBody,
    SchemaOut,
    SubjectVersionOut,
    SubjectVersionPair,
    decode,
    error_from,
    flag,
    issue_messages,
    parse_version,
    references_out,
    schema_type_out,
)

__all__ = ["confluent_routes"]

_SCHEMA_BODY = msgspec.json.Decoder(SchemaBody)


ENDPOINTS: list[tuple[str, tuple[str, ...], str]] = [
    ("GET", ("schemas",), "list_schemas"),
    ("GET", ("schemas", "types"), "types"),
    ("GET", ("schemas", "ids", "*"), "by_id"),
    ("GET", ("schemas", "ids", "*", "schema"), "by_id_schema"),
    ("GET", ("schemas", "ids", "*", "versions"), "by_id_versions"),
    ("GET", ("schemas", "ids", "*", "subjects"), "by_id_subjects"),
    ("GET", ("schemas", "ids", "*", "referencedby"), "by_id_referenced_by"),
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
    ("DELETE", ("mode",), "delete_mode"),
    ("GET", ("mode", "*"), "get_mode"),
    ("PUT", ("mode", "*"), "put_mode"),
    ("DELETE", ("mode", "*"), "delete_mode"),
    ("GET", ("contexts",), "contexts"),
]
"""The face's endpoints: verb, path pattern (``*`` one segment), handler name; the OpenAPI
document lists them too."""


class _Face(ConfigEndpoints, DeleteEndpoints):
    """The endpoints, over one registry; ``table`` maps ``(verb, path pattern)`` to them."""

    def __init__(self, broker: Broker) -> None:
        self.reg = broker.schemas
        self.broker = broker
        self.table: list[tuple[str, tuple[str, ...], Handler]] = [
            (verb, pattern, getattr(self, name)) for verb, pattern, name in ENDPOINTS
        ]

    # -- shared lookups ------------------------------------------------------------------

    def _record(self, text: str) -> SchemaRecord:
        r = self.reg.live(int(text)) if text.isascii() and text.isdigit() else None
        if r is None:
            raise ConfluentError.schema_not_found(text)
        return r

    def _text(self, r: SchemaRecord, c: Call) -> str:
        """The schema text. Protobuf: the base64 descriptor when ``format=serialized`` asks
        for it, else ``.proto`` text (written from the descriptor if it was registered so)."""
        if r.format == "PROTOBUF":
            model = self.reg.model(r.id)
            if isinstance(model, ProtobufModel):
                serialized = c.query.get("format", "").lower() == "serialized"
                return model.serialized() if serialized else model.as_text()
        return r.model

    def versions_or_404(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        vs = self.reg.versions_of(subject)
        if deleted:
            vs = sorted(vs + self.reg.soft_deleted_of(subject), key=lambda v: v.version)
        if not vs:
            raise ConfluentError.subject_not_found(subject)
        return vs

    def _resolve(self, subject: str, text: str, deleted: bool = False) -> SchemaVersion:
        n = parse_version(text)
        vs = self.versions_or_404(subject, deleted)
        v = vs[-1] if n is None else next((v for v in vs if v.version == n), None)
        if v is None:
            raise ConfluentError.version_not_found(subject, text)
        return v

    def _out(self, v: SchemaVersion, c: Call) -> SubjectVersionOut:
        r = self.reg.schemas[v.schema_id]
        return SubjectVersionOut(subject=v.name, version=v.version, id=v.schema_id, schema=self._text(r, c),
                                 schema_type=schema_type_out(r.format), references=references_out(r.references))

    async def _schema_body(self, c: Call) -> SchemaBody:
        body: SchemaBody = decode(await c.body(), _SCHEMA_BODY, 42201)
        if body.metadata is not None or body.rule_set is not None:
            raise ConfluentError.invalid_schema("metadata and ruleSet (data contracts) are not supported by tidings")
        return body

    @staticmethod
    def _refs(body: SchemaBody) -> list[tuple[str, str, int]]:
        return [(r.name, r.subject, r.version) for r in body.references or ()]

    # -- /schemas ------------------------------------------------------------------------

    async def types(self, c: Call) -> list[str]:
        return list(SCHEMA_TYPES)

    async def list_schemas(self, c: Call) -> list[SubjectVersionOut]:
        prefix, latest = c.query.get("subjectPrefix", ""), flag(c.query, "latestOnly")
        deleted = flag(c.query, "deleted")
        out = []
        for name in self.reg.subjects(deleted=deleted):
            if name.startswith(prefix):
                vs = self.versions_or_404(name, deleted)
                out += [self._out(v, c) for v in (vs[-1:] if latest else vs)]
        return page(out, c.query)

    async def by_id(self, c: Call) -> SchemaOut:
        r = self._record(c.args[0])
        return SchemaOut(schema=self._text(r, c), schema_type=schema_type_out(r.format),
                         references=references_out(r.references))

    async def by_id_schema(self, c: Call) -> Raw:
        return Raw(self._text(self._record(c.args[0]), c))

    def _pairs(self, c: Call) -> list[SchemaVersion]:
        vs = self.reg.versions_of_id(self._record(c.args[0]).id, deleted=flag(c.query, "deleted"))
        only = c.query.get("subject")
        return [v for v in vs if only is None or v.name == only]

    async def by_id_versions(self, c: Call) -> list[SubjectVersionPair]:
        return page([SubjectVersionPair(v.name, v.version) for v in self._pairs(c)], c.query)

    async def by_id_subjects(self, c: Call) -> list[str]:
        return page(list(dict.fromkeys(v.name for v in self._pairs(c))), c.query)

    async def by_id_referenced_by(self, c: Call) -> list[int]:
        r, deleted = self._record(c.args[0]), flag(c.query, "deleted")
        found: set[int] = set()
        for v in self.reg.versions_of_id(r.id, deleted=True):
            found.update(self.reg.referrers(v.name, v.version, deleted=deleted))
        return page(sorted(found), c.query)

    # -- /subjects -----------------------------------------------------------------------

    async def subjects(self, c: Call) -> list[str]:
        prefix = c.query.get("subjectPrefix", "")
        if flag(c.query, "deletedOnly") or flag(c.query, "deleted_only"):
            names = [n for n in self.reg.subjects(deleted=True) if self.reg.soft_deleted_of(n)]
        else:
            names = self.reg.subjects(deleted=flag(c.query, "deleted"))
        return page([n for n in names if n.startswith(prefix)], c.query)

    async def versions(self, c: Call) -> list[int]:
        subject = c.args[0]
        soft = {v.version for v in self.reg.soft_deleted_of(subject)}
        if flag(c.query, "deletedOnly") or flag(c.query, "deleted_only"):
            self.versions_or_404(subject, True)
            return page(sorted(soft), c.query)
        negative = flag(c.query, "deletedAsNegative")
        vs = self.versions_or_404(subject, flag(c.query, "deleted") or negative)
        return page([-v.version if negative and v.version in soft else v.version for v in vs], c.query)

    async def version(self, c: Call) -> SubjectVersionOut:
        return self._out(self._resolve(c.args[0], c.args[1], deleted=flag(c.query, "deleted")), c)

    async def version_schema(self, c: Call) -> Raw:
        v = self._resolve(c.args[0], c.args[1], deleted=flag(c.query, "deleted"))
        return Raw(self._text(self.reg.schemas[v.schema_id], c))

    async def referenced_by(self, c: Call) -> list[int]:
        v = self._resolve(c.args[0], c.args[1], deleted=True)
        return page(self.reg.referrers(v.name, v.version, deleted=flag(c.query, "deleted")), c.query)

    async def register(self, c: Call) -> IdOut:
        subject = c.args[0]
        body = await self._schema_body(c)
        forced_id = body.id if body.id is not None and body.id >= 0 else None
        forced_version = body.version if body.version is not None and body.version > 0 else None
        item = SchemaRegistration(model=body.schema, format=body.schema_type or "AVRO", name=subject)
        res = await self.reg.register_with(c.caller, item, self._refs(body), forced_id, forced_version)
        if isinstance(res.Err, SchemaErr):
            raise error_from(res.Err, subject, self.reg.compatibility(subject))
        if not isinstance(res.Ok, SchemaRegistered):
            raise ConfluentError(500, 50001, "the registry answered without an id")
        return IdOut(id=res.Ok.id)

    async def lookup(self, c: Call) -> SubjectVersionOut:
        subject = c.args[0]
        body = await self._schema_body(c)
        refs = self._refs(body)
        vs = self.versions_or_404(subject, flag(c.query, "deleted"))
        try:
            m = self.reg.parse(body.schema_type or "AVRO", body.schema, refs)
        except MalformedSchema as e:
            raise ConfluentError.invalid_schema(f"Invalid schema: {e.message}") from None
        key = (str(m.format), identity(m, refs))
        for v in reversed(vs):
            r = self.reg.schemas[v.schema_id]
            if (r.format, r.canonical) == key:
                return self._out(v, c)
        raise ConfluentError.schema_not_found()

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
            issues = self.reg.test_compatibility(subject, body.schema_type or "AVRO", body.schema, version,
                                                 self._refs(body))
        except BadRequest as e:
            raise ConfluentError.invalid_schema(f"Invalid schema: {e.message}") from None
        verbose = flag(c.query, "verbose") and bool(issues)
        messages = issue_messages(issues, self.reg.compatibility(subject)) if verbose else []
        return CompatibilityOut(is_compatible=not issues, messages=messages)

    async def contexts(self, c: Call) -> list[str]:
        return ["."]

def confluent_routes(broker: Broker) -> list[BaseRoute]:
    """Routes of the Confluent-compatible API over ``broker``'s schema registry, for ``create_app``."""
    return Router(broker, _Face(broker).table).routes()
