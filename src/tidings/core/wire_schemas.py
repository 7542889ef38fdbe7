"""Wire types of the schema registry methods (MRC message schemas), as msgspec Structs.

Batch in, itemized out, as for ICRC-72: one result per input item, in input order,
``{"Ok": ...}`` or ``{"Err": {"<Code>": "<message>"}}``. Times are UTC nanoseconds;
retention is in seconds. docs/schemas.md describes every method.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET, Struct, UnsetType

from .wire import OneOf

__all__ = [
    "CompatibilityConfig",
    "CompatibilityIssue",
    "RetentionRun",
    "SchemaChangeInfo",
    "SchemaCompatibilityCheck",
    "SchemaErr",
    "SchemaHistoryQuery",
    "SchemaInfo",
    "SchemaLimits",
    "SchemaLimitsUpdate",
    "SchemaPolicy",
    "SchemaQuery",
    "SchemaRegistered",
    "SchemaRegistration",
    "SchemaResult",
    "SchemaRetentionUpdate",
    "SchemaStateUpdate",
    "SchemaValidity",
    "SchemaVersionInfo",
    "TrimmedNamespace",
    "schema_err",
    "schema_ok",
]

StateName = Literal["Active", "Deprecated", "Retracted"]


class SchemaRegistration(Struct, kw_only=True):
    """A schema to register. ``format`` is ``JSON`` (JSON Schema), ``AVRO`` or ``PROTOBUF``."""

    model: str
    format: str = "JSON"
    name: str | None = None
    """Optional name (``protocol.descriptor``); each registration under it is a new version."""
    replaces: int | None = None
    """The id of the schema this one replaces; by default the latest version of ``name``."""


class SchemaRegistered(Struct, kw_only=True):
    id: int
    name: str | None = None
    version: int | None = None
    duplicate: bool = False
    """True when an identical schema (in canonical form) was already stored: ``id`` is its id."""


class CompatibilityIssue(Struct, kw_only=True):
    path: str
    rule: str
    message: str
    version: int | None = None
    """The version of the name (or the schema id when unnamed) the new schema conflicts with."""


class SchemaErr(OneOf):
    """A schema item's error: exactly one field is set (docs/schemas.md lists them)."""

    Unauthorized: str | UnsetType = UNSET
    TooManySchemas: str | UnsetType = UNSET
    SchemaTooSmall: str | UnsetType = UNSET
    SchemaTooLarge: str | UnsetType = UNSET
    MalformedSchema: str | UnsetType = UNSET
    IncompatibleSchema: list[CompatibilityIssue] | UnsetType = UNSET
    NotFound: str | UnsetType = UNSET
    ImproperName: str | UnsetType = UNSET
    InvalidState: str | UnsetType = UNSET
    ImproperConfig: str | UnsetType = UNSET
    GenericBatchError: str | UnsetType = UNSET


class SchemaResult(Struct, omit_defaults=True):
    Ok: SchemaRegistered | int | bool | UnsetType | None = UNSET
    Err: SchemaErr | UnsetType = UNSET


def schema_ok(value: SchemaRegistered | int | bool | None = None) -> SchemaResult:
    return SchemaResult(Ok=value)


def schema_err(code: str, detail: Any) -> SchemaResult:
    fields: dict[str, Any] = {code: detail}
    return SchemaResult(Err=SchemaErr(**fields))


class SchemaValidity(Struct, kw_only=True):
    state: StateName
    valid_from: int | None = None
    valid_to: int | None = None


class SchemaPolicy(Struct, kw_only=True):
    retention_s: int | None
    """How long events under the schema are kept, in seconds; None keeps them for ever."""
    starting_at: int
    """UTC ns up to which events have been trimmed (0: none yet). Set by the store only."""


class SchemaVersionInfo(Struct, kw_only=True):
    name: str
    version: int
    id: int


class SchemaInfo(Struct, kw_only=True):
    id: int
    format: str
    model: str
    versions: list[SchemaVersionInfo]
    """The (name, version) pairs this schema is registered under."""
    replaces: int | None
    replaced_by: list[int]
    validity: SchemaValidity
    policy: SchemaPolicy
    created_at: int
    created_by: str


class SchemaQuery(Struct, kw_only=True, omit_defaults=True):
    """Listing: ids after ``prev``, at most ``take``, optionally of one name or state."""

    prev: int | None = None
    take: int | None = None
    name: str | None = None
    state: StateName | None = None


class SchemaStateUpdate(Struct, kw_only=True):
    id: int
    state: StateName
    valid_from: int | None = None
    """Default: now."""
    valid_to: int | None = None


class SchemaRetentionUpdate(Struct, kw_only=True):
    id: int
    retention_s: int | None
    """None (or 0) keeps events for ever."""


class SchemaChangeInfo(Struct, kw_only=True):
    seq: int
    schema_id: int | None
    at: int
    by: str
    action: str
    detail: str


class SchemaHistoryQuery(Struct, kw_only=True, omit_defaults=True):
    """Audit entries after ``prev`` (a seq), at most ``take``, of one schema or of all."""

    schema_id: int | None = None
    prev: int | None = None
    take: int | None = None


class SchemaLimits(Struct, kw_only=True):
    max_count: int
    min_size: int
    max_size: int
    open_registration: bool
    registrars: list[str]
    default_compatibility: str
    count: int
    """Schemas that exist now."""


class SchemaLimitsUpdate(Struct, kw_only=True, omit_defaults=True):
    max_count: int | UnsetType = UNSET
    min_size: int | UnsetType = UNSET
    max_size: int | UnsetType = UNSET
    open_registration: bool | UnsetType = UNSET
    registrars: list[str] | UnsetType = UNSET
    default_compatibility: str | UnsetType = UNSET


class CompatibilityConfig(Struct, kw_only=True):
    name: str
    compatibility: str | None
    """None removes the name's own mode: the registry default applies again."""


class SchemaCompatibilityCheck(Struct, kw_only=True):
    """Would ``model`` be accepted as the next version of ``name``? Nothing is stored."""

    name: str
    model: str
    format: str = "JSON"


class TrimmedNamespace(Struct, kw_only=True):
    namespace: str
    schema_id: int
    before: int
    """UTC ns: events stamped earlier were deleted (unless still owed to a subscriber)."""
    trimmed: int


class RetentionRun(Struct, kw_only=True):
    at: int
    namespaces: list[TrimmedNamespace]
