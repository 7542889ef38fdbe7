"""The integers the stores keep: signed 64 bits.

JSON allows any integer and Python decodes any; SQLite and PostgreSQL refuse one past
these bounds with an error of their own. So every integer a request hands on toward
the store (an id, a count, a time, an amount) is held to them where the request is
decoded, by :func:`out_of_range`, whichever face it came through (HTTP methods and
``/v1/stream`` messages).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["INT64_MAX", "INT64_MIN", "out_of_range", "range_message"]

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def out_of_range(value: Any, path: str = "$") -> str | None:
    """The path of the first integer outside int64 in a decoded argument, or None.

    Dicts are not entered: on the wire they are ICRC-16 values, whose Nat and Int are
    unbounded by the standard and stored as JSON text, never as SQL integers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return path if not INT64_MIN <= value <= INT64_MAX else None
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            found = out_of_range(getattr(value, name), f"{path}.{name}")
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = out_of_range(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def range_message(where: str) -> str:
    """What a refusal of the integer at ``where`` says."""
    return (f"the integer at {where} is out of range: ids, counts, times and amounts are at most {INT64_MAX} "
            f"(and at least {INT64_MIN})")
