"""ICRC-16 values and their JSON wire form.

A value is one tagged object on the wire, the Candid variant name as the key
(``{"Nat": 5}``, ``{"Map": [["k", {"Text": "v"}]]}``); see docs/wire-format.md.

Two representations live here, and both are lossless:

* the *wire form*: JSON-compatible builtins exactly as they travel. The broker keeps
  event data in this form end to end (decoded once, validated by :func:`check`,
  stored and pushed as bytes), because building objects per event would cost more
  than the rest of the publish path;
* :class:`Value`: a tagged, hashable object for code that inspects or builds values
  (the SDK, configs, tests). ``Value.from_wire(v.to_wire()) == v`` for every value.

Plain Python values convert both ways through :func:`from_python` and
:meth:`Value.to_python`; that direction is convenient, not lossless (a ``Nat8``
comes back as an ``int``, which goes out again as ``Nat``).
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .long_ints import INT_LIMIT, MAX_INT_DIGITS, NEGATIVE_LIMIT

__all__ = [
    "TAGS",
    "InvalidValue",
    "Principal",
    "Value",
    "check",
    "from_python",
    "map_get",
    "to_python",
    "wire_map",
]


class InvalidValue(ValueError):
    """A wire value is not a well-formed ICRC-16 value. ``path`` points at the culprit."""

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(f"{message} at {path}")
        self.reason = message
        self.path = path


class Principal(str):
    """A principal's textual form, kept distinct from ``Text`` in Python conversions."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Principal({str.__repr__(self)})"


_INT_RANGES: Final = {
    "Nat8": (0, 2**8 - 1),
    "Nat16": (0, 2**16 - 1),
    "Nat32": (0, 2**32 - 1),
    "Nat64": (0, 2**64 - 1),
    "Int8": (-(2**7), 2**7 - 1),
    "Int16": (-(2**15), 2**15 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "Int64": (-(2**63), 2**63 - 1),
}
_SCALARS: Final = frozenset({"Nat", "Int", "Text", "Bool", "Float", "Blob", "Principal", *_INT_RANGES})
_CONTAINERS: Final = frozenset(
    {"Array", "Map", "ValueMap", "Class", "Option", "Set", "Bytes", "Floats", "Nats"}
)
TAGS: Final = _SCALARS | _CONTAINERS
"""Every ICRC-16 variant name."""


def _is_int(x: Any) -> bool:
    return type(x) is int  # bool is a subclass of int and must not pass


def _is_finite_number(x: Any) -> bool:
    # A Float may come as a JSON integer; it must still fit a finite double.
    if type(x) is float:
        return math.isfinite(x)
    if not _is_int(x):
        return False
    try:
        float(x)
    except OverflowError:
        return False
    return True


def _decode_blob(x: Any, path: str) -> bytes:
    if not isinstance(x, str):
        raise InvalidValue("Blob must be a base64 string", path)
    try:
        return base64.b64decode(x, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidValue("Blob is not valid base64", path) from None


def _check_scalar(tag: str, x: Any, path: str) -> None:
    if tag == "Nat":
        if not _is_int(x) or x < 0:
            raise InvalidValue("Nat must be a non-negative integer", path)
        if x >= INT_LIMIT:
            raise InvalidValue(f"Nat has more than {MAX_INT_DIGITS:,} digits, the most tidings reads", path)
    elif tag == "Int":
        if not _is_int(x):
            raise InvalidValue("Int must be an integer", path)
        if not NEGATIVE_LIMIT < x < INT_LIMIT:
            raise InvalidValue(f"Int has more digits than the {MAX_INT_DIGITS:,} ({MAX_INT_DIGITS - 1:,} when "
                               "negative) tidings reads", path)
    elif tag in ("Text", "Principal"):
        if not isinstance(x, str):
            raise InvalidValue(f"{tag} must be a string", path)
        if tag == "Principal" and not x:
            raise InvalidValue("Principal must not be empty", path)
    elif tag == "Bool":
        if type(x) is not bool:
            raise InvalidValue("Bool must be true or false", path)
    elif tag == "Float":
        if not _is_finite_number(x):
            raise InvalidValue("Float must be a finite number", path)
    elif tag == "Blob":
        _decode_blob(x, path)
    else:
        lo, hi = _INT_RANGES[tag]
        if not _is_int(x) or not lo <= x <= hi:
            raise InvalidValue(f"{tag} must be an integer in [{lo}, {hi}]", path)


def _blob_ok(x: Any) -> bool:
    try:
        _decode_blob(x, "")
    except InvalidValue:
        return False
    return True


def _range_ok(tag: str) -> Any:
    lo, hi = _INT_RANGES[tag]
    return lambda x: type(x) is int and lo <= x <= hi


# Fast acceptance tests per scalar variant; on failure _check_scalar says why.
_SCALAR_OK: Final[dict[str, Any]] = {
    "Nat": lambda x: type(x) is int and 0 <= x < INT_LIMIT,
    "Int": lambda x: type(x) is int and NEGATIVE_LIMIT < x < INT_LIMIT,
    "Text": lambda x: type(x) is str,
    "Principal": lambda x: type(x) is str and x != "",
    "Bool": lambda x: type(x) is bool,
    "Float": _is_finite_number,
    "Blob": _blob_ok,
    **{t: _range_ok(t) for t in _INT_RANGES},
}


MAX_DEPTH: Final = 64
"""Deepest nesting of containers a wire value may have (the root is depth 1)."""


class _Bad(Exception):
    """Raised inside the walk; the path is collected while unwinding, so the walk
    itself never formats a path on the (common) success path."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.steps: list[str] = []


def check(obj: Any, path: str = "$") -> None:
    """Raise :class:`InvalidValue` unless ``obj`` is a well-formed wire value.

    This walks the wire form without building anything; it is the validation the
    publish path runs on every event. Containers nest at most :data:`MAX_DEPTH` deep.
    """
    try:
        _check(obj, 1)
    except _Bad as e:
        raise InvalidValue(e.reason, path + "".join(reversed(e.steps))) from None


def _in(step: str, fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except _Bad as e:
        e.steps.append(step)
        raise


def _check(obj: Any, depth: int) -> None:
    if type(obj) is not dict or len(obj) != 1:
        raise _Bad("expected an object with exactly one ICRC-16 variant key")
    ((tag, x),) = obj.items()
    ok = _SCALAR_OK.get(tag)
    if ok is not None:
        if not ok(x):
            try:
                _check_scalar(tag, x, "")
            except InvalidValue as e:
                raise _Bad(e.reason) from None
        return
    if tag not in _CONTAINERS:
        raise _Bad(f"unknown ICRC-16 variant {tag!r}")
    if tag == "Bytes":
        if type(x) is not list or not all(_is_int(b) and 0 <= b <= 255 for b in x):
            raise _Bad("Bytes must be an array of integers in [0, 255]")
        return
    if tag == "Floats":
        if type(x) is not list or not all(_is_finite_number(f) for f in x):
            raise _Bad("Floats must be an array of finite numbers")
        return
    if tag == "Nats":
        if type(x) is not list or not all(_is_int(n) and 0 <= n < INT_LIMIT for n in x):
            raise _Bad(f"Nats must be an array of non-negative integers of at most {MAX_INT_DIGITS:,} digits")
        return
    if depth >= MAX_DEPTH:
        raise _Bad(f"values nest at most {MAX_DEPTH} deep")
    d = depth + 1
    if tag == "Option":
        if x is not None:
            try:
                _check(x, d)
            except _Bad as e:
                e.steps.append("?")
                raise
        return
    if type(x) is not list:
        raise _Bad(f"{tag} must be an array" + (" of pairs" if tag in ("Map", "ValueMap") else ""))
    # ``i`` and ``part`` say where a failure happened; the step text is made only then.
    i, part = 0, 0
    try:
        if tag in ("Array", "Set"):
            for i, item in enumerate(x):  # noqa: B007 - read by the handler below
                _check(item, d)
        elif tag == "Map":
            for i, pair in enumerate(x):  # noqa: B007 - read by the handler below
                part = 0
                if type(pair) is not list or len(pair) != 2:
                    raise _Bad("Map entries must be 2-element arrays")
                if not isinstance(pair[0], str):
                    raise _Bad("Map keys must be strings")
                part = 2
                _check(pair[1], d)
        elif tag == "ValueMap":
            for i, pair in enumerate(x):  # noqa: B007 - read by the handler below
                part = 0
                if type(pair) is not list or len(pair) != 2:
                    raise _Bad("ValueMap entries must be 2-element arrays")
                part = 1
                _check(pair[0], d)
                part = 3
                _check(pair[1], d)
        else:  # Class
            for i, prop in enumerate(x):  # noqa: B007 - read by the handler below
                part = 0
                if (
                    type(prop) is not dict
                    or len(prop) != 3
                    or not isinstance(prop.get("name"), str)
                    or type(prop.get("immutable")) is not bool
                    or "value" not in prop
                ):
                    raise _Bad("Class properties are objects with name (string), value and immutable (bool)")
                part = 4
                _check(prop["value"], d)
    except _Bad as e:
        if tag in ("Array", "Set") or part == 0:
            e.steps.append(f"[{i}]")
        elif part == 1:
            e.steps.append(f"[{i}][0]")
        elif part == 3:
            e.steps.append(f"[{i}][1]")
        elif part == 2:
            e.steps.append(f".{x[i][0]}")
        else:
            e.steps.append(f".{x[i]['name']}")
        raise


class Value:
    """One ICRC-16 value: a variant ``tag`` and its ``payload``.

    Payloads: integers for the integer variants, ``str`` for Text and Principal,
    ``bool``, ``float``, ``bytes`` for Blob and Bytes, tuples of ``float``/``int`` for
    Floats/Nats, a tuple of Values for Array and Set, a tuple of ``(str, Value)`` for
    Map, of ``(Value, Value)`` for ValueMap, of ``(name, Value, immutable)`` for Class,
    and ``None`` or a Value for Option. Values are immutable and hashable.
    """

    __slots__ = ("payload", "tag")

    tag: str
    payload: Any

    def __init__(self, tag: str, payload: Any) -> None:
        if tag not in TAGS:
            raise InvalidValue(f"unknown ICRC-16 variant {tag!r}")
        object.__setattr__(self, "tag", tag)
        object.__setattr__(self, "payload", payload)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Value is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Value):
            return NotImplemented
        return self.tag == other.tag and _same(self.payload, other.payload)

    def __hash__(self) -> int:
        return hash((self.tag, self.payload))

    def __repr__(self) -> str:
        return f"Value({self.tag!r}, {self.payload!r})"

    # -- wire form ---------------------------------------------------------------------

    def to_wire(self) -> Any:
        """The JSON-compatible wire form of this value."""
        t, p = self.tag, self.payload
        if t in _SCALARS:
            return {t: base64.b64encode(p).decode() if t == "Blob" else p}
        if t in ("Array", "Set"):
            return {t: [v.to_wire() for v in p]}
        if t == "Map":
            return {t: [[k, v.to_wire()] for k, v in p]}
        if t == "ValueMap":
            return {t: [[k.to_wire(), v.to_wire()] for k, v in p]}
        if t == "Class":
            return {t: [{"name": n, "value": v.to_wire(), "immutable": im} for n, v, im in p]}
        if t == "Option":
            return {t: None if p is None else p.to_wire()}
        return {t: list(p)}  # Bytes, Floats, Nats

    @classmethod
    def from_wire(cls, obj: Any, path: str = "$") -> Value:
        """Build a Value from its wire form, raising :class:`InvalidValue` if malformed."""
        check(obj, path)
        return cls._build(obj)

    @classmethod
    def _build(cls, obj: Any) -> Value:
        ((t, x),) = obj.items()
        b = cls._build
        if t in _SCALARS:
            if t == "Blob":
                x = base64.b64decode(x)
            elif t == "Float":
                x = float(x)
            return cls(t, x)
        if t in ("Array", "Set"):
            return cls(t, tuple(b(v) for v in x))
        if t == "Map":
            return cls(t, tuple((k, b(v)) for k, v in x))
        if t == "ValueMap":
            return cls(t, tuple((b(k), b(v)) for k, v in x))
        if t == "Class":
            return cls(t, tuple((p["name"], b(p["value"]), p["immutable"]) for p in x))
        if t == "Option":
            return cls(t, None if x is None else b(x))
        if t == "Bytes":
            return cls(t, bytes(x))
        if t == "Floats":
            return cls(t, tuple(float(f) for f in x))
        return cls(t, tuple(x))  # Nats

    # -- plain Python --------------------------------------------------------------------

    def to_python(self) -> Any:
        """A plain Python rendering: see :func:`to_python`."""
        return to_python(self.to_wire())


def _same(a: Any, b: Any) -> bool:
    # Float payloads compare by identity of bits so that -0.0 and 0.0 stay distinct values.
    if type(a) is float and type(b) is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if type(a) is tuple and type(b) is tuple:  # so Floats payloads keep -0.0 apart too
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def from_python(x: Any) -> Value:
    """Convert a plain Python value to a Value.

    ``bool`` → Bool, ``int`` → Nat (or Int when negative), ``float`` → Float, ``str`` →
    Text, :class:`Principal` → Principal, ``bytes`` → Blob, ``None`` → Option(null),
    ``list``/``tuple`` → Array, ``set``/``frozenset`` → Set, a ``dict`` with only string
    keys → Map, any other mapping → ValueMap. A Value passes through unchanged.
    """
    if isinstance(x, Value):
        return x
    if x is None:
        return Value("Option", None)
    if type(x) is bool:
        return Value("Bool", x)
    if isinstance(x, int):
        if not NEGATIVE_LIMIT < x < INT_LIMIT:  # the service would refuse it (and msgspec cannot write it)
            raise InvalidValue(f"an integer has more digits than the {MAX_INT_DIGITS:,} ({MAX_INT_DIGITS - 1:,} when "
                               "negative) tidings reads")
        return Value("Nat" if x >= 0 else "Int", int(x))
    if isinstance(x, float):
        if not math.isfinite(x):
            raise InvalidValue("Float must be finite")
        return Value("Float", x)
    if isinstance(x, Principal):
        return Value("Principal", str(x))
    if isinstance(x, str):
        return Value("Text", x)
    if isinstance(x, bytes | bytearray | memoryview):
        return Value("Blob", bytes(x))
    if isinstance(x, Mapping):
        if all(isinstance(k, str) for k in x):
            return Value("Map", tuple((k, from_python(v)) for k, v in x.items()))
        return Value("ValueMap", tuple((from_python(k), from_python(v)) for k, v in x.items()))
    if isinstance(x, set | frozenset):
        return Value("Set", tuple(from_python(v) for v in x))
    if isinstance(x, Iterable):
        return Value("Array", tuple(from_python(v) for v in x))
    raise InvalidValue(f"cannot convert {type(x).__name__} to an ICRC-16 value")


def _tuple_key(x: Any) -> Any:
    return tuple(_tuple_key(i) for i in x) if isinstance(x, list) else x


def to_python(obj: Any) -> Any:
    """Render a wire value as plain Python.

    Integer variants → ``int``, Float → ``float``, Text → ``str``, Principal →
    :class:`Principal`, Blob and Bytes → ``bytes``, Array, Set, Floats, Nats → ``list``,
    Map and Class → ``dict``, ValueMap → ``dict`` (list keys become tuples), Option →
    ``None`` or the inner value.
    """
    ((t, x),) = obj.items()
    if t in ("Text", "Bool", "Nat", "Int") or t in _INT_RANGES:
        return x
    if t == "Float":
        return float(x)
    if t == "Principal":
        return Principal(x)
    if t == "Blob":
        return base64.b64decode(x)
    if t == "Bytes":
        return bytes(x)
    if t in ("Array", "Set"):
        return [to_python(v) for v in x]
    if t == "Map":
        return {k: to_python(v) for k, v in x}
    if t == "ValueMap":
        return {_tuple_key(to_python(k)): to_python(v) for k, v in x}
    if t == "Class":
        return {p["name"]: to_python(p["value"]) for p in x}
    if t == "Option":
        return None if x is None else to_python(x)
    if t == "Floats":
        return [float(f) for f in x]
    return list(x)  # Nats


def map_get(pairs: Iterable[Any], key: str, default: Any = None) -> Any:
    """The wire value under ``key`` in a Map's pairs (last one wins), or ``default``."""
    found = default
    for k, v in pairs:
        if k == key:
            found = v
    return found


def wire_map(items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> list[list[Any]]:
    """Pairs of an ICRC-16 Map in wire form from a mapping of already-wire values."""
    it = items.items() if isinstance(items, Mapping) else items
    return [[k, v] for k, v in it]

