"""Compatibility rules for JSON Schema's sum types (``anyOf``, ``oneOf``) and pattern
properties, which the structural check in ``_json_compat`` delegates here.

The question is always the same: does every instance the writer allows pass the reader?
The rules, per keyword (docs/schemas.md, "Evolution", has them for users):

- ``anyOf`` / ``oneOf`` on the **writer**: an instance passes the writer's other keywords
  and one of its branches, so each branch (joined with those keywords) must be read by the
  reader on its own. Adding a branch on the writer's side widens it (``sum-type-extended``
  when the writer is the new schema); removing one never hurts the reader.
- ``anyOf`` / ``oneOf`` on the **reader**: each writer branch must fit inside one reader
  branch (and inside the reader's other keywords). A writer branch that fits none is
  ``sum-type-narrowed`` (a branch the old data uses was removed or narrowed). For
  ``oneOf``, which refuses a value matching two branches, each other reader branch must
  also be provably apart from the writer's branch (``_json_disjoint``: other types,
  other constants, a discriminating property), or be identical to another branch of the
  writer's own ``oneOf`` (whose values the writer already kept out of this branch). This
  is stricter than Confluent's checker, which does not look at overlaps, and sound.
- ``patternProperties``: a property name is judged by what applies to it on each side. A
  listed name follows its own schema and, on the reader's side, every pattern matching it
  (patterns are tested with Python's ``re``; one it cannot compile counts as "may match",
  which is refused as unprovable). Names under a writer pattern are read by the reader's
  pattern with the same text, or else by its ``additionalProperties``; names under the
  writer's ``additionalProperties`` are read by each reader pattern and by the reader's
  ``additionalProperties``. Two different pattern texts on the two sides cannot be proven
  disjoint or equal, so such a pair is ``unsupported-change``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, Protocol

from . import _json_rules as rules
from ._json_disjoint import disjoint
from ._paths import step

__all__ = ["Checker", "objects", "sum_types"]

SUMS: Final = ("anyOf", "oneOf")
# Keywords whose meaning depends on a sibling in the same object: a writer branch is not
# joined with the writer's other keywords when either side has one of them, and is then
# checked alone (a superset of the join, so still sound).
_SIBLING_BOUND: Final = frozenset({
    "properties", "patternProperties", "additionalProperties", "items", "prefixItems", "additionalItems",
    "unevaluatedProperties", "unevaluatedItems", "if", "then", "else", "contains", "minContains", "maxContains",
})  # fmt: skip
_MAY_MATCH: Final = object()


class Checker(Protocol):
    R: str
    W: str
    reader_is_new: bool

    def report(self, path: str, rule_pair: tuple[str, str], message: str) -> None: ...
    def unsupported(self, path: str, what: str) -> None: ...
    def check(self, r: Any, w: Any, path: str) -> None: ...
    def same(self, r: Any, w: Any) -> bool: ...
    def parts(self, reader: bool, node: dict[str, Any]) -> list[Any]: ...
    def descend(self, r: Any, w: Any, path: str) -> None: ...
    def trial(self, run: Callable[[], None]) -> dict[Any, Any]: ...
    def keep(self, key: Any, make: Callable[[], Any]) -> Any: ...
    def merge(self, issues: dict[Any, Any]) -> None: ...


_BOTH: Final = "both"


def _sum_key(s: dict[str, Any]) -> str | None:
    """Which sum keyword ``s`` uses: None for neither, ``_BOTH`` for a shape not handled
    here (both at once, or one that is not a non-empty list)."""
    present = [k for k in SUMS if k in s]
    if len(present) == 2 or any(not isinstance(s[k], list) or not s[k] for k in present):
        return _BOTH
    return present[0] if present else None


def sum_types(c: Checker, r: dict[str, Any], w: dict[str, Any], path: str) -> bool:
    """Judge a pair where either side has ``anyOf`` or ``oneOf``; False when the shape is
    not one these rules cover (the caller then refuses it as unprovable)."""
    kr, kw = _sum_key(r), _sum_key(w)
    if _BOTH in (kr, kw) or (kr is None and kw is None):
        return False
    w_parts: list[Any] = [w]
    if kw is not None:
        w_parts = [c.keep((id(w), i), _joiner(w, kw, b)) for i, b in enumerate(w[kw])]
    r_rest = r
    if kr is not None:
        r_rest = c.keep((id(r), -1), _joiner(r, kr, True))
    for i, part in enumerate(w_parts):
        where = path if kw is None else f"{path}.{kw}[{i}]"
        if kr is not None:
            c.check(r_rest, part, path)
            others = [b for j, b in enumerate(w[kw]) if j != i] if kw == "oneOf" else []
            _fit_one_branch(c, r[kr], kr, part, where, path, _Apart(c, _typed(part, w), others))
        else:
            c.check(r, part, path)
    return True


def _joiner(s: dict[str, Any], key: str, branch: Any) -> Callable[[], Any]:
    return lambda: _join(s, key, branch)


def _join(w: dict[str, Any], key: str, branch: Any) -> Any:
    """The writer's other keywords and one branch, as one schema (a superset of both);
    with ``branch`` True, the other keywords alone."""
    rest = {k: v for k, v in w.items() if k != key}
    if branch is True or not rest:
        return branch if branch is not True else rest or True
    if branch is False:
        return False
    if not isinstance(branch, dict):
        return branch
    if set(rest) & set(branch) or (_SIBLING_BOUND & set(rest) and _SIBLING_BOUND & set(branch)):
        return branch
    return {**rest, **branch}


def _typed(part: Any, w: dict[str, Any]) -> Any:
    """The writer's branch with the writer's ``type`` (which its values also satisfy)
    added when the branch has none, for proving it apart from other branches."""
    if isinstance(part, dict) and "type" not in part and "type" in w:
        return {**part, "type": w["type"]}
    return part


class _Apart:
    """Whether a reader branch is kept apart from one writer branch's values."""

    def __init__(self, c: Checker, part: Any, others: list[Any]) -> None:
        self.c, self.part, self.others = c, part, others

    def __call__(self, branch: Any) -> bool:
        c = self.c
        return disjoint(self.part, branch, lambda n: c.parts(False, n), lambda n: c.parts(True, n)) or any(
            c.same(branch, o) for o in self.others
        )


def _fit_one_branch(
    c: Checker, branches: list[Any], key: str, part: Any, where: str, path: str, apart: _Apart
) -> None:
    tried = [c.trial(_checking(c, b, part, f"{path}.{key}[{j}]")) for j, b in enumerate(branches)]
    fits = [j for j, found in enumerate(tried) if not found]
    if not fits:
        # A branch of the same types as the writer's values was changed inside: its own
        # findings say more than "no branch fits".
        same = [j for j, b in enumerate(branches) if _types(b) and _types(b) == _types(part)]
        if len(same) == 1:
            c.merge(tried[same[0]])
            return
        c.report(
            f"{path}.{key}", ("sum-type-narrowed", "sum-type-extended"),
            f"{rules.subject(where)}: values {c.W} allows there fit no branch of {c.R}'s {key}.",
        )
    elif key == "oneOf":
        clashes = []
        for j in fits:
            clash = next((k for k, b in enumerate(branches) if k != j and not apart(b)), None)
            if clash is None:
                return
            clashes.append((j, clash))
        j, k = clashes[0]
        how = "fit" if k in fits else "may also match"
        c.report(
            f"{path}.{key}", ("sum-type-narrowed", "sum-type-extended"),
            f"{rules.subject(where)}: values {c.W} allows there fit branch {j} of {c.R}'s oneOf and {how} "
            f"branch {k}, and a oneOf refuses a value matching two branches (tidings proves branches apart "
            "by type, constant or a discriminating property).",
        )


def _checking(c: Checker, r: Any, w: Any, path: str) -> Callable[[], None]:
    return lambda: c.check(r, w, path)


def _types(s: Any) -> frozenset[str]:
    return rules.types_of(s) if isinstance(s, dict) and "type" in s else frozenset()


# -- pattern properties --------------------------------------------------------------------


def _matches(pattern: str, name: str) -> object:
    """True, False, or _MAY_MATCH when Python cannot judge the (ECMA 262) pattern."""
    try:
        return re.search(pattern, name) is not None
    except (re.error, RecursionError):
        return _MAY_MATCH


def objects(c: Checker, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
    """Properties, pattern properties and additional properties, name by name."""
    r_props, w_props = r.get("properties", {}), w.get("properties", {})
    r_pats, w_pats = r.get("patternProperties", {}), w.get("patternProperties", {})
    r_add, w_add = r.get("additionalProperties", True), w.get("additionalProperties", True)
    pats_path = f"{path}.patternProperties"
    for name in [*w_props, *(n for n in r_props if n not in w_props)]:
        sub_path = f"{path}.properties{step(name)}"
        w_sub = w_props[name] if name in w_props else _writer_schema(c, w_pats, w_add, name, sub_path)
        if w_sub is None or w_sub is False:
            continue
        readers = [r_props[name]] if name in r_props else []
        for p, schema in r_pats.items():
            m = _matches(p, name)
            if m is _MAY_MATCH:
                c.unsupported(sub_path, f"whether the pattern {p!r} applies")
            elif m:
                readers.append(schema)
        if not readers:
            readers = [r_add]
        for schema in readers:
            if schema is False:
                c.report(
                    sub_path, ("property-removed", "property-added"),
                    f"{rules.subject(sub_path)}: {c.W} allows it but {c.R} does not "
                    f"({'additionalProperties: false' if name not in r_props else 'its schema is false'}).",
                )
            else:
                c.descend(schema, w_sub, sub_path)
    # Names no writer property lists: under a writer pattern, or additional.
    for p, w_schema in w_pats.items():
        if w_schema is False:
            continue
        here = f"{pats_path}{step(p)}"
        if p in r_pats:
            c.descend(r_pats[p], w_schema, here)
            continue
        if r_pats:
            c.unsupported(here, f"whether {c.R}'s patterns {rules.show(sorted(r_pats))} apply to names matching {p!r}")
        _additional(c, r_add, w_schema, here, here, f"names matching {p!r}")
    if w_add is False:
        return
    for p, r_schema in r_pats.items():
        if p not in w_pats:
            c.descend(r_schema, w_add, f"{pats_path}{step(p)}")
    _additional(c, r_add, w_add, path, f"{path}.additionalProperties", "properties it does not list")


def _writer_schema(c: Checker, w_pats: dict[str, Any], w_add: Any, name: str, where: str) -> Any:
    """The schema the writer holds an unlisted property to: one pattern matching it (the
    others only narrow it further), or additionalProperties; None when unprovable."""
    for p, schema in w_pats.items():
        m = _matches(p, name)
        if m is _MAY_MATCH:
            c.unsupported(where, f"whether the pattern {p!r} applies")
            return None
        if m:
            return schema
    return w_add


def _additional(c: Checker, r_add: Any, w_schema: Any, path: str, sub_path: str, what: str) -> None:
    if r_add is False:
        c.report(
            path, ("additional-properties-closed", "additional-properties-opened"),
            f"{rules.subject(path)}: {c.W} allows {what}, {c.R} forbids them (additionalProperties: false).",
        )
    else:
        c.descend(r_add, w_schema, sub_path)
