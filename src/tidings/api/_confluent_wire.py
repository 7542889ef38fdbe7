"""Wire types, errors and small parsers of the Confluent-compatible face (``confluent.py``).

Everything here is pure: no registry, no I/O. Error codes follow Confluent's
``rest/exceptions/Errors.java``; docs/confluent.md lists them per endpoint.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

import msgspec

from ..core.long_ints import long_integer, long_message
from ..core.undecodable import UNDECODABLE
from ..core.wire_schemas import CompatibilityIssue, SchemaErr
from ..errors import ApiError

__all__ = [
    "IN_USE",
    "LEVELS",
    "MEDIA_TYPE",
    "MODES",
    "REQUEST_TYPES",
    "SCHEMA_TYPES",
    "CompatibilityOut",
    "ConfigBody",
    "ConfigOut",
    "ConfluentError",
    "ErrorOut",
    "IdOut",
    "LevelOut",
    "ModeBody",
    "Reference",
    "SchemaBody",
    "SchemaOut",
    "SubjectVersionOut",
    "SubjectVersionPair",
    "as_bearer",
    "decode",
    "error_from",
    "flag",
    "integer",
    "issue_messages",
    "level",
    "parse_version",
    "references_out",
    "schema_type_out",
]

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
REQUEST_TYPES = frozenset({
    "", MEDIA_TYPE, "application/vnd.schemaregistry+json", "application/json", "application/octet-stream",
})
"""Content types accepted on request bodies ("" is a request that names none)."""
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
IN_USE = 40960
"""tidings' own code (HTTP 409): the delete would leave a publication without the schema it binds."""
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
_MAX_VERSION = 2**31 - 1


class ConfluentError(ApiError):
    """A request refused the way Confluent refuses it: HTTP ``status`` and numeric ``error_code``."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message, code=str(error_code))
        self.status = status
        self.error_code = error_code

    @classmethod
    def subject_not_found(cls, subject: str) -> ConfluentError:
        return cls(404, 40401, f"Subject '{subject}' not found.")

    @classmethod
    def version_not_found(cls, subject: str, version: int | str) -> ConfluentError:
        return cls(404, 40402, f"Version {version} not found under subject '{subject}'.")

    @classmethod
    def schema_not_found(cls, schema_id: object = None) -> ConfluentError:
        return cls(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")

    @classmethod
    def subject_soft_deleted(cls, subject: str) -> ConfluentError:
        return cls(404, 40404, f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently")

    @classmethod
    def subject_not_soft_deleted(cls, subject: str) -> ConfluentError:
        return cls(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")

    @classmethod
    def version_soft_deleted(cls, subject: str, version: int) -> ConfluentError:
        return cls(404, 40406, f"Subject '{subject}' Version {version} was soft deleted. Set permanent=true to "
                               "delete permanently")

    @classmethod
    def version_not_soft_deleted(cls, subject: str, version: int) -> ConfluentError:
        return cls(404, 40407, f"Subject '{subject}' Version {version} was not deleted first before being "
                               "permanently deleted")

    @classmethod
    def no_subject_mode(cls, subject: str) -> ConfluentError:
        return cls(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")

    @classmethod
    def invalid_schema(cls, message: str) -> ConfluentError:
        return cls(422, 42201, message)

    @classmethod
    def not_permitted(cls, message: str) -> ConfluentError:
        return cls(422, 42205, message)

    @classmethod
    def references_exist(cls, subject: str, version: int, ids: list[int]) -> ConfluentError:
        return cls(422, 42206, f"One or more references exist to the schema {{subject={subject}, version={version}}}"
                               f": schema ids {ids}")

    @classmethod
    def forbidden(cls, message: str) -> ConfluentError:
        return cls(403, 40301, message)


# -- request bodies ----------------------------------------------------------------------


class Reference(msgspec.Struct):
    name: str
    subject: str
    version: int


class SchemaBody(msgspec.Struct, rename="camel"):
    """Body of register, lookup and compatibility checks (Confluent's RegisterSchemaRequest)."""

    schema: str
    schema_type: str | None = None
    """AVRO when absent, as in Confluent."""
    references: list[Reference] | None = None
    metadata: Any = None
    rule_set: Any = None
    id: int | None = None
    version: int | None = None


class ConfigBody(msgspec.Struct, rename="camel"):
    compatibility: str | None = None
    compatibility_level: str | None = None
    compatibility_group: Any = None
    default_metadata: Any = None
    override_metadata: Any = None
    default_rule_set: Any = None
    override_rule_set: Any = None


class ModeBody(msgspec.Struct):
    mode: str


def decode(body: bytes, decoder: msgspec.json.Decoder[Any], error_code: int) -> Any:
    """``body`` decoded; broken JSON is 400, a wrong shape 422 with ``error_code``."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as e:
        long = long_integer(body, e)
        if long is not None:  # well-formed JSON, past what tidings reads: a 422 as for a bad value
            raise ConfluentError(422, error_code, f"invalid request body: {long_message(*long)}") from None
        raise ConfluentError(422, error_code, f"invalid request body: {e}") from None
    except UNDECODABLE as e:
        raise ConfluentError(400, 400, f"the body is not valid JSON: {e}") from None


def level(body: ConfigBody) -> str:
    """The compatibility level a config update asks for (42203 when missing or unknown)."""
    extra = [f for f in ("compatibility_group", "default_metadata", "override_metadata", "default_rule_set",
                         "override_rule_set") if getattr(body, f) is not None]
    if extra:
        raise ConfluentError(422, 42203, f"tidings configures only the compatibility level, not {', '.join(extra)}")
    text = (body.compatibility or body.compatibility_level or "").strip().upper()
    if text not in LEVELS:
        raise ConfluentError(422, 42203, f"Invalid compatibility level {text!r}. Valid values are "
                                         f"{', '.join(LEVELS)}")
    return text


# -- responses ---------------------------------------------------------------------------


class ErrorOut(msgspec.Struct):
    error_code: int
    message: str


class IdOut(msgspec.Struct):
    id: int


class LevelOut(msgspec.Struct):
    """Answer to a config update."""

    compatibility: str


class ConfigOut(msgspec.Struct, rename="camel"):
    compatibility_level: str


class CompatibilityOut(msgspec.Struct):
    is_compatible: bool
    messages: list[str]


class SubjectVersionPair(msgspec.Struct):
    subject: str
    version: int


class SchemaOut(msgspec.Struct, rename="camel", omit_defaults=True):
    schema: str
    schema_type: str | None = None
    references: list[Reference] | None = None


class SubjectVersionOut(msgspec.Struct, rename="camel", omit_defaults=True):
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str | None = None
    references: list[Reference] | None = None


def schema_type_out(fmt: str) -> str | None:
    """``schemaType`` as Confluent writes it: omitted for AVRO."""
    return None if fmt == "AVRO" else fmt


def references_out(refs: Sequence[Sequence[Any]]) -> list[Reference] | None:
    return [Reference(str(n), str(s), int(v)) for n, s, v in refs] or None


# -- small parsers -----------------------------------------------------------------------


def parse_version(text: str) -> int | None:
    """A version path segment: a number in [1, 2^31-1], or ``latest``/``-1`` (None)."""
    t = text.strip()
    if t.lower() == "latest" or t == "-1":
        return None
    if t.isascii() and t.isdigit() and 1 <= int(t) <= _MAX_VERSION:
        return int(t)
    raise ConfluentError(422, 42202, f"The specified version '{text}' is not a valid version id. Allowed values "
                                     "are between [1, 2^31-1] and the string \"latest\"")


def flag(params: Any, name: str) -> bool:
    """A boolean query parameter; ``true`` in any case (Python clients send ``True``)."""
    return str(params.get(name, "")).strip().lower() == "true"


def integer(params: Any, name: str, default: int) -> int:
    text = str(params.get(name, "")).strip()
    try:
        return int(text) if text else default
    except ValueError:
        raise ConfluentError(400, 400, f"query parameter {name} must be an integer") from None


def as_bearer(authorization: str | None) -> str | None:
    """``Basic`` credentials whose password is a tidings token, as a ``Bearer`` header; others unchanged."""
    if authorization is None or authorization[:6].lower() != "basic ":
        return authorization
    try:
        decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ConfluentError(401, 40101, "malformed Basic credentials") from None
    _user, sep, token = decoded.partition(":")
    if not sep or not token:
        raise ConfluentError(401, 40101, "Basic credentials must be <any user>:<tidings token>")
    return f"Bearer {token}"


# -- registry errors ---------------------------------------------------------------------

_ERRORS: dict[str, tuple[int, int]] = {
    "Unauthorized": (403, 40301),
    "TooManySchemas": (422, 42205),
    "SchemaTooSmall": (422, 42201),
    "SchemaTooLarge": (422, 42209),
    "MalformedSchema": (422, 42201),
    "ImproperName": (422, 42208),
    "NotFound": (404, 40403),
    "ImproperConfig": (422, 42203),
    "InvalidState": (422, 42205),
    "GenericBatchError": (422, 42205),
}


def issue_messages(issues: Sequence[CompatibilityIssue], mode: str) -> list[str]:
    """Incompatibilities in the shape of Confluent's verbose messages."""
    out = [f"{{errorType:'{i.rule}', description:'{i.message}', additionalInfo:'{i.path}'}}" for i in issues]
    versions = sorted({i.version for i in issues if i.version is not None})
    out += [f"{{oldSchemaVersion: {v}}}" for v in versions]
    out.append(f"{{compatibility: '{mode}'}}")
    return out


def error_from(err: SchemaErr, subject: str, mode: str) -> ConfluentError:
    """The Confluent error for one of the registry's itemized errors."""
    code = err.code
    if code == "IncompatibleSchema":
        issues = err.IncompatibleSchema if isinstance(err.IncompatibleSchema, list) else []
        return ConfluentError(409, 40901, f"Schema being registered is incompatible with an earlier schema for "
                                        f"subject \"{subject}\", details: [{', '.join(issue_messages(issues, mode))}]")
    status, error_code = _ERRORS.get(code, (500, 50001))
    detail = getattr(err, code)
    prefix = {"TooManySchemas": "the registry is full: ", "SchemaTooSmall": "schema too small: ",
              "SchemaTooLarge": "schema too large: ", "MalformedSchema": "Invalid schema: "}.get(code, "")
    return ConfluentError(status, error_code, f"{prefix}{detail}")
