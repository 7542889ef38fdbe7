"""Plain Python or :class:`Value` to the wire form the API takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.values import Value, from_python


def wire(x: Any) -> Any:
    """The wire form of a Value, or of a plain Python value converted with ``from_python``."""
    return (x if isinstance(x, Value) else from_python(x)).to_wire()


def wire_pairs(m: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    return [(k, wire(v)) for k, v in (m or {}).items()]


def wire_changes(m: Mapping[str, Any]) -> list[tuple[str, Any | None]]:
    """Config changes: a value sets the key, ``None`` removes it."""
    return [(k, None if v is None else wire(v)) for k, v in m.items()]
