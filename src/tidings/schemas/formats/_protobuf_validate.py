"""Checking a JSON instance against a Protobuf message, compiled once per message.

The rules are protobuf's JSON mapping (what ``json_format.ParseDict`` accepts), checked
by closures over the descriptors instead of building a message, which is several times
faster; the well-known ``google.protobuf`` types (``Timestamp``, ``Struct``, wrappers, ...)
have special JSON forms and are handed to ``ParseDict`` itself. A failure is
``(reason, path)`` with the path steps innermost first, as ``_avro_validate`` does.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format, message_factory

__all__ = ["Check", "compile_message"]

Failure = tuple[str, list[str | int]]
Check = Callable[[Any], Failure | None]

_T_DOUBLE, _T_FLOAT, _T_BOOL, _T_STRING, _T_GROUP, _T_MESSAGE, _T_BYTES, _T_ENUM = 1, 2, 8, 9, 10, 11, 12, 14
_INT_RANGES = {
    5: (-(2**31), 2**31 - 1), 17: (-(2**31), 2**31 - 1), 15: (-(2**31), 2**31 - 1),  # int32 sint32 sfixed32
    3: (-(2**63), 2**63 - 1), 18: (-(2**63), 2**63 - 1), 16: (-(2**63), 2**63 - 1),  # int64 sint64 sfixed64
    13: (0, 2**32 - 1), 7: (0, 2**32 - 1), 4: (0, 2**64 - 1), 6: (0, 2**64 - 1),  # uint32 fixed32 uint64 fixed64
}
_FLOAT_MAX = 3.4028234663852886e38
_SPECIAL_FLOATS = frozenset({"NaN", "Infinity", "-Infinity"})


def _fail(reason: str) -> Failure:
    return reason, []


def _integer(lo: int, hi: int) -> Check:
    def check(v: Any) -> Failure | None:
        if isinstance(v, bool):
            return _fail(f"{v!r} is not an integer")
        if isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                return _fail(f"{v!r} is not an integer")
        elif isinstance(v, float):
            if not v.is_integer():
                return _fail(f"{v!r} is not an integer")
            v = int(v)
        elif not isinstance(v, int):
            return _fail(f"{v!r} is not an integer")
        return None if lo <= v <= hi else _fail(f"{v} is out of range [{lo}, {hi}]")
    return check


def _number(single: bool) -> Check:
    def check(v: Any) -> Failure | None:
        if isinstance(v, str):  # the JSON mapping takes numbers written as strings too
            if v in _SPECIAL_FLOATS:
                return None
            try:
                x = float(v)
            except ValueError:
                return _fail(f"{v!r} is not a number")
            if math.isnan(x):
                return _fail(f"{v!r} is not a number (write NaN)")
            v = x
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return _fail(f"{v!r} is not a number")
        if single and math.isfinite(v) and abs(v) > _FLOAT_MAX:
            return _fail(f"{v!r} is too large for a float")
        return None
    return check


def _of_type(kind: type, what: str) -> Check:
    def check(v: Any) -> Failure | None:
        return None if isinstance(v, kind) and not (kind is int and isinstance(v, bool)) else _fail(
            f"{v!r} is not {what}")
    return check


def _bytes(v: Any) -> Failure | None:
    if not isinstance(v, str):
        return _fail(f"{v!r} is not base64 bytes")
    try:
        base64.b64decode(v + "=" * (-len(v) % 4), altchars=b"-_" if ("-" in v or "_" in v) else None, validate=True)
    except (binascii.Error, ValueError):
        return _fail(f"{v[:40]!r} is not base64")
    return None


def _enum(desc: Any, closed: bool) -> Check:
    names = frozenset(desc.values_by_name)
    numbers = frozenset(desc.values_by_number)
    in_range = _integer(-(2**31), 2**31 - 1)

    def check(v: Any) -> Failure | None:
        if isinstance(v, str) and v in names:
            return None
        bad = in_range(v)  # a number, also written as a string
        if bad is not None and isinstance(v, str):
            return _fail(f"{v!r} is not a value of enum {desc.full_name}")
        if bad is not None or not closed or int(float(v)) in numbers:
            return bad
        return _fail(f"{v} is not a value of enum {desc.full_name}")
    return check


class _Compiler:
    def __init__(self) -> None:
        self.messages: dict[str, Check] = {}

    def scalar(self, f: Any) -> Check:
        t = f.type
        if t in _INT_RANGES:
            return _integer(*_INT_RANGES[t])
        if t in (_T_DOUBLE, _T_FLOAT):
            return _number(t == _T_FLOAT)
        if t == _T_BOOL:
            return _of_type(bool, "a boolean")
        if t == _T_STRING:
            return _of_type(str, "a string")
        if t == _T_BYTES:
            return _bytes
        if t == _T_ENUM:
            return _enum(f.enum_type, bool(f.enum_type.is_closed))
        return self.message(f.message_type)

    def single(self, f: Any) -> Check:
        if f.type in (_T_MESSAGE, _T_GROUP):
            return self.message(f.message_type)
        return self.scalar(f)

    def field(self, f: Any) -> Check:
        if f.type == _T_MESSAGE and f.message_type.GetOptions().map_entry:
            key_f, value_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            key, value = self.scalar(key_f), self.single(value_f)
            key_is_bool = key_f.type == _T_BOOL

            def check_map(v: Any) -> Failure | None:
                if not isinstance(v, dict):
                    return _fail(f"{_short(v)} is not an object (a map)")
                for k, x in v.items():
                    bad = (None if k in ("true", "false") else _fail(f"map key {k!r} is not a boolean")) \
                        if key_is_bool else key(k)
                    if bad is None and x is None:
                        bad = _fail("a map value cannot be null")
                    bad = bad or value(x)
                    if bad is not None:
                        bad[1].append(str(k))
                        return bad
                return None
            return check_map
        item = self.single(f)
        if not f.is_repeated:
            return item

        def check_list(v: Any) -> Failure | None:
            if not isinstance(v, list):
                return _fail(f"{_short(v)} is not an array")
            for i, x in enumerate(v):
                bad = _fail("an array item cannot be null") if x is None else item(x)
                if bad is not None:
                    bad[1].append(i)
                    return bad
            return None
        return check_list

    def message(self, desc: Any) -> Check:
        name = desc.full_name
        if name in self.messages:
            return lambda v: self.messages[name](v)  # recursion: compiled below
        if name.startswith("google.protobuf."):
            cls = message_factory.GetMessageClass(desc)

            def well_known(v: Any) -> Failure | None:
                try:
                    json_format.ParseDict(v, cls())
                except json_format.ParseError as e:
                    return _fail(str(e))
                return None
            self.messages[name] = well_known
            return well_known
        self.messages[name] = lambda v: None  # placeholder while its fields compile
        fields: dict[str, tuple[str, Check, str | None]] = {}
        for f in desc.fields:
            o = f.containing_oneof
            oneof = None if o is None or (len(o.fields) == 1 and o.name == f"_{f.name}") else o.name
            entry = (f.name, self.field(f), oneof)
            fields[f.name] = fields[f.json_name] = entry

        def check(v: Any) -> Failure | None:
            if not isinstance(v, dict):
                return _fail(f"{_short(v)} is not an object (message {name})")
            seen: dict[str, str] = {}
            for k, x in v.items():
                entry = fields.get(k)
                if entry is None:
                    return _fail(f"message {name} has no field {k!r}")
                if x is None:
                    continue
                fname, field_check, oneof = entry
                if oneof is not None:
                    if oneof in seen and seen[oneof] != fname:
                        return _fail(f"fields {seen[oneof]!r} and {fname!r} are both set in oneof {oneof!r}")
                    seen[oneof] = fname
                bad = field_check(x)
                if bad is not None:
                    bad[1].append(k)
                    return bad
            return None
        self.messages[name] = check
        return check


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def compile_message(desc: Any) -> Check:
    """A check of a JSON instance against message ``desc`` (a ``Descriptor``)."""
    return _Compiler().message(desc)
