"""Avro models: well-formedness (the specification, then fastavro), canonical text, validation."""

from __future__ import annotations

import copy
from typing import Any

import fastavro

from . import _avro_compat
from ._avro_schema import parse_avro
from ._avro_validate import compile_checks
from ._icrc16 import to_avro_instance
from ._jsontext import canonical_json, load_json
from ._model import Incompatibility, MalformedSchema, Model, SchemaFormat, Violation
from ._paths import instance_path

__all__ = ["AvroModel"]


def _fastavro_accepts(doc: Any) -> None:
    try:
        fastavro.parse_schema(copy.deepcopy(doc), named_schemas={})
    except Exception as e:  # fastavro raises several unrelated types (even KeyError); all mean "malformed"
        raise MalformedSchema(f"Avro: {e}") from None


class AvroModel(Model):
    """An Avro schema. ``root`` is its normal form, ``names`` its named types by full name."""

    __slots__ = ("_check", "names", "root", "stored")

    format = SchemaFormat.AVRO

    def __init__(self, text: str, *, stored: bool = False) -> None:
        doc = load_json(text)
        self.root, self.names = parse_avro(doc, stored=stored)
        self.stored = stored
        _fastavro_accepts(doc)
        self._check = compile_checks(self.root, self.names)
        self.text = text
        self.canonical = canonical_json(self.root)

    def validate(self, value: Any) -> Violation | None:
        failure = self._check(to_avro_instance(value))
        if failure is None:
            return None
        return Violation(instance_path(reversed(failure.steps)), failure.reason)

    def __reduce__(self) -> tuple[Any, tuple[str, bool]]:
        # The compiled validator cannot be pickled; the text rebuilds everything.
        return _rebuild, (self.text, self.stored)

    def _reading_issues(self, writer: Model, *, reader_is_new: bool) -> list[Incompatibility]:
        if not isinstance(writer, AvroModel):
            raise TypeError("an Avro schema can only be compared with another Avro schema")
        return _avro_compat.reading_issues(
            self.root, self.names, writer.root, writer.names, reader_is_new=reader_is_new
        )


def _rebuild(text: str, stored: bool) -> AvroModel:
    return AvroModel(text, stored=stored)
