"""JSONPath-style rendering of paths: ``$``, ``$.items[2].name``, ``$['odd key']``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

__all__ = ["instance_path", "step"]

_PLAIN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def step(key: str | int) -> str:
    """One step: ``[2]`` for an index, ``.name`` for a plain key, ``['a b']`` otherwise."""
    if isinstance(key, int):
        return f"[{key}]"
    if _PLAIN.match(key):
        return "." + key
    return "[" + repr(key) + "]"


def instance_path(steps: Iterable[str | int]) -> str:
    return "$" + "".join(map(step, steps))
