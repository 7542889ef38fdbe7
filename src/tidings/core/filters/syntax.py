"""The syntax tree of a filter, and its canonical text.

A filter parses into one immutable tree of the node classes below (see
:mod:`tidings.core.filters.parser`); both compilers, the Python predicate and the
Spark column, read the same tree. :func:`unparse` writes a tree back as text in the
canonical spelling: one space around operators, ``.`` between steps after a root
marker, parentheses only where ``|`` sits inside ``&``, and a backslash only where
one is needed. ``parse(unparse(t)) == t`` for every tree the parser makes.

Node classes::

    Filter(expr)                      the whole filter
    Or(terms) / And(terms)            two or more terms
    Compare(path, op, constant)       path OP literal
    Truthy(path)                      a path alone
    Path(root, steps)                 root is "$", "@" or "" (implicit)
    Name(key) / Index(index, key) / Star() / Where(cond)
    Constant(kind, value, text)       kind: "number", "bool", "null" or "text"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

__all__ = [
    "OPERATORS",
    "And",
    "Compare",
    "Constant",
    "Expr",
    "Filter",
    "Index",
    "Name",
    "Or",
    "Path",
    "Star",
    "Step",
    "Truthy",
    "Where",
    "classify",
    "unparse",
]

OPERATORS: Final = ("==", "!=", "<>", ">", ">=", "<", "<=", "~=", "~~=", "!~=", "!~~=")
"""Every comparison operator, as written in a filter."""

Root: TypeAlias = Literal["$", "@", ""]
Op: TypeAlias = Literal["==", "!=", "<>", ">", ">=", "<", "<=", "~=", "~~=", "!~=", "!~~="]

# A step or literal written without any backslash is read by these rules; any escape makes
# it a name (in a path) or a text (as a literal), which is how `\1` names the key "1".
INTEGER: Final = re.compile(r"-?[0-9]+")
NUMBER: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

# Characters that end a name or a literal unless escaped (a literal may hold a bare ".").
NAME_STOP: Final = frozenset(" .[]()&|")
LITERAL_STOP: Final = frozenset(" []()&|")


@dataclass(frozen=True, slots=True)
class Name:
    """Look up the property ``key`` of an object."""

    key: str


@dataclass(frozen=True, slots=True)
class Index:
    """Item ``index`` of an array (negative from the end), or property ``key`` of an object."""

    index: int
    key: str


@dataclass(frozen=True, slots=True)
class Star:
    """Every item of an array, or every value of an object."""


@dataclass(frozen=True, slots=True)
class Where:
    """The first array item for which ``cond`` holds (paths in ``cond`` start at the item)."""

    cond: Expr


Step: TypeAlias = Name | Index | Star | Where


@dataclass(frozen=True, slots=True)
class Path:
    """Where to look: from the root (``"$"``), the current item (``"@"``), or implicitly.

    An implicit path starts at the current array item inside ``[cond]`` and at the root
    elsewhere; so does ``@`` at the top level.
    """

    root: Root
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True, slots=True)
class Constant:
    """A literal: ``value`` is a float, a bool, None or a str; ``text`` is how it is written.

    ``~=`` and its kin compare with ``text`` whatever the kind, so ``name ~= 5`` looks
    for the characters "5".
    """

    kind: Literal["number", "bool", "null", "text"]
    value: float | bool | str | None
    text: str


@dataclass(frozen=True, slots=True)
class Compare:
    """``path op constant``."""

    path: Path
    op: Op
    constant: Constant


@dataclass(frozen=True, slots=True)
class Truthy:
    """A path alone: it passes when it has a value other than null and false."""

    path: Path


@dataclass(frozen=True, slots=True)
class And:
    """All of two or more terms."""

    terms: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """Any of two or more terms."""

    terms: tuple[Expr, ...]


Expr: TypeAlias = Or | And | Compare | Truthy


@dataclass(frozen=True, slots=True)
class Filter:
    """A parsed filter. ``text`` is its canonical spelling."""

    expr: Expr

    @property
    def text(self) -> str:
        return unparse(self.expr)

    def __str__(self) -> str:
        return self.text


def classify(raw: str) -> Constant:
    """The constant a literal written without escapes stands for."""
    if raw == "true" or raw == "false":
        return Constant("bool", raw == "true", raw)
    if raw == "?":
        return Constant("null", None, raw)
    if NUMBER.fullmatch(raw):
        return Constant("number", float(raw), raw)
    return Constant("text", raw, raw)


# -- canonical text -----------------------------------------------------------------------


def _escape(text: str, stop: frozenset[str]) -> str:
    return "".join("\\" + c if c in stop or c == "\\" else c for c in text)


def _name_text(key: str, first: bool) -> str:
    if not key:
        raise ValueError("a filter cannot name the empty key")
    out = _escape(key, NAME_STOP)
    if key == "*" or INTEGER.fullmatch(key) or (first and key[0] in "$@"):
        out = "\\" + out  # escaped, so it reads as a name
    return out


def _literal_text(c: Constant) -> str:
    if c.kind != "text":
        return c.text
    text = str(c.value)
    if not text:
        raise ValueError("a filter cannot hold an empty text literal")
    out = _escape(text, LITERAL_STOP)
    if out == text and classify(text).kind != "text":
        out = "\\" + out  # `\5` is the text "5", `\true` the text "true"
    return out


def _step_text(step: Step, first: bool) -> str:
    if isinstance(step, Name):
        return _name_text(step.key, first)
    if isinstance(step, Index):
        if not INTEGER.fullmatch(step.key) or int(step.key) != step.index:
            raise ValueError(f"an Index step's key must be the text of its index, not {step.key!r}")
        return step.key
    if isinstance(step, Star):
        return "*"
    return "[" + unparse(step.cond) + "]"


def _path_text(path: Path) -> str:
    out: str = path.root
    for i, step in enumerate(path.steps):
        if isinstance(step, Where):
            if i == 0:
                raise ValueError("a path cannot begin with [cond]")
            out += _step_text(step, False)
        elif i == 0 and not path.root:
            out += _step_text(step, True)
        else:
            out += "." + _step_text(step, False)
    if not out:
        raise ValueError("a path needs a root marker or a step")
    return out


def unparse(expr: Expr) -> str:
    """The canonical text of a filter expression."""
    if isinstance(expr, Or):
        return " | ".join(unparse(t) for t in expr.terms)
    if isinstance(expr, And):
        return " & ".join(f"({unparse(t)})" if isinstance(t, Or) else unparse(t) for t in expr.terms)
    if isinstance(expr, Compare):
        return f"{_path_text(expr.path)} {expr.op} {_literal_text(expr.constant)}"
    return _path_text(expr.path)
