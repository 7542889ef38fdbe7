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

    def validator(self, schema: Any) -> jsonschema_rs.Validator:
        """A compiled validator with tidings' options: formats are asserted, nothing is fetched.

        Formats are asserted in every draft (2019-09 and later make them annotations by
        default) because a registry that accepts ``"format": "email"`` and then lets any
        string through surprises its users; Confluent's JSON Schema support asserts them too.
        """
        return self.compiled(schema, validate_formats=True, offline=True)

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
