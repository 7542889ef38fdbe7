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

A schema with a reference is looked into through ``expand``, which gives the schemas it
is the conjunction of (its target, and its siblings where the draft applies them); each
is a superset of it, so proving any of them disjoint is enough. Without ``expand`` (or
past ``MAX_DEPTH`` steps, as with a reference cycle) nothing is proven.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from . import _json_rules as rules
from ._json_refs import REFS

__all__ = ["MAX_DEPTH", "Expand", "disjoint"]

Expand = Callable[[dict[str, Any]], list[Any]]
MAX_DEPTH: Final = 32


def disjoint(a: Any, b: Any, expand_a: Expand | None = None, expand_b: Expand | None = None, depth: int = 0) -> bool:
    """True only if no instance is valid under both ``a`` and ``b``; references in ``a``
    are followed with ``expand_a``, those in ``b`` with ``expand_b``."""
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict) or depth > MAX_DEPTH:
        return False
    if any(k in a for k in REFS):
        return expand_a is not None and any(disjoint(x, b, expand_a, expand_b, depth + 1) for x in expand_a(a))
    if any(k in b for k in REFS):
        return expand_b is not None and any(disjoint(a, y, expand_a, expand_b, depth + 1) for y in expand_b(b))
    common = rules.types_of(a) & rules.types_of(b)
    if not common:
        return True
    if _values_refused(a, b) or _values_refused(b, a):
        return True
    if common == {"object"}:
        return _discriminated(a, b, lambda x, y: disjoint(x, y, expand_a, expand_b, depth + 1)) or _discriminated(
            b, a, lambda x, y: disjoint(x, y, expand_b, expand_a, depth + 1))
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


def _discriminated(a: dict[str, Any], b: dict[str, Any], apart: Callable[[Any, Any], bool]) -> bool:
    """``a`` requires a property whose values ``b`` refuses (both allow objects only)."""
    required = a.get("required")
    a_props, b_props = a.get("properties", {}), b.get("properties", {})
    if not isinstance(required, list) or not isinstance(a_props, dict) or not isinstance(b_props, dict):
        return False
    for name in required:
        if not isinstance(name, str):
            continue
        if name in b_props:
            if apart(a_props.get(name, True), b_props[name]):
                return True
        elif b.get("additionalProperties") is False and not b.get("patternProperties"):
            return True  # b is closed and does not list it
    return False
