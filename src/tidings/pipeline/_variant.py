"""The JSON view of an ICRC-16 value (docs/filters.md) in Spark's VARIANT binary encoding.

Pure Python, no Spark: the archive job writes the ``payload`` column with pyarrow, and
Spark reads it as a ``VARIANT`` (``SELECT payload:amount``). The encoding is Spark's
(``common/variant/README.md`` in the Spark sources): a ``metadata`` buffer holding the
dictionary of object keys and a ``value`` buffer. :func:`encode` goes from the wire
form straight to the binary form, without building the JSON view first; its meaning
is :func:`tidings.core.jsonview.json_view` (tests compare the two through PySpark's
own decoder).

Choices where the view's JSON text would leave Spark's ``parse_json`` free:

* integers take the smallest of int8..int64; beyond that, decimal(38, 0) up to 38
  digits, then a double (as ``parse_json`` does), and null past a double's range (as an
  infinite float is; ICRC-16 integers reach 4,300 digits, ``core.long_ints``);
* floats are doubles (``parse_json`` would make ``2.5`` a decimal); NaN and the
  infinities, which JSON cannot hold, are null, as in the view's text;
* a repeated Map key keeps its last value, as the view does.

:func:`encode_text` starts from the wire JSON text. Where the C module ``_variantc``
was built (the default install compiles it; it is optional), it reads the text straight
into the same bytes, about ten times faster; it hands anything unusual back to
:func:`encode`, so rare inputs and errors behave as here.
"""

from __future__ import annotations

import importlib
import math
import struct
from types import ModuleType
from typing import Any, Final

import msgspec


def _native() -> ModuleType | None:
    try:
        return importlib.import_module("tidings.pipeline._variantc")
    except ImportError:  # installed without a C compiler: the Python encoder alone
        return None


native: Final = _native()

__all__ = ["encode", "encode_text", "native"]

_INTS: Final = frozenset(
    {"Nat", "Int", "Nat8", "Nat16", "Nat32", "Nat64", "Int8", "Int16", "Int32", "Int64"}
)
_STRINGS: Final = frozenset({"Text", "Principal", "Blob"})
_NULL: Final = b"\x00"
_TRUE: Final = b"\x04"  # primitive (0) with type id 1
_FALSE: Final = b"\x08"
_DOUBLE: Final = 7 << 2
_DECIMAL16: Final = 10 << 2
_LONG_STR: Final = 16 << 2
_MAX_DECIMAL16: Final = 10**38


def encode(wire: Any) -> tuple[bytes, bytes]:
    """``(metadata, value)``: the VARIANT of the JSON view of the well-formed wire value ``wire``."""
    pairs = wire.get("Map")
    if pairs is not None and len(wire) == 1 and len(pairs) <= 0xFF:
        flat = _flat_map(pairs)
        if flat is not None:
            return flat
    keys: dict[str, int] = {}
    value = _value(wire, keys)
    return _metadata(keys), value


def encode_text(text: str | bytes) -> tuple[bytes, bytes]:
    """:func:`encode` of the wire value whose JSON text is ``text``."""
    if native is not None:
        found = native.encode_json(text)
        if found is not None:
            return found  # type: ignore[no-any-return]
    return encode(msgspec.json.decode(text))


_PLANS: dict[tuple[str, ...], tuple[list[int], bytes, bytes]] = {}


def _flat_map(pairs: list[Any]) -> tuple[bytes, bytes] | None:
    """The common case, a Map of scalars: its shape (the keys in order) fixes the metadata,
    the field ids and the order of the values, so they are planned once per shape."""
    names = tuple([p[0] for p in pairs])
    plan = _PLANS.get(names)
    if plan is None:
        last = {k: i for i, k in enumerate(names)}  # a repeated key keeps its last value
        ordered = sorted(last)
        keys = {k: n for n, k in enumerate(ordered)}
        plan = ([last[k] for k in ordered], _metadata(keys), _uints(list(range(len(ordered))), _size(len(keys) - 1)))
        if len(_PLANS) >= _META_CACHE_MAX:
            _PLANS.clear()
        _PLANS[names] = plan
    order, metadata, ids = plan
    values = []
    for i in order:
        v = _scalar(pairs[i][1])
        if v is None:
            return None
        values.append(v)
    id_size = len(ids) // len(order) if order else 1
    return metadata, _container(values, (id_size - 1) << 2, 2, len(values), False, ids)


def _scalar(wire: Any) -> bytes | None:
    """The encoding of a scalar wire value; None for a container."""
    ((t, x),) = wire.items()
    if t in _INTS:
        return _int(x)
    if t in _STRINGS:
        return _string(x)
    if t == "Bool":
        return _TRUE if x else _FALSE
    if t == "Float":
        return _double(x)
    if t == "Option" and x is None:
        return _NULL
    return None


def _size(n: int) -> int:
    return 1 if n <= 0xFF else 2 if n <= 0xFFFF else 3 if n <= 0xFFFFFF else 4


_META_CACHE: dict[tuple[str, ...], bytes] = {}
_META_CACHE_MAX: Final = 4096


def _metadata(keys: dict[str, int]) -> bytes:
    """The metadata buffer of ``keys`` (in id order); events of one shape share it, so it is cached."""
    shape = tuple(keys)
    found = _META_CACHE.get(shape)
    if found is not None:
        return found
    names = [k.encode() for k in shape]
    offsets = [0]
    for n in names:
        offsets.append(offsets[-1] + len(n))
    size = _size(max(offsets[-1], len(names)))
    head = bytes([1 | ((size - 1) << 6)])
    out = b"".join([head, _uints([len(names)], size), _uints(offsets, size), *names])
    if len(_META_CACHE) >= _META_CACHE_MAX:
        _META_CACHE.clear()
    _META_CACHE[shape] = out
    return out


def _uints(values: list[int], size: int) -> bytes:
    if size == 1:
        return bytes(values)
    return b"".join(v.to_bytes(size, "little") for v in values)


_SMALL: Final = {x: b"\x0c" + x.to_bytes(1, "little", signed=True) for x in range(-0x80, 0x80)}


def _int(x: int) -> bytes:
    small = _SMALL.get(x)
    if small is not None:
        return small
    if -0x8000 <= x <= 0x7FFF:
        return b"\x10" + x.to_bytes(2, "little", signed=True)
    if -0x80000000 <= x <= 0x7FFFFFFF:
        return b"\x14" + x.to_bytes(4, "little", signed=True)
    if -(2**63) <= x < 2**63:
        return b"\x18" + x.to_bytes(8, "little", signed=True)
    if -_MAX_DECIMAL16 < x < _MAX_DECIMAL16:
        return bytes([_DECIMAL16, 0]) + x.to_bytes(16, "little", signed=True)
    try:
        return _double(float(x))
    except OverflowError:  # past a double (about 309 digits): an infinite double, so null
        return _NULL


def _double(x: float) -> bytes:
    if not math.isfinite(x):
        return _NULL
    return bytes([_DOUBLE]) + struct.pack("<d", x)


def _string(s: str) -> bytes:
    b = s.encode()
    n = len(b)
    if n < 64:
        return bytes([(n << 2) | 1]) + b
    return bytes([_LONG_STR]) + n.to_bytes(4, "little") + b


def _value(wire: Any, keys: dict[str, int]) -> bytes:
    ((t, x),) = wire.items()
    if t in _INTS:
        return _int(x)
    if t in _STRINGS:
        return _string(x)
    if t == "Map":
        return _object({k: _value(v, keys) for k, v in x}, keys)
    if t == "Bool":
        return _TRUE if x else _FALSE
    if t == "Float":
        return _double(x)
    if t == "Array" or t == "Set":
        return _array([_value(v, keys) for v in x])
    if t == "Option":
        return _NULL if x is None else _value(x, keys)
    if t == "Floats":
        return _array([_double(v) for v in x])
    if t == "Bytes" or t == "Nats":
        return _array([_int(v) for v in x])
    if t == "Class":
        return _object({p["name"]: _value(p["value"], keys) for p in x}, keys)
    if t == "ValueMap":
        return _array([_array([_value(k, keys), _value(v, keys)]) for k, v in x])
    raise ValueError(f"unknown ICRC-16 variant {t!r}")


def _object(fields: dict[str, bytes], keys: dict[str, int]) -> bytes:
    names = sorted(fields)  # field ids in the order of their names (code points = UTF-8 byte order)
    ids = [keys.setdefault(k, len(keys)) for k in names]
    values = [fields[k] for k in names]
    n = len(names)
    large = n > 0xFF
    id_size = _size(len(keys) - 1)
    return _container(values, (int(large) << 4) | ((id_size - 1) << 2), 2, n, large, _uints(ids, id_size))


def _array(values: list[bytes]) -> bytes:
    n = len(values)
    large = n > 0xFF
    return _container(values, int(large) << 2, 3, n, large, b"")


def _container(values: list[bytes], flags: int, basic: int, n: int, large: bool, ids: bytes) -> bytes:
    offsets = [0]
    total = 0
    for v in values:
        total += len(v)
        offsets.append(total)
    off_size = _size(total)
    head = (flags | (off_size - 1)) << 2 | basic
    count = n.to_bytes(4, "little") if large else bytes([n])
    return b"".join([bytes([head]), count, ids, _uints(offsets, off_size), *values])
