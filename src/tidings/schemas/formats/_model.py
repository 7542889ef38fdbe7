"""The vocabulary every format shares: formats, models, violations, incompatibilities."""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["Incompatibility", "MalformedSchema", "Model", "SchemaFormat", "Violation"]


class MalformedSchema(ValueError):
    """A schema text is not a well-formed schema of its format. ``message`` says what and where."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_FORMAT_ALIASES = {"JSON": "JSON", "JSONSCHEMA": "JSON", "JSON_SCHEMA": "JSON", "JSON-SCHEMA": "JSON", "AVRO": "AVRO",
                   "PROTOBUF": "PROTOBUF", "PROTO": "PROTOBUF"}


class SchemaFormat(enum.StrEnum):
    JSON = "JSON"
    AVRO = "AVRO"
    PROTOBUF = "PROTOBUF"

    @classmethod
    def parse(cls, text: str | None) -> SchemaFormat:
        """Read a format name case-insensitively; ``None`` means AVRO, as in Confluent's API."""
        if text is None:
            return cls.AVRO
        name = _FORMAT_ALIASES.get(str(text).strip().upper())
        if name is None:
            known = ", ".join(m.value for m in cls)
            raise MalformedSchema(f"unknown schema format {text!r}; expected one of {known}")
        return cls(name)


@dataclass(frozen=True, slots=True)
class Violation:
    """Why an event does not match a schema.

    ``path`` points into the event data as converted for the schema (see the package
    docstring): ``"$"`` is the root, ``"$.items[2].name"`` a nested property.
    """

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """One reason a new schema may not follow an earlier version.

    ``path`` is a place in the schema (``"$.properties.age"`` for JSON Schema,
    ``"fields.address.fields.zip"`` for Avro), ``rule`` a stable kebab-case code,
    ``version`` the index into ``previous`` given to ``check_compatibility``.
    """

    path: str
    rule: str
    message: str
    version: int | None = None


class Model(abc.ABC):
    """A parsed, well-formed schema, ready to validate events and to be compared.

    Models are immutable after construction and safe to share between threads. Two
    models are equal when they have the same format and canonical text.
    """

    __slots__ = ("canonical", "text")

    format: SchemaFormat
    text: str
    """The schema as submitted."""
    canonical: str
    """A normal form for duplicate detection: whitespace and key order (and for Avro,
    name qualification) do not matter, but everything with meaning is kept."""

    @abc.abstractmethod
    def validate(self, value: Any) -> Violation | None:
        """The first violation of ``value`` (an ICRC-16 wire value), ``None`` when it conforms."""

    @abc.abstractmethod
    def _reading_issues(self, writer: Model, *, reader_is_new: bool) -> list[Incompatibility]:
        """Why data written with ``writer`` (same format) may not be readable with ``self``.

        ``reader_is_new`` only picks the wording: rule codes and messages describe the
        change from the old schema to the new one.
        """

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Model):
            return NotImplemented
        return self.format == other.format and self.canonical == other.canonical

    def __hash__(self) -> int:
        return hash((self.format, self.canonical))

    def __repr__(self) -> str:
        text = self.canonical if len(self.canonical) <= 60 else self.canonical[:57] + "..."
        return f"<{type(self).__name__} {text}>"
