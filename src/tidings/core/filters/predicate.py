"""Compiling a filter into a Python predicate over ICRC-16 wire values.

The predicate reads the wire form directly (``{"Map": [["k", {"Nat": 5}]]}``) with the
meaning docs/filters.md gives over the JSON view, without building that view: the
live path runs every event through every subscription's filter. The tree is compiled
once into nested closures; evaluating an event calls them and walks nothing else.

Inside, a *value* is a wire value with any ``Option`` wrappers taken off (a null stays
as ``{"Option": None}``), or one made up on the fly for the items the view invents: a
ValueMap entry reads as ``{"Array": [k, v]}``, an item of Nats or Bytes as ``{"Nat": n}``,
an item of Floats as ``{"Float": f}``. A path that leads nowhere gives ``MISSING``.
What a value must pass for each operator is in :mod:`.comparisons`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any, Final

from .comparisons import MISSING, ValueTest, truthy, unwrap, value_test
from .parser import parse
from .syntax import And, Expr, Filter, Index, Name, Or, Path, Star, Step, Truthy, Where

__all__ = ["MAX_WORK", "Predicate", "compile_predicate"]

Predicate = Callable[[Any], bool]
"""A compiled filter: called with an event's data in wire form, true when it passes."""

_Eval = Callable[[Any, Any], bool]  # (root, current) -> bool
_Get = Callable[[Any, Any], Any]  # (root, current) -> value | MISSING, or a list of values when multi



MAX_WORK: Final = 100_000
"""The most values one evaluation may visit through ``*`` and ``[cond]``. Beyond it the
event does not pass, so no filter and no event can hold up the broker (docs/filters.md,
"Cost"). The count depends on the filter and the event only: the same event always
gets the same answer."""


class _OverBudget(Exception):
    pass


# The work left to the evaluation running in this thread or task: set per evaluation, so
# concurrent evaluations (the writer thread and the event loop) never share a count.
_BUDGET: ContextVar[list[int]] = ContextVar("tidings_filter_budget")


def _spend(n: int) -> None:
    left = _BUDGET.get()
    left[0] -= n
    if left[0] < 0:
        raise _OverBudget


def compile_predicate(source: Filter | Expr | str, max_work: int = MAX_WORK) -> Predicate:
    """Compile a filter (text, a parsed :class:`Filter` or an expression) into a predicate.

    Raises :class:`~tidings.core.filters.FilterSyntaxError` for text that does not parse.
    """
    if isinstance(source, str):
        source = parse(source)
    tree = source.expr if isinstance(source, Filter) else source
    expr = _expr(tree)
    if not _costly(tree):
        def predicate(data: Any) -> bool:
            if "Option" in data:
                data = unwrap(data)
            return expr(data, data)

        return predicate

    def budgeted(data: Any) -> bool:
        if "Option" in data:
            data = unwrap(data)
        token = _BUDGET.set([max_work])
        try:
            return expr(data, data)
        except _OverBudget:
            return False
        finally:
            _BUDGET.reset(token)

    return budgeted


def _costly(expr: Expr) -> bool:
    """Whether a filter walks more than a fixed number of values per term (``*``, ``[..]``)."""
    if isinstance(expr, Or | And):
        return any(_costly(t) for t in expr.terms)
    return any(isinstance(s, Star | Where) for s in expr.path.steps)


# -- values --------------------------------------------------------------------------------


def _item(t: str, x: list[Any], i: int) -> Any:
    """Item ``i`` (already in range) of an array-like value's payload."""
    if t == "Array" or t == "Set":
        return unwrap(x[i])
    if t == "ValueMap":
        return {"Array": x[i]}
    return {"Float" if t == "Floats" else "Nat": x[i]}


def _items(w: Any) -> Iterable[Any]:
    """The items of an array in the view, or nothing."""
    ((t, x),) = w.items()
    if t == "Array" or t == "Set":
        return map(unwrap, x)
    if t == "ValueMap":
        return [{"Array": pair} for pair in x]
    if t == "Nats" or t == "Bytes":
        return [{"Nat": n} for n in x]
    if t == "Floats":
        return [{"Float": f} for f in x]
    return ()


def _members(w: Any) -> Iterable[Any]:
    """What ``*`` stands for: the items of an array, or the values of an object."""
    ((t, x),) = w.items()
    if t == "Map":
        return map(unwrap, dict(x).values())  # dict(): the last of a repeated key counts
    if t == "Class":
        return map(unwrap, {p["name"]: p["value"] for p in x}.values())
    return _items(w)


def _lookup(w: Any, key: str) -> Any:
    """Property ``key`` of an object (the last one when repeated), or MISSING."""
    x = w.get("Map")
    if x is not None:
        for k, v in reversed(x):
            if k == key:
                return unwrap(v)
        return MISSING
    x = w.get("Class")
    if x is not None:
        for p in reversed(x):
            if p["name"] == key:
                return unwrap(p["value"])
    return MISSING


# -- paths ---------------------------------------------------------------------------------


def _step(step: Step) -> Callable[[Any, Any], Any]:
    """A single-valued step: (value, root) -> value | MISSING."""
    if isinstance(step, Name):
        key = step.key

        def name(w: Any, root: Any) -> Any:
            x = w.get("Map")
            if x is not None:  # the common case, inlined
                for k, v in reversed(x):
                    if k == key:
                        return v if "Option" not in v else unwrap(v)
                return MISSING
            return _lookup(w, key)

        return name
    if isinstance(step, Index):
        i, key = step.index, step.key

        def index(w: Any, root: Any) -> Any:
            ((t, x),) = w.items()
            if t == "Map" or t == "Class":
                return _lookup(w, key)
            if t in _ARRAYS and -len(x) <= i < len(x):
                return _item(t, x, i)
            return MISSING

        return index
    if isinstance(step, Where):
        cond = _expr(step.cond)

        def where(w: Any, root: Any) -> Any:
            for item in _items(w):
                _spend(1)
                if cond(root, item):
                    return item
            return MISSING

        return where
    raise TypeError(f"not a single-valued step: {step!r}")


_ARRAYS: Final = frozenset({"Array", "Set", "ValueMap", "Nats", "Bytes", "Floats"})


def _path(path: Path) -> tuple[bool, _Get]:
    """Compile a path: (multi, get). A multi path's get returns a list of values."""
    from_root = path.root == "$"
    star = next((i for i, s in enumerate(path.steps) if isinstance(s, Star)), len(path.steps))
    head = tuple(_step(s) for s in path.steps[:star])
    get = _single(head, from_root)
    if star == len(path.steps):
        return False, get
    fns: list[Callable[[Any, Any], Any] | None] = [
        None if isinstance(s, Star) else _step(s) for s in path.steps[star + 1 :]
    ]

    def many(root: Any, cur: Any) -> list[Any]:
        v = get(root, cur)
        if v is MISSING:
            return []
        values = list(_members(v))
        _spend(len(values))
        for fn in fns:
            if fn is None:
                values = [m for v in values for m in _members(v)]
            else:
                values = [r for v in values if (r := fn(v, root)) is not MISSING]
            _spend(len(values))
        return values

    return True, many


def _single(steps: tuple[Callable[[Any, Any], Any], ...], from_root: bool) -> _Get:
    if not steps:
        return (lambda root, cur: root) if from_root else (lambda root, cur: cur)
    if len(steps) == 1:
        (only,) = steps
        if from_root:
            return lambda root, cur: only(root, root)
        return lambda root, cur: only(cur, root)

    def walk(root: Any, cur: Any) -> Any:
        v = root if from_root else cur
        for step in steps:
            v = step(v, root)
            if v is MISSING:
                break
        return v

    return walk


# -- expressions ---------------------------------------------------------------------------


def _expr(expr: Expr) -> _Eval:
    if isinstance(expr, Or | And):
        terms = tuple(_expr(t) for t in expr.terms)
        if len(terms) == 2:
            a, b = terms
            if isinstance(expr, Or):
                return lambda root, cur: a(root, cur) or b(root, cur)
            return lambda root, cur: a(root, cur) and b(root, cur)
        if isinstance(expr, Or):
            return lambda root, cur: any(t(root, cur) for t in terms)
        return lambda root, cur: all(t(root, cur) for t in terms)
    test = truthy if isinstance(expr, Truthy) else value_test(expr.op, expr.constant)
    steps = expr.path.steps
    if len(steps) == 1 and isinstance(steps[0], Name):
        return _test_property(expr.path.root == "$", steps[0].key, test)
    multi, get = _path(expr.path)
    if multi:
        return lambda root, cur: any(map(test, get(root, cur)))

    def compare(root: Any, cur: Any) -> bool:
        v = get(root, cur)
        return v is not MISSING and test(v)

    return compare


def _test_property(from_root: bool, key: str, test: ValueTest) -> _Eval:
    """``key OP literal``, the most common term, with the lookup inlined."""

    def property_test(root: Any, cur: Any) -> bool:
        w = root if from_root else cur
        x = w.get("Map")
        if x is not None:
            for k, v in reversed(x):
                if k == key:
                    return test(v if "Option" not in v else unwrap(v))
            return False
        v = _lookup(w, key)
        return v is not MISSING and test(v)

    return property_test
