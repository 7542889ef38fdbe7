"""Leaf rules of the JSON Schema compatibility check: types, enums, bounds, lengths, patterns.

Each rule compares one reader subschema with one writer subschema and reports why some
instance the writer allows could be refused by the reader. Rule codes come in pairs: the
first when the reader is the new schema (the change narrowed something), the second when
the reader is the old schema (the change widened it).
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from typing import Any, Final, Protocol

from ._drafts import Draft

__all__ = [
    "ALL_TYPES",
    "Reporter",
    "check_types",
    "enum_values",
    "jkey",
    "limits",
    "numbers",
    "show",
    "strings",
    "subject",
    "type_of_value",
    "types_of",
]

ALL_TYPES: Final = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})


class Reporter(Protocol):
    R: str
    """How messages name the reader schema ("the new schema" or "the old schema")."""
    W: str

    def report(self, path: str, rules: tuple[str, str], message: str) -> None: ...


def jkey(v: Any) -> Any:
    """A hashable key with JSON equality: ``1 == 1.0`` but ``true != 1``, objects unordered."""
    if v is True or v is False:
        return ("b", v)
    if isinstance(v, int | float):
        return ("n", int(v) if isinstance(v, float) and v.is_integer() else v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("z",)
    if isinstance(v, list):
        return ("l", tuple(jkey(i) for i in v))
    return ("d", frozenset((k, jkey(i)) for k, i in v.items()))


def show(v: Any, limit: int = 80) -> str:
    text = json.dumps(v, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_PROPERTY: Final = re.compile(r"\.properties(?:\.(\w+)|\[(.+)\])\Z")


def subject(path: str) -> str:
    """How a message names the place: "Property 'zip' ($.properties.zip)", "The root value"."""
    if path == "$":
        return "The root value"
    m = _PROPERTY.search(path)
    if m:
        name = m.group(1) or m.group(2).strip("'\"")
        return f"Property {name!r} ({path})"
    return f"The value at {path}"


def types_of(s: dict[str, Any]) -> frozenset[str]:
    t = s.get("type")
    if t is None:
        return ALL_TYPES
    names = {t} if isinstance(t, str) else set(t)
    if "number" in names:
        names.add("integer")
    return frozenset(names)


def type_of_value(v: Any) -> str:
    if v is None:
        return "null"
    if v is True or v is False:
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


_FINITE_TYPES: Final[dict[str, list[Any]]] = {"null": [None], "boolean": [False, True]}


def enum_values(s: dict[str, Any]) -> list[Any] | None:
    """The finite set of values a subschema allows: its ``const`` or ``enum``, or all the
    values of its types when those are only null and boolean."""
    if "const" in s:
        # Both present: only the const, and only if the enum lists it too.
        if "enum" in s and jkey(s["const"]) not in {jkey(v) for v in s["enum"]}:
            return []
        return [s["const"]]
    if "enum" in s:
        return list(s["enum"])
    t = s.get("type")
    names = [t] if isinstance(t, str) else t
    if isinstance(names, list) and names and all(n in _FINITE_TYPES for n in names):
        return [v for n in names for v in _FINITE_TYPES[n]]
    return None


def _describe_types(types: frozenset[str]) -> str:
    if types == ALL_TYPES:
        return "any type"
    shown = types - {"integer"} if "number" in types else types
    return ", ".join(sorted(shown))


def check_types(ctx: Reporter, path: str, r_types: frozenset[str], w_types: frozenset[str]) -> frozenset[str]:
    """Report writer types the reader lacks; return the types both accept, for the other rules."""
    missing = w_types - r_types
    if missing:
        rules = ("type-changed", "type-changed") if not w_types & r_types else ("type-narrowed", "type-widened")
        ctx.report(
            path,
            rules,
            f"{subject(path)}: {ctx.W} allows {_describe_types(w_types)} but {ctx.R} accepts only "
            f"{_describe_types(r_types)}.",
        )
    return w_types & r_types


Bound = tuple[float | Fraction | int, bool]  # (limit, exclusive)


def _bound(s: dict[str, Any], draft: Draft, inclusive_key: str, exclusive_key: str, lower: bool) -> Bound | None:
    found: list[Bound] = []
    if inclusive_key in s:
        flag = draft.exclusive_bounds_are_flags and s.get(exclusive_key) is True
        found.append((s[inclusive_key], flag))
    if not draft.exclusive_bounds_are_flags and isinstance(s.get(exclusive_key), int | float):
        found.append((s[exclusive_key], True))
    if not found:
        return None
    # The tighter bound wins; at equal limits the exclusive one is tighter.
    return max(found, key=lambda b: (b[0], b[1])) if lower else min(found, key=lambda b: (b[0], not b[1]))


def _as_integer_bound(b: Bound | None, lower: bool) -> Bound | None:
    # For integers "> 0" and ">= 1" are the same bound; comparing them as such avoids false alarms.
    if b is None:
        return None
    v, excl = b
    if lower:
        return (math.floor(v) + 1 if excl else math.ceil(v)), False
    return (math.ceil(v) - 1 if excl else math.floor(v)), False


def _within(w: Bound | None, r: Bound | None, lower: bool) -> bool:
    """Does the writer's bound ``w`` keep every value inside the reader's bound ``r``?"""
    if r is None:
        return True
    if w is None:
        return False
    if w[0] != r[0]:
        return w[0] > r[0] if lower else w[0] < r[0]
    return w[1] or not r[1]


def _fmt_bound(b: Bound | None, lower: bool) -> str:
    if b is None:
        return "no " + ("minimum" if lower else "maximum")
    op = (">" if b[1] else ">=") if lower else ("<" if b[1] else "<=")
    return f"{op} {b[0]}"


def numbers(ctx: Reporter, path: str, r: dict[str, Any], rd: Draft, w: dict[str, Any], wd: Draft, ints: bool) -> None:
    for lower, inc, exc, rules in (
        (True, "minimum", "exclusiveMinimum", ("min-increased", "min-decreased")),
        (False, "maximum", "exclusiveMaximum", ("max-decreased", "max-increased")),
    ):
        rb, wb = _bound(r, rd, inc, exc, lower), _bound(w, wd, inc, exc, lower)
        if ints:
            rb, wb = _as_integer_bound(rb, lower), _as_integer_bound(wb, lower)
        if not _within(wb, rb, lower):
            ctx.report(
                path,
                rules,
                f"{subject(path)}: {ctx.R} requires {_fmt_bound(rb, lower)} but {ctx.W} allows "
                f"{'any value' if wb is None else _fmt_bound(wb, lower)}.",
            )
    rm, wm = r.get("multipleOf"), w.get("multipleOf")
    if rm is not None and not (ints and rm == 1):
        ok = wm is not None and (Fraction(str(wm)) / Fraction(str(rm))).denominator == 1
        if not ok:
            ctx.report(
                path,
                ("multiple-of-changed", "multiple-of-changed"),
                f"{subject(path)}: {ctx.R} requires a multiple of {rm} but {ctx.W} "
                f"{'has no multipleOf' if wm is None else f'allows multiples of {wm}'}.",
            )


def limits(
    ctx: Reporter, path: str, r: dict[str, Any], w: dict[str, Any], what: str, low: str, high: str, noun: str
) -> None:
    """minLength/maxLength, minItems/maxItems, minProperties/maxProperties."""
    r_low, w_low = r.get(low, 0), w.get(low, 0)
    if r_low > w_low:
        ctx.report(
            path,
            (f"min-{what}-increased", f"min-{what}-decreased"),
            f"{subject(path)}: {ctx.R} requires at least {r_low} {noun} but {ctx.W} allows {w_low}.",
        )
    r_high, w_high = r.get(high), w.get(high)
    if r_high is not None and (w_high is None or w_high > r_high):
        ctx.report(
            path,
            (f"max-{what}-decreased", f"max-{what}-increased"),
            f"{subject(path)}: {ctx.R} allows at most {r_high} {noun} but {ctx.W} allows "
            f"{'any number' if w_high is None else w_high}.",
        )


def strings(ctx: Reporter, path: str, r: dict[str, Any], w: dict[str, Any]) -> None:
    limits(ctx, path, r, w, "length", "minLength", "maxLength", "characters")
    for key, rule in (("pattern", "pattern-changed"), ("format", "format-changed")):
        rv, wv = r.get(key), w.get(key)
        if rv is not None and rv != wv:
            was = f"{key} {show(wv)}" if wv is not None else f"no {key}"
            ctx.report(path, (rule, rule), f"{subject(path)}: {ctx.R} requires {key} {show(rv)}, {ctx.W} has {was}.")
