"""Reading schema texts as JSON, strictly, and writing the canonical JSON text.

Numbers in a canonical text are compared as JSON Schema compares them: by mathematical
value, exactly (``exact_canonical``). ``1``, ``1.0``, ``1e0`` and ``10e-1`` are one
number; ``9007199254740993`` and ``9007199254740992.0`` are two, though a double cannot
tell them apart. Every number of a schema must fit a double (the validators compute
with doubles): a larger one is refused as malformed, never turned into infinity.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any, Final, NoReturn

from ._model import MalformedSchema

__all__ = ["MAX_DEPTH", "canonical_json", "exact_canonical", "load_json"]

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


_MAX_NUMBER_CHARS: Final = 1_000
"""Longest number literal read; a double needs far fewer (it keeps 17 significant digits)."""


def _number(literal: str) -> Decimal:
    """The exact value of a JSON number literal; MalformedSchema past a double's range."""
    shown = literal if len(literal) <= 40 else literal[:37] + "..."
    if len(literal) > _MAX_NUMBER_CHARS:
        raise MalformedSchema(f"the number {shown} is {len(literal)} characters long; at most {_MAX_NUMBER_CHARS}")
    value = Decimal(literal)
    if math.isinf(float(value)):
        raise MalformedSchema(f"the number {shown} is out of range: numbers in a schema must fit a double")
    return value


def _int(literal: str) -> int:
    return int(_number(literal))


def _float(literal: str) -> float:
    _number(literal)
    return float(literal)


def load_json(text: str) -> Any:
    """Parse ``text`` as strict JSON: no NaN/Infinity, no duplicate keys, bounded depth,
    numbers within a double's range."""
    if not isinstance(text, str):
        raise MalformedSchema(f"a schema must be text, not {type(text).__name__}")
    try:
        doc = json.loads(
            text, object_pairs_hook=_object, parse_constant=_no_constant, parse_int=_int, parse_float=_float
        )
    except json.JSONDecodeError as e:
        raise MalformedSchema(f"not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise MalformedSchema(f"the schema nests more than {MAX_DEPTH} levels deep") from None
    if not _depth_ok(doc):
        raise MalformedSchema(f"the schema nests more than {MAX_DEPTH} levels deep")
    return doc


def exact_canonical(text: str) -> str:
    """The canonical text of a JSON text ``load_json`` accepted: keys sorted, no spaces,
    and each number written one way per mathematical value (``_number_text``), so two
    texts share it exactly when JSON Schema calls their documents equal."""
    return _write(json.loads(text, parse_int=Decimal, parse_float=Decimal))


def _write(doc: Any) -> str:
    if isinstance(doc, dict):
        items = sorted(doc.items())
        return "{" + ",".join(f"{_string(k)}:{_write(v)}" for k, v in items) + "}"
    if isinstance(doc, list):
        return "[" + ",".join(_write(v) for v in doc) + "]"
    if isinstance(doc, Decimal):
        return _number_text(doc)
    if isinstance(doc, str):
        return _string(doc)
    return json.dumps(doc)  # true, false, null


def _string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _number_text(d: Decimal) -> str:
    """One text per value: an integer in digits (``1.0e2`` is ``100``; ``-0`` is ``0``),
    any other number as its shortest exact decimal (``0.50`` is ``0.5``), written
    ``<digits>e<exponent>`` when that would need more than 20 zeros after the point."""
    if d == 0:
        return "0"
    sign, digits, exp = d.as_tuple()
    if not isinstance(exp, int):  # NaN or infinity: load_json refuses them first
        raise MalformedSchema(f"{d} is not a JSON number")
    text = "".join(map(str, digits)).lstrip("0")
    stripped = text.rstrip("0")
    exp += len(text) - len(stripped)
    minus = "-" if sign else ""
    if exp >= 0:
        return minus + stripped + "0" * exp
    if -exp - len(stripped) > 20:
        return f"{minus}{stripped}e{exp}"
    whole, frac = stripped[:exp] or "0", stripped[exp:].rjust(-exp, "0")
    return f"{minus}{whole}.{frac}"


def canonical_json(doc: Any) -> str:
    """The text two equal decoded documents share (Avro's normal form): keys sorted, no
    spaces, and numbers by value as a double holds them (``1``, ``1.0`` and ``1e0`` are one
    number, written ``1``; ``-0.0`` is ``0``)."""
    return json.dumps(_numbers_by_value(doc), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _numbers_by_value(doc: Any) -> Any:
    if isinstance(doc, float):
        return int(doc) if doc.is_integer() else doc
    if isinstance(doc, dict):
        return {k: _numbers_by_value(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_numbers_by_value(v) for v in doc]
    return doc
