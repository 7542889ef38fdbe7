"""Avro data validation, compiled once per schema into a tree of closures.

fastavro's validator reports a failing field by name but not where it sits, and accepts
records with undeclared keys; this one gives a JSON path and refuses keys a record does
not declare (an event carrying fields its schema does not describe would defeat the
compatibility checks, which reason only about declared fields).

A check returns ``None`` for a valid datum, else a ``Failure`` whose path is collected
while unwinding, so nothing is formatted on the (common) success path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

from ._avro_schema import PRIMITIVES, resolve

__all__ = ["Check", "Failure", "compile_checks", "describe"]


class Failure:
    __slots__ = ("reason", "steps")

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.steps: list[str | int] = []  # innermost first


Check = Callable[[Any], Failure | None]
_MISSING: Final = object()


def _show(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _mismatch(x: Any, what: str) -> Failure:
    return Failure(f"{_show(x)} is not {what}")


def _ranged(kind: str, lo: int, hi: int) -> Check:
    def check(x: Any) -> Failure | None:
        if type(x) is int and lo <= x <= hi:
            return None
        if type(x) is int:
            return Failure(f"{x} is out of range for {kind} ({lo} to {hi})")
        return _mismatch(x, f"of type {kind}")

    return check


def _real(kind: str, limit: float) -> Check:
    # Beyond the limit the value would encode as infinity (or not at all, for huge ints).
    def check(x: Any) -> Failure | None:
        if (type(x) is float or type(x) is int) and -limit <= x <= limit:
            return None
        if type(x) is float or type(x) is int:
            return Failure(f"{_show(x)} is out of range for {kind}")
        return _mismatch(x, f"of type {kind}")

    return check


def _typed(kind: str, *types: type) -> Check:
    def check(x: Any) -> Failure | None:
        return None if type(x) in types else _mismatch(x, f"of type {kind}")

    return check


_PRIMITIVE_CHECKS: Final[dict[str, Check]] = {
    "null": lambda x: None if x is None else _mismatch(x, "null"),
    "boolean": _typed("boolean", bool),
    "int": _ranged("int", -(2**31), 2**31 - 1),
    "long": _ranged("long", -(2**63), 2**63 - 1),
    "float": _real("float", 3.4028234663852886e38),
    "double": _real("double", sys.float_info.max),
    "string": _typed("string", str),
    "bytes": _typed("bytes", bytes),
}
# Which Python types of converted data each kind of schema can accept (to pick union branches).
_ACCEPTS: Final[dict[str, tuple[type, ...]]] = {
    "null": (type(None),), "boolean": (bool,), "int": (int,), "long": (int,), "float": (int, float),
    "double": (int, float), "string": (str,), "bytes": (bytes,), "enum": (str,), "fixed": (bytes,),
    "record": (dict,), "error": (dict,), "map": (dict,), "array": (list,),
}  # fmt: skip


def describe(t: Any, names: dict[str, dict[str, Any]]) -> str:
    """A short human name for a schema: ``int``, ``record a.User``, ``union [null, string]``."""
    t = resolve(t, names)
    if isinstance(t, str):
        return t
    if isinstance(t, list):
        return "union [" + ", ".join(describe(b, names) for b in t) + "]"
    if "name" in t:
        return f"{t['type']} {t['name']}"
    return t["type"]


def _kind(t: Any) -> str:
    return t if isinstance(t, str) else t["type"]


class _Compiler:
    def __init__(self, names: dict[str, dict[str, Any]]) -> None:
        self.names = names
        self.done: dict[str, Check] = {}
        self.busy: set[str] = set()

    def compile(self, t: Any) -> Check:
        if isinstance(t, str):
            return _PRIMITIVE_CHECKS[t] if t in PRIMITIVES else self.named(t)
        if isinstance(t, list):
            return self.union(t)
        kind = t["type"]
        if kind in PRIMITIVES:
            return _PRIMITIVE_CHECKS[kind]  # logical types are checked as their underlying type
        if kind == "array":
            return self.array(t)
        if kind == "map":
            return self.map(t)
        return self.named(t["name"])

    def named(self, full: str) -> Check:
        if full in self.done:
            return self.done[full]
        if full in self.busy:  # recursion: look the check up once it exists
            done = self.done
            return lambda x: done[full](x)
        self.busy.add(full)
        t = self.names[full]
        if t["type"] in ("record", "error"):
            check = self.record(t)
        elif t["type"] == "enum":
            check = self.enum(t)
        else:
            check = self.fixed(t)
        self.done[full] = check
        return check

    def record(self, t: dict[str, Any]) -> Check:
        name = t["name"]
        fields = [(f["name"], self.compile(f["type"]), "default" in f or self.nullable(f["type"])) for f in t["fields"]]
        declared = frozenset(f["name"] for f in t["fields"])

        def check(x: Any) -> Failure | None:
            if type(x) is not dict:
                return _mismatch(x, f"a record {name} (an object)")
            for field, check_field, optional in fields:
                v = x.get(field, _MISSING)
                if v is _MISSING:
                    if optional:
                        continue
                    return Failure(f"{field!r} is a required field of record {name}")
                failure = check_field(v)
                if failure is not None:
                    failure.steps.append(field)
                    return failure
            if not declared.issuperset(x):
                extra = next(k for k in x if k not in declared)
                return Failure(f"{extra!r} is not a field of record {name}")
            return None

        return check

    def nullable(self, t: Any) -> bool:
        # A missing field reads as null, as fastavro writes it: fine when null is allowed.
        t = resolve(t, self.names)
        if isinstance(t, list):
            return any(_kind(resolve(b, self.names)) == "null" for b in t)
        return _kind(t) == "null"

    def enum(self, t: dict[str, Any]) -> Check:
        name, symbols = t["name"], frozenset(t["symbols"])
        listed = ", ".join(t["symbols"])

        def check(x: Any) -> Failure | None:
            if type(x) is str and x in symbols:
                return None
            if type(x) is str:
                return Failure(f"{x!r} is not a symbol of enum {name} ({listed})")
            return _mismatch(x, f"a symbol of enum {name}")

        return check

    def fixed(self, t: dict[str, Any]) -> Check:
        name, size = t["name"], t["size"]

        def check(x: Any) -> Failure | None:
            if type(x) is bytes and len(x) == size:
                return None
            if type(x) is bytes:
                return Failure(f"fixed {name} holds exactly {size} bytes, not {len(x)}")
            return _mismatch(x, f"bytes for fixed {name}")

        return check

    def array(self, t: dict[str, Any]) -> Check:
        check_item = self.compile(t["items"])

        def check(x: Any) -> Failure | None:
            if type(x) is not list:
                return _mismatch(x, "an array")
            for i, item in enumerate(x):
                failure = check_item(item)
                if failure is not None:
                    failure.steps.append(i)
                    return failure
            return None

        return check

    def map(self, t: dict[str, Any]) -> Check:
        check_value = self.compile(t["values"])

        def check(x: Any) -> Failure | None:
            if type(x) is not dict:
                return _mismatch(x, "a map (an object)")
            for k, v in x.items():
                failure = check_value(v)
                if failure is not None:
                    failure.steps.append(k)
                    return failure
            return None

        return check

    def union(self, t: list[Any]) -> Check:
        by_type: dict[type, list[Check]] = {}
        for b in t:
            check_branch = self.compile(b)
            for py_type in _ACCEPTS[_kind(resolve(b, self.names))]:
                by_type.setdefault(py_type, []).append(check_branch)
        name = describe(t, self.names)

        def check(x: Any) -> Failure | None:
            candidates = by_type.get(type(x))
            if candidates is None:
                return Failure(f"{_show(x)} matches no branch of {name}")
            first = None
            for c in candidates:
                failure = c(x)
                if failure is None:
                    return None
                first = first or failure
            # With one plausible branch, its own reason (and deeper path) says more.
            return first if len(candidates) == 1 else Failure(f"{_show(x)} matches no branch of {name}")

        return check


def compile_checks(root: Any, names: dict[str, dict[str, Any]]) -> Check:
    return _Compiler(names).compile(root)
