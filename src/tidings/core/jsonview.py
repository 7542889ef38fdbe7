"""The JSON view of an ICRC-16 value: what filters navigate (docs/filters.md).

Map and Class become objects (the last of a repeated key counts), ValueMap an array
of ``[key, value]`` arrays, Array, Set, Bytes, Nats and Floats arrays, every number a
JSON number, Text, Principal and Blob (its base64 text, as on the wire) strings, and
Option ``null`` or the view of its value. The view is lossy by design: it is for
querying, next to the lossless wire form.

The Spark pipeline stores :func:`json_view_bytes` of each event's data in a
``VARIANT`` column (``parse_json``); the Python predicate never builds the view, it
reads the wire form with the same meaning (``tidings.core.filters``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["json_view", "json_view_bytes"]

_AS_IS: Final = frozenset(
    {
        "Nat", "Int", "Float", "Nat8", "Nat16", "Nat32", "Nat64", "Int8", "Int16", "Int32", "Int64",
        "Text", "Principal", "Blob", "Bool",
    }
)
_LISTS: Final = frozenset({"Bytes", "Nats", "Floats"})
_encode: Final = msgspec.json.Encoder().encode


def json_view(wire: Any) -> Any:
    """The JSON view of a well-formed wire value, as plain JSON-compatible Python."""
    ((t, x),) = wire.items()
    if t in _AS_IS:
        return x
    if t == "Map":
        return {k: json_view(v) for k, v in x}
    if t == "Array" or t == "Set":
        return [json_view(v) for v in x]
    if t == "Option":
        return None if x is None else json_view(x)
    if t in _LISTS:
        return list(x)
    if t == "Class":
        return {p["name"]: json_view(p["value"]) for p in x}
    if t == "ValueMap":
        return [[json_view(k), json_view(v)] for k, v in x]
    raise ValueError(f"unknown ICRC-16 variant {t!r}")


def json_view_bytes(wire: Any) -> bytes:
    """The JSON view encoded as JSON text, ready for Spark's ``parse_json``."""
    return _encode(json_view(wire))
