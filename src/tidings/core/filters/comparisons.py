"""What a value must pass for each comparison (docs/filters.md, "Meaning").

A value here is a wire value with its ``Option`` wrappers taken off: ``{"Nat": 5}``,
``{"Text": "x"}``, ``{"Option": None}`` for null. Each test is built once per term and
called once per value, so each is a small closure specialised to its literal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, cast

from .syntax import Constant

__all__ = ["MISSING", "NUMBERS", "STRINGS", "ValueTest", "truthy", "unwrap", "value_test"]

ValueTest = Callable[[Any], bool]
"""A test on one present value."""

MISSING: Final[Any] = object()

NUMBERS: Final = frozenset(
    {"Nat", "Int", "Float", "Nat8", "Nat16", "Nat32", "Nat64", "Int8", "Int16", "Int32", "Int64"}
)
STRINGS: Final = frozenset({"Text", "Principal", "Blob"})  # a Blob's view is its base64 text


def unwrap(w: Any) -> Any:
    """The value inside any ``Option`` wrappers; a null stays ``{"Option": None}``."""
    while "Option" in w:
        inner = w["Option"]
        if inner is None:
            return w
        w = inner
    return w


def value_test(op: str, c: Constant) -> ValueTest:
    """The test a present value must pass for ``op c``."""
    negated = _NEGATIONS.get(op)
    if negated is not None:
        positive = value_test(negated, c)
        return lambda w: not positive(w)
    if op == "~=" or op == "~~=":
        return _contains(c.text, fold=op == "~~=")
    if c.kind == "number":
        return _number_test(_ORDER[op], cast(float, c.value))
    if c.kind == "text":
        return _text_test(_ORDER[op], cast(str, c.value))
    if op != "==":  # order against true, false or null never holds
        return lambda w: False
    if c.kind == "bool":
        flag = c.value
        return lambda w: w.get("Bool", MISSING) is flag
    return lambda w: "Option" in w  # a value is unwrapped, so an Option left is null


_NEGATIONS: Final = {"!=": "==", "<>": "==", "!~=": "~=", "!~~=": "~~="}


def _contains(text: str, fold: bool) -> ValueTest:
    if fold:
        text = text.lower()

        def contains_folded(w: Any) -> bool:
            ((t, x),) = w.items()
            return t in STRINGS and text in x.lower()

        return contains_folded

    def contains(w: Any) -> bool:
        ((t, x),) = w.items()
        return t in STRINGS and text in x

    return contains


def _number_test(cmp: Callable[[float, float], bool], lit: float) -> ValueTest:
    def number(w: Any) -> bool:
        ((t, x),) = w.items()
        if t in NUMBERS:
            try:
                return cmp(float(x), lit)
            except OverflowError:  # an integer beyond any double
                return cmp(math.inf if x > 0 else -math.inf, lit)
        return False

    if cmp is _ORDER["=="]:  # the common case, without the call to cmp

        def number_eq(w: Any) -> bool:
            ((t, x),) = w.items()
            if t in NUMBERS:
                try:
                    return float(x) == lit
                except OverflowError:
                    return False  # lit is finite or a float infinity; a huge int is neither
            return False

        return number_eq if math.isfinite(lit) else number
    return number


def _text_test(cmp: Callable[[str, str], bool], lit: str) -> ValueTest:
    if cmp is _ORDER["=="]:

        def text_eq(w: Any) -> bool:
            ((t, x),) = w.items()
            return t in STRINGS and x == lit

        return text_eq

    def text(w: Any) -> bool:
        ((t, x),) = w.items()
        return t in STRINGS and cmp(x, lit)

    return text


def truthy(w: Any) -> bool:
    """A path alone: the value is neither null nor false."""
    return not ("Option" in w or w.get("Bool", True) is False)


_ORDER: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "==": lambda a, b: a == b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}
