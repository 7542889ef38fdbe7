"""The filter language of subscriptions (docs/filters.md).

A filter is parsed once (:func:`parse`) into an immutable syntax tree
(:mod:`.syntax`), then compiled: :func:`compile_predicate` makes the Python predicate
the broker runs on live events and replays; ``tidings.pipeline.filters.to_column``
makes the Spark column of the pipeline from the same tree.

Example::

    >>> keep = compile_predicate("status == shipped & total >= 100")
    >>> keep({"Map": [["status", {"Text": "shipped"}], ["total", {"Nat": 120}]]})
    True
"""

from __future__ import annotations

from .parser import MAX_DEPTH, MAX_LENGTH, MAX_TERMS, FilterSyntaxError, parse
from .predicate import MAX_WORK, Predicate, compile_predicate
from .syntax import (
    OPERATORS,
    And,
    Compare,
    Constant,
    Expr,
    Filter,
    Index,
    Name,
    Or,
    Path,
    Star,
    Step,
    Truthy,
    Where,
    unparse,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MAX_TERMS",
    "MAX_WORK",
    "OPERATORS",
    "And",
    "Compare",
    "Constant",
    "Expr",
    "Filter",
    "FilterSyntaxError",
    "Index",
    "Name",
    "Or",
    "Path",
    "Predicate",
    "Star",
    "Step",
    "Truthy",
    "Where",
    "compile_predicate",
    "parse",
    "unparse",
]
