"""When two JSON Schema subschemas provably share no instance.

A reader's ``oneOf`` refuses a value that matches two of its branches, so a compatibility
check must know that the writer's values, having found their branch, match no other one.
This module proves disjointness from what can be read off the schemas alone, and answers
False (not proven) for anything else:

- a schema that accepts nothing (``false``) is disjoint from everything;
- no type in common (``integer`` counts as a ``number``);
- finite values (``const``, ``enum``, or only null and boolean types) each refused by
  the other side's types or finite values (JSON equality: ``1 == 1.0``, ``true != 1``);
- objects only, where one side requires a property that the other side forbids, or gives
  a schema disjoint from its own (the usual discriminator: ``"kind": {"const": "a"}``).

A schema with a reference is not looked into (its siblings may be ignored before 2019-09).
"""

from __future__ import annotations

from typing import Any

from . import _json_rules as rules
from ._json_refs import REFS

__all__ = ["disjoint"]


def disjoint(a: Any, b: Any) -> bool:
    """True only if no instance is valid under both ``a`` and ``b``."""
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    if any(k in a or k in b for k in REFS):
        return False
    common = rules.types_of(a) & rules.types_of(b)
    if not common:
        return True
    if _values_refused(a, b) or _values_refused(b, a):
        return True
    if common == {"object"}:
        return _discriminated(a, b) or _discriminated(b, a)
    return False


def _values_refused(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``a`` allows finitely many values and ``b`` refuses each of them."""
    values = rules.enum_values(a)
    if values is None:
        return False
    b_types = rules.types_of(b)
    b_values = rules.enum_values(b)
    b_keys = None if b_values is None else {rules.jkey(v) for v in b_values}
    return all(
        rules.type_of_value(v) not in b_types or (b_keys is not None and rules.jkey(v) not in b_keys) for v in values
    )


def _discriminated(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``a`` requires a property whose values ``b`` refuses (both allow objects only)."""
    required = a.get("required")
    a_props, b_props = a.get("properties", {}), b.get("properties", {})
    if not isinstance(required, list) or not isinstance(a_props, dict) or not isinstance(b_props, dict):
        return False
    for name in required:
        if not isinstance(name, str):
            continue
        if name in b_props:
            if disjoint(a_props.get(name, True), b_props[name]):
                return True
        elif b.get("additionalProperties") is False and not b.get("patternProperties"):
            return True  # b is closed and does not list it
    return False
