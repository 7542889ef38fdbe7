"""JSON Schema models: well-formedness, canonical text and fast event validation."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
from jsonschema.exceptions import best_match

from . import _json_compat
from ._drafts import Draft, draft_of
from ._icrc16 import to_json_instance
from ._jsontext import exact_canonical, load_json
from ._model import Incompatibility, MalformedSchema, Model, SchemaFormat, Violation
from ._paths import instance_path

__all__ = ["JsonModel"]


def _check_meta(schema: Any, draft: Draft) -> None:
    # No format checker: "regex" would be judged by Python's re, which is not the
    # engine the compiled validator uses; compiling (below) judges patterns instead.
    error = best_match(draft.meta(draft.meta.META_SCHEMA).iter_errors(schema))
    if error is not None:
        raise MalformedSchema(f"{error.json_path}: {error.message}")


def _compile(schema: Any, draft: Draft, assert_formats: bool) -> jsonschema_rs.Validator:
    try:
        return draft.validator(schema, assert_formats=assert_formats)
    except jsonschema_rs.ValidationError as e:
        if isinstance(e.kind, jsonschema_rs.ValidationErrorKind.Referencing):
            raise MalformedSchema(
                f"unresolvable $ref: {e.message}; a schema must be self-contained, remote references are not fetched"
            ) from None
        raise MalformedSchema(f"{instance_path(e.instance_path)}: {e.message}") from None
    except (ValueError, TypeError, jsonschema_rs.ReferencingError) as e:
        raise MalformedSchema(f"the schema cannot be compiled: {e}") from None


class JsonModel(Model):
    """A JSON Schema (draft-04 to 2020-12), compiled once by ``jsonschema_rs``."""

    __slots__ = ("_is_valid", "_validator", "assert_formats", "draft", "schema")

    format = SchemaFormat.JSON

    def __init__(self, text: str, *, assert_formats: bool = False) -> None:
        schema = load_json(text)
        draft = draft_of(schema)
        try:
            _check_meta(schema, draft)
        except RecursionError:
            raise MalformedSchema("the schema nests too deeply to be checked") from None
        self._validator = _compile(schema, draft, assert_formats)
        self.assert_formats = assert_formats
        self._is_valid = self._validator.is_valid
        self.schema: Any = schema
        self.draft = draft
        self.text = text
        self.canonical = exact_canonical(text)

    def validate(self, value: Any) -> Violation | None:
        instance = to_json_instance(value)
        # The boolean check is the fast path; errors are only collected for failures.
        if self._is_valid(instance):
            return None
        for error in self._validator.iter_errors(instance):
            return Violation(instance_path(error.instance_path), error.message)
        return None

    def __reduce__(self) -> tuple[Any, tuple[str, bool]]:
        # The compiled validator cannot be pickled; the text rebuilds everything.
        return _rebuild, (self.text, self.assert_formats)

    def _reading_issues(self, writer: Model, *, reader_is_new: bool) -> list[Incompatibility]:
        if not isinstance(writer, JsonModel):
            raise TypeError("a JSON Schema can only be compared with another JSON Schema")
        return _json_compat.reading_issues(
            self.schema, self.draft, writer.schema, writer.draft, reader_is_new=reader_is_new
        )


def _rebuild(text: str, assert_formats: bool) -> JsonModel:
    return JsonModel(text, assert_formats=assert_formats)
