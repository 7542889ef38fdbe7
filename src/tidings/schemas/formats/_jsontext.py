"""Reading schema texts as JSON, strictly, and writing the canonical JSON text."""

from __future__ import annotations

import json
from typing import Any, Final, NoReturn

from ._model import MalformedSchema

__all__ = ["MAX_DEPTH", "canonical_json", "load_json"]

MAX_DEPTH: Final = 64
"""Deepest nesting of JSON arrays and objects a schema text may have; keeps every
recursive walk over a schema (meta-validation, compatibility) far from Python's stack limit."""


def _no_constant(name: str) -> NoReturn:
    raise MalformedSchema(f"{name} is not valid JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                # Parsers disagree on which duplicate wins, so the schema would be ambiguous.
                raise MalformedSchema(f"duplicate key {k!r} in a JSON object")
            seen.add(k)
    return obj


def _depth_ok(doc: Any) -> bool:
    level = [doc]
    for _ in range(MAX_DEPTH + 1):
        nxt: list[Any] = []
        for node in level:
            if isinstance(node, dict):
                nxt.extend(node.values())
            elif isinstance(node, list):
                nxt.extend(node)
        if not nxt:
            return True
        level = nxt
    return False


def load_json(text: str) -> Any:
    """Parse ``text`` as strict JSON: no NaN/Infinity, no duplicate keys, bounded depth."""
    if not isinstance(text, str):
        raise MalformedSchema(f"a schema must be text, not {type(text).__name__}")
    try:
        doc = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise MalformedSchema(f"not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise MalformedSchema(f"the schema nests more than {MAX_DEPTH} levels deep") from None
    if not _depth_ok(doc):
        raise MalformedSchema(f"the schema nests more than {MAX_DEPTH} levels deep")
    return doc


def canonical_json(doc: Any) -> str:
    """The text two equal documents share: keys sorted, no spaces, and numbers compared as
    JSON Schema compares them, by value (``1``, ``1.0`` and ``1e0`` are one number, written
    ``1``; ``-0.0`` is ``0``)."""
    return json.dumps(_numbers_by_value(doc), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _numbers_by_value(doc: Any) -> Any:
    if isinstance(doc, float):
        return int(doc) if doc.is_integer() else doc
    if isinstance(doc, dict):
        return {k: _numbers_by_value(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_numbers_by_value(v) for v in doc]
    return doc
