"""The JSON Schema drafts tidings accepts, chosen by ``$schema`` (2020-12 when absent)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import jsonschema
import jsonschema_rs

from ._model import MalformedSchema

__all__ = ["DEFAULT", "Draft", "draft_of"]


@dataclass(frozen=True, slots=True)
class Draft:
    name: str
    compiled: type[jsonschema_rs.Validator]
    """The fast validator used on events."""
    meta: Any
    """The ``jsonschema`` validator class, used for meta-schema checks (its messages are better)."""
    order: int
    """Position in time, so rules can say "draft-07 and earlier"."""

    def validator(self, schema: Any, *, assert_formats: bool = False) -> jsonschema_rs.Validator:
        """A compiled validator; nothing is ever fetched. ``format`` is asserted as
        :meth:`formats_asserted` says, or always when ``assert_formats`` (the registry's
        ``TIDINGS_SCHEMA_FORMAT_ASSERTION``)."""
        asserted = assert_formats or self.formats_asserted(schema)
        return self.compiled(schema, validate_formats=asserted, offline=True)

    def formats_asserted(self, schema: Any) -> bool:
        """Whether this draft, for this schema, makes ``format`` an assertion.

        Draft-04 to draft-07 let a validator assert formats, and tidings always has (users
        of those drafts expect it). 2019-09 and 2020-12 make ``format`` an annotation unless
        the format-assertion vocabulary is asked for: tidings reads ``$vocabulary`` at the
        schema's root (2020-12: the ``format-assertion`` vocabulary listed, required or
        not, since tidings knows it; 2019-09: the ``format`` vocabulary set to true)."""
        if self.order <= 7:
            return True
        vocab = schema.get("$vocabulary") if isinstance(schema, dict) else None
        if not isinstance(vocab, dict):
            return False
        if self.order == 2019:
            return vocab.get(_FORMAT_2019) is True
        return _FORMAT_ASSERTION_2020 in vocab

    @property
    def ref_overrides_siblings(self) -> bool:
        """Up to draft-07, keywords beside ``$ref`` are ignored."""
        return self.order <= 7

    @property
    def items_may_be_tuple(self) -> bool:
        """Up to 2019-09, ``items`` may be an array (a tuple) followed by ``additionalItems``."""
        return self.order <= 2019

    @property
    def exclusive_bounds_are_flags(self) -> bool:
        """In draft-04, ``exclusiveMinimum``/``exclusiveMaximum`` are booleans modifying the bound."""
        return self.order == 4


_FORMAT_2019: Final = "https://json-schema.org/draft/2019-09/vocab/format"
_FORMAT_ASSERTION_2020: Final = "https://json-schema.org/draft/2020-12/vocab/format-assertion"

_DRAFT4: Final = Draft("draft-04", jsonschema_rs.Draft4Validator, jsonschema.Draft4Validator, 4)
_DRAFT6: Final = Draft("draft-06", jsonschema_rs.Draft6Validator, jsonschema.Draft6Validator, 6)
_DRAFT7: Final = Draft("draft-07", jsonschema_rs.Draft7Validator, jsonschema.Draft7Validator, 7)
_DRAFT2019: Final = Draft("2019-09", jsonschema_rs.Draft201909Validator, jsonschema.Draft201909Validator, 2019)
DEFAULT: Final = Draft("2020-12", jsonschema_rs.Draft202012Validator, jsonschema.Draft202012Validator, 2020)

# Keyed by the URI without scheme and trailing "#": people write both http and https.
_BY_URI: Final = {
    "json-schema.org/draft-04/schema": _DRAFT4,
    "json-schema.org/draft-06/schema": _DRAFT6,
    "json-schema.org/draft-07/schema": _DRAFT7,
    "json-schema.org/draft/2019-09/schema": _DRAFT2019,
    "json-schema.org/draft/2020-12/schema": DEFAULT,
}


def draft_of(schema: Any) -> Draft:
    """The draft ``$schema`` names; MalformedSchema for anything else (no custom meta-schemas)."""
    if not isinstance(schema, dict) or "$schema" not in schema:
        return DEFAULT
    uri = schema["$schema"]
    if not isinstance(uri, str):
        raise MalformedSchema("$.$schema: must be a string")
    key = uri.strip().removeprefix("https://").removeprefix("http://").rstrip("#")
    draft = _BY_URI.get(key)
    if draft is None:
        known = ", ".join(d.name for d in _BY_URI.values())
        raise MalformedSchema(f"$.$schema: unsupported meta-schema {uri!r}; supported drafts: {known}")
    return draft
