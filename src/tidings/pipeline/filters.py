"""Compiling a filter into a Spark ``Column`` over the JSON view of event data.

The same syntax tree as the Python predicate (:mod:`tidings.core.filters`), with the
same meaning (docs/filters.md); tests check that both agree on generated events and
filters. The data column is a ``VARIANT`` holding the JSON view, as made by::

    F.parse_json(F.lit(json_view_bytes(wire).decode()))

The tree compiles to one Spark SQL expression (:func:`to_sql`), parsed once by
``F.expr``: building the same thing from ``pyspark.sql.functions`` takes hundreds of
py4j round trips per filter. How the meaning maps onto Spark:

* a *value* is a ``VARIANT``; SQL NULL means "no value" (a path that led nowhere),
  while JSON null is a variant null (``is_variant_null``);
* a path with ``*`` yields an ``array<variant>`` (its NULL items lead nowhere), and a
  comparison over it is ``exists``;
* runs of name and index steps become one variant path (``$['a'][0]``); a value read
  more than once is bound to a lambda variable first (``exists`` or ``transform`` over
  a one-item array) unless it is a single extraction, which Spark reads cheaply;
* every extraction uses ``try_variant_get``, so a step into the wrong kind of value
  gives NULL instead of raising (Spark runs in ANSI mode);
* kinds are told apart by ``schema_of_variant``, so the text "5" never equals 5;
* a term may be NULL where SQL's logic lacks a value, and NULL counts as false: AND, OR,
  ``exists`` and ``filter`` treat it so, a negation coalesces what it negates, and the
  whole filter is ``coalesce(..., false)``, so the column is never NULL.

String literals are written with backslash escapes, which needs Spark's default
``spark.sql.parser.escapedStringLiterals=false``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from pyspark.sql import Column
from pyspark.sql import functions as F

from tidings.core.filters import And, Compare, Constant, Expr, Filter, Index, Name, Or, Path, Star, Step, Where, parse

__all__ = ["to_column", "to_sql"]

_INT_MAX: Final = 2**31 - 1
_NUMBER_KINDS: Final = "'^([A-Z]*INT|DOUBLE|FLOAT|DECIMAL.*)$'"  # what schema_of_variant calls numbers
_EMPTY: Final = "cast(array() AS array<variant>)"
_NEGATIONS: Final = {"!=": "==", "<>": "==", "!~=": "~=", "!~~=": "~~="}
_SQL_OPS: Final = {"==": "=", ">": ">", ">=": ">=", "<": "<", "<=": "<="}
_DATA_VAR: Final = "__tf_data"
_NAME: Final = re.compile(r"(?:`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*)(?:\.(?:`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*))*")


def to_column(source: Filter | Expr | str, data: Column | str = "data") -> Column:
    """A non-null boolean column: whether the event whose JSON view is ``data`` passes.

    ``source`` is filter text or a parsed filter; text that does not parse raises
    :class:`~tidings.core.filters.FilterSyntaxError`. ``data`` is a ``VARIANT`` column
    or the name of a top-level one.
    """
    if isinstance(data, str):
        return F.expr(to_sql(source, _identifier(data)))
    body = to_sql(source, _DATA_VAR)
    return F.call_function("exists", F.array(data), F.expr(f"{_DATA_VAR} -> {body}"))


def to_sql(source: Filter | Expr | str, data: str = "`data`") -> str:
    """The filter as a Spark SQL boolean expression over ``data``, a SQL ``VARIANT`` expression.

    A ``data`` that is more than a column name is evaluated once, bound to a variable.
    """
    if isinstance(source, str):
        source = parse(source)
    expr = source.expr if isinstance(source, Filter) else source
    if _NAME.fullmatch(data):
        return _true(_Compiler().expr(expr, data, data))
    body = _true(_Compiler().expr(expr, _DATA_VAR, _DATA_VAR))
    return f"exists(array({data}), {_DATA_VAR} -> {body})"


def _identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _double(x: float) -> str:
    if math.isinf(x):
        return f"CAST('{'' if x > 0 else '-'}Infinity' AS DOUBLE)"
    return f"{x!r}D"  # repr round-trips, and Java reads it back to the same double


def _true(sql: str) -> str:
    return f"coalesce({sql}, false)"


@dataclass(frozen=True)
class _Value:
    """A single value under construction: ``base``, or the first of ``paths`` that exists in it.

    Runs of Name and Index steps become Spark variant paths from one variable
    (``$['a'][0]``), one path per way the run can go (an Index is an array index or an
    object key): at most one of them exists in any value.
    """

    base: str
    paths: tuple[str, ...] = ("$",)
    var: bool = True  # base is a variable or a column, cheap to repeat

    def get(self, type_: str = "variant") -> str:
        """The value as ``type_`` (NULL if it is not one)."""
        if len(self.paths) == 1:  # the base is read once
            if type_ == "variant" and self.paths == ("$",):
                return self.base
            return f"try_variant_get({self.base}, {_string(self.paths[0])}, '{type_}')"
        gets = ", ".join(f"try_variant_get({self.base}, {_string(p)}, 'variant')" for p in self.paths)
        whole = f"coalesce({gets})"
        return whole if type_ == "variant" else f"try_variant_get({whole}, '$', '{type_}')"

    def cheap(self, n: int = 1) -> bool:
        """Whether repeating the value's SQL repeats at most ``n`` extractions from a variable."""
        return self.var and len(self.paths) <= n


_MAX_PATHS: Final = 4


class _Compiler:
    """One filter's compilation; it hands out fresh lambda variable names."""

    def __init__(self) -> None:
        self.count = 0

    def var(self) -> str:
        self.count += 1
        return f"__tf{self.count}"

    def expr(self, expr: Expr, root: str, cur: str) -> str:
        if isinstance(expr, Or | And):
            joiner = " OR " if isinstance(expr, Or) else " AND "
            return "(" + joiner.join(self.expr(t, root, cur) for t in expr.terms) + ")"
        test = _test(expr.op, expr.constant) if isinstance(expr, Compare) else _truthy
        values = self.path(expr.path, root, cur)
        v = self.var()
        if isinstance(values, str):  # several values
            return f"exists({values}, {v} -> {test(_Value(v))})"
        if values.cheap(2):
            return test(values)  # the test reads its value a few times
        return f"exists(array({values.get()}), {v} -> {test(_Value(v))})"

    def let(self, value: _Value, fn: Callable[[_Value], str]) -> _Value:
        """``fn`` of the value, which it may read several times: bound to a variable unless cheap."""
        if value.cheap():
            return _Value(fn(value), var=False)
        v = self.var()
        return _Value(f"try_element_at(transform(array({value.get()}), {v} -> {fn(_Value(v))}), 1)", var=False)

    # -- paths ------------------------------------------------------------------------------

    def path(self, path: Path, root: str, cur: str) -> _Value | str:
        """One value, or the SQL of an array of values once a ``*`` was passed (NULL items lead nowhere)."""
        value = _Value(root if path.root == "$" else cur)
        many: str | None = None
        for step in path.steps:
            if many is not None:
                v = self.var()
                if isinstance(step, Star):
                    many = f"flatten(transform({many}, {v} -> coalesce({_members(_Value(v))}, {_EMPTY})))"
                else:
                    many = f"transform({many}, {v} -> {self.step(_Value(v), step, root).get()})"
            elif isinstance(step, Star):
                many = self.let(value, _members).get()
            else:
                value = self.step(value, step, root)
        return value if many is None else many

    def step(self, value: _Value, step: Step, root: str) -> _Value:
        if isinstance(step, Name) and _quotable(step.key):
            if value.var or len(value.paths) == 1:
                return replace(value, paths=tuple(p + _segment(step.key) for p in value.paths))
        elif isinstance(step, Name):
            return _Value(f"try_element_at({value.get('map<string,variant>')}, {_string(step.key)})", var=False)
        elif isinstance(step, Index) and 0 <= step.index < _INT_MAX and _quotable(step.key):
            ways = (f"[{step.index}]", _segment(step.key))
            if value.var and 2 * len(value.paths) <= _MAX_PATHS:
                return replace(value, paths=tuple(p + w for p in value.paths for w in ways))
            return self.let(value, lambda v: _Value(v.get(), tuple("$" + w for w in ways)).get())
        elif isinstance(step, Index):
            return self.let(value, lambda v: f"coalesce({_at(v, step.index)}, {_key(v, step.key)})")
        elif isinstance(step, Where):
            v = self.var()
            cond = self.expr(step.cond, root, v)
            return _Value(f"try_element_at(filter({value.get('array<variant>')}, {v} -> {cond}), 1)", var=False)
        # A Name after a value with several paths: bind it first.
        return self.let(value, lambda v: self.step(v, step, root).get())


def _quotable(key: str) -> bool:
    return "'" not in key or '"' not in key


def _segment(key: str) -> str:
    """A variant path segment for an object key (Spark's paths have no escapes: use the quote it lacks)."""
    return "['" + key + "']" if "'" not in key else '["' + key + '"]'


def _members(v: _Value) -> str:
    """What ``*`` stands for: the items of an array or the values of an object (NULL if neither)."""
    return f"coalesce({v.get('array<variant>')}, map_values({v.get('map<string,variant>')}))"


def _key(v: _Value, key: str) -> str:
    if _quotable(key):
        return replace(v, paths=tuple(p + _segment(key) for p in v.paths)).get()
    return f"try_element_at({v.get('map<string,variant>')}, {_string(key)})"


def _at(v: _Value, i: int) -> str:
    if 0 <= i < _INT_MAX:
        return replace(v, paths=tuple(f"{p}[{i}]" for p in v.paths)).get()
    if -_INT_MAX <= i < 0:
        return f"try_element_at({v.get('array<variant>')}, {i})"
    return "CAST(NULL AS VARIANT)"  # beyond any array


# -- tests on one value ------------------------------------------------------------------------

_Test = Callable[[_Value], str]


def _number(v: _Value) -> str:
    return f"if(schema_of_variant({v.get()}) RLIKE {_NUMBER_KINDS}, {v.get('double')}, NULL)"


def _text(v: _Value) -> str:
    return f"if(schema_of_variant({v.get()}) = 'STRING', {v.get('string')}, NULL)"


def _boolean(v: _Value) -> str:
    return f"if(schema_of_variant({v.get()}) = 'BOOLEAN', {v.get('boolean')}, NULL)"


def _truthy(v: _Value) -> str:
    x = v.get()
    return f"({x} IS NOT NULL AND NOT is_variant_null({x}) AND coalesce({_boolean(v)}, true))"


def _test(op: str, const: Constant) -> _Test:
    """The test a value must pass for ``op const`` (NULL counts as false)."""
    negated = _NEGATIONS.get(op)
    if negated is not None:
        positive = _test(negated, const)
        return lambda v: f"({v.get()} IS NOT NULL AND NOT {_true(positive(v))})"
    if op == "~=":
        return lambda v: f"contains({_text(v)}, {_string(const.text)})"
    if op == "~~=":
        return lambda v: f"contains(lower({_text(v)}), {_string(const.text.lower())})"
    sql_op = _SQL_OPS[op]
    if const.kind == "number" and isinstance(const.value, float):
        number = _double(const.value)
        return lambda v: f"{_number(v)} {sql_op} {number}"
    if const.kind == "text" and isinstance(const.value, str):
        text = _string(const.value)
        return lambda v: f"{_text(v)} {sql_op} {text}"
    if op != "==":  # order against true, false or null never holds
        return lambda v: "false"
    if const.kind == "bool":
        flag = "true" if const.value else "false"
        return lambda v: f"{_boolean(v)} = {flag}"
    return lambda v: f"is_variant_null({v.get()})"
