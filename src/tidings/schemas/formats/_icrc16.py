"""ICRC-16 wire values to the instances schemas describe (the mapping is in the package docstring).

Runs on every published event, so each converter is a closure over one dispatch table:
no objects are built beyond the converted instance itself. Inputs have already passed
``tidings.core.values.check``, so malformed wire values are not handled here.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, Final

__all__ = ["to_avro_instance", "to_json_instance"]

Converter = Callable[[Any], Any]

_AS_IS: Final = frozenset(
    {
        "Nat", "Int", "Text", "Bool", "Principal",
        "Nat8", "Nat16", "Nat32", "Nat64", "Int8", "Int16", "Int32", "Int64",
    }
)  # fmt: skip


def _converter(blob: Converter, byte_list: Converter) -> Converter:
    # Containers unpack their items inline rather than calling convert() on each: scalars
    # are most items, and the saved call is a quarter of the conversion time.
    def convert(value: Any) -> Any:
        ((tag, x),) = value.items()
        if tag in _AS_IS:
            return x
        return table[tag](x)

    def array(x: list[Any]) -> list[Any]:
        out = []
        for item in x:
            ((tag, y),) = item.items()
            out.append(y if tag in _AS_IS else table[tag](y))
        return out

    def map_(x: list[list[Any]]) -> dict[str, Any]:
        out = {}
        for k, v in x:  # a repeated key keeps its last value, as tidings.core.values.map_get reads it
            ((tag, y),) = v.items()
            out[k] = y if tag in _AS_IS else table[tag](y)
        return out

    def class_(x: list[dict[str, Any]]) -> dict[str, Any]:
        out = {}
        for prop in x:
            ((tag, y),) = prop["value"].items()
            out[prop["name"]] = y if tag in _AS_IS else table[tag](y)
        return out

    table: dict[str, Converter] = {
        "Float": float,
        "Blob": blob,
        "Bytes": byte_list,
        "Array": array,
        "Set": array,
        "Nats": list,
        "Floats": lambda x: [float(f) for f in x],
        "Map": map_,
        "Class": class_,
        "ValueMap": lambda x: [[convert(k), convert(v)] for k, v in x],
        "Option": lambda x: None if x is None else convert(x),
    }
    return convert


def _b64_of_list(x: list[int]) -> str:
    return base64.b64encode(bytes(x)).decode("ascii")


to_json_instance: Final = _converter(blob=lambda x: x, byte_list=_b64_of_list)
"""Wire value → JSON instance: Blob stays the base64 text it is on the wire, Bytes becomes one."""

to_avro_instance: Final = _converter(blob=base64.b64decode, byte_list=bytes)
"""Wire value → Avro datum: Blob and Bytes both become ``bytes``."""
