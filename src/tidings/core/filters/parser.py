"""Reading filter text into a syntax tree (docs/filters.md, "Grammar").

A hand-written recursive-descent parser over the text, one character at a time. It
is strict: operators stand between spaces, nothing else may surround a term, and
every error names the 0-based position and what would have been accepted there.
"""

from __future__ import annotations

from typing import Final, cast

from .syntax import (
    INTEGER,
    LITERAL_STOP,
    NAME_STOP,
    OPERATORS,
    And,
    Compare,
    Constant,
    Expr,
    Filter,
    Index,
    Name,
    Op,
    Or,
    Path,
    Root,
    Star,
    Step,
    Truthy,
    Where,
    classify,
)

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "MAX_TERMS", "FilterSyntaxError", "parse"]

MAX_DEPTH: Final = 32
"""How deeply parentheses and ``[cond]`` may nest."""

MAX_LENGTH: Final = 2048
"""The longest filter text, in characters."""

MAX_TERMS: Final = 64
"""The most comparisons (and truth tests) one filter may hold."""

_TERM: Final = "a path or '('"


class FilterSyntaxError(ValueError):
    """A filter does not parse. ``position`` is a 0-based index into ``text``."""

    def __init__(self, text: str, position: int, expected: str) -> None:
        super().__init__(f"invalid filter at position {position}: expected {expected}")
        self.text = text
        self.position = position
        self.expected = expected


def parse(text: str) -> Filter:
    """Parse filter text, raising :class:`FilterSyntaxError` when it is malformed."""
    if not isinstance(text, str):
        raise TypeError(f"a filter is text, not {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise FilterSyntaxError(text, MAX_LENGTH, f"the end: a filter has at most {MAX_LENGTH} characters")
    parser = _Parser(text)
    expr = parser.filter()
    if parser.terms > MAX_TERMS:
        raise FilterSyntaxError(text, 0, f"at most {MAX_TERMS} comparisons in one filter, not {parser.terms}")
    return Filter(expr)


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.depth = 0
        self.terms = 0

    def fail(self, expected: str, at: int | None = None) -> FilterSyntaxError:
        return FilterSyntaxError(self.s, self.i if at is None else at, expected)

    def char(self) -> str:
        return self.s[self.i] if self.i < self.n else ""

    def filter(self) -> Expr:
        return self.or_(None)

    # -- combinators ----------------------------------------------------------------------

    def or_(self, close: str | None) -> Expr:
        terms = [self.and_(close)]
        while self.combinator(close, "|"):
            terms.append(self.and_(close))
        return terms[0] if len(terms) == 1 else Or(tuple(_flatten(terms, Or)))

    def and_(self, close: str | None) -> Expr:
        terms = [self.term()]
        while self.combinator(close, "&"):
            terms.append(self.term())
        return terms[0] if len(terms) == 1 else And(tuple(_flatten(terms, And)))

    def combinator(self, close: str | None, want: str) -> bool:
        """After a term: consume ``" <want> "`` and return True; False at the end or the other one."""
        c = self.char()
        if c == "" or c == close:
            if c == "" and close is not None:
                raise self.fail(f"'{close}'")
            return False
        if c != " ":
            end = "the end" if close is None else f"'{close}'"
            raise self.fail(f"' & ', ' | ' or {end}")
        j = self._skip_spaces(self.i)
        op = self.s[j : j + 1]
        if op not in ("&", "|"):
            raise self.fail("'&' or '|'", j)
        k = j + 1
        if k == self.n:
            raise self.fail(f"{_TERM} after '{op}'", k)
        if self.s[k] != " ":
            raise self.fail(f"a space after '{op}'", k)
        m = self._skip_spaces(k)
        if m == self.n:
            raise self.fail(f"{_TERM} after '{op}'", m)
        if op != want:
            return False  # a '|' ends the and_ loop; or_ takes it
        self.i = m
        return True

    def _skip_spaces(self, j: int) -> int:
        while j < self.n and self.s[j] == " ":
            j += 1
        return j

    # -- terms ----------------------------------------------------------------------------

    def term(self) -> Expr:
        if self.char() == "(":
            self.enter()
            self.i += 1
            expr = self.or_(")")
            self.i += 1  # the ')' that or_ stopped at
            self.depth -= 1
            return expr
        path = self.path()
        self.terms += 1
        if self.char() != " ":
            return Truthy(path)
        j = self._skip_spaces(self.i)
        k = j
        while k < self.n and self.s[k] != " ":
            k += 1
        word = self.s[j:k]
        if word in ("&", "|"):
            return Truthy(path)  # the spaces belong to the combinator
        if word not in OPERATORS:
            raise self.fail("an operator, '&' or '|'", j)
        if self.s[k : k + 1] != " ":
            raise self.fail(f"a literal after '{word}'", k)
        self.i = self._skip_spaces(k)
        constant = self.literal(word)
        return Compare(path, cast(Op, word), constant)

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"at most {MAX_DEPTH} nested groups")

    def literal(self, op: str) -> Constant:
        raw, escaped = self.word(LITERAL_STOP)
        if not raw and not escaped:
            raise self.fail(f"a literal after '{op}'")
        return Constant("text", raw, raw) if escaped else classify(raw)

    def word(self, stop: frozenset[str]) -> tuple[str, bool]:
        """Read up to an unescaped stop character; return the text and whether it had escapes."""
        out: list[str] = []
        escaped = False
        s, n, i = self.s, self.n, self.i
        while i < n:
            c = s[i]
            if c == "\\":
                if i + 1 == n:
                    raise self.fail("a character after '\\'", i + 1)
                out.append(s[i + 1])
                escaped = True
                i += 2
            elif c in stop:
                break
            else:
                out.append(c)
                i += 1
        self.i = i
        return "".join(out), escaped

    # -- paths ----------------------------------------------------------------------------

    def path(self) -> Path:
        root = ""
        c = self.char()
        if c == "$" or c == "@":
            root = c
            self.i += 1
            c = self.char()
        steps: list[Step] = []
        if c == ".":
            self.i += 1
            steps.append(self.step("a step after '.'"))
        elif c and c not in NAME_STOP:
            steps.append(self.step(_TERM))
        elif c == "[" and root:
            raise self.fail("a step before '['")
        elif not root:
            raise self.fail(_TERM)
        while steps:
            c = self.char()
            if c == ".":
                self.i += 1
                steps.append(self.step("a step after '.'"))
            elif c == "[":
                self.enter()
                self.i += 1
                cond = self.or_("]")
                self.i += 1  # the ']' that or_ stopped at
                self.depth -= 1
                steps.append(Where(cond))
            else:
                break
        return Path(cast(Root, root), tuple(steps))

    def step(self, expected: str) -> Step:
        start = self.i
        raw, escaped = self.word(NAME_STOP)
        if not raw and not escaped:
            raise self.fail(expected, start)
        if escaped:
            return Name(raw)
        if raw == "*":
            return Star()
        if INTEGER.fullmatch(raw):
            return Index(int(raw), raw)
        return Name(raw)


def _flatten(terms: list[Expr], kind: type[And] | type[Or]) -> list[Expr]:
    out: list[Expr] = []
    for t in terms:
        out.extend(t.terms if isinstance(t, kind) else (t,))
    return out
