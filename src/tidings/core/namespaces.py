"""Namespace names and subscription patterns: the one grammar (docs/semantics.md).

```
namespace := name ( "." name )*               at most 255 characters
pattern   := segment ( "." segment )* [ ".**" ]  |  "**"
segment   := name | "*"
name      := [A-Za-z0-9_:-]+                    ASCII only
```

Nothing else is a namespace or a pattern: no empty segment, no whitespace or line end,
no ``*`` inside a name (``ord*``), no ``**`` but as the last segment. ``*`` matches exactly
one segment, a final ``**`` one or more:

* ``com.example.orders.*`` matches ``com.example.orders.created``, not
  ``com.example.orders`` nor ``com.example.orders.eu.created``;
* ``com.*.orders`` matches ``com.example.orders``;
* ``com.example.**`` matches ``com.example.orders`` and ``com.example.orders.eu.created``.

A pattern made only of wildcards (``*``, ``**``, ``*.*``, ``*.**``...) names no segment:
it covers every namespace (of its depth, or at all). Such a *catch-all* pattern is
grammatical, but only an admin may subscribe with one (:func:`is_catch_all`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = [
    "MAX_NAMESPACE", "SYSTEM_PREFIXES", "is_catch_all", "is_pattern", "is_system", "matcher", "namespace_error",
    "pattern_error", "system_namespace",
]

SYSTEM_PREFIXES = ("icrc72:broadcaster:sys:", "icrc72:publisher:sys:", "icrc72:subscriber:sys:")
"""ICRC-72's reserved control-plane namespaces: the service's own, never a principal's
(nobody registers them; only admins subscribe to them, by name; no pattern covers them)."""

MAX_NAMESPACE = 255
_SEGMENT = r"[A-Za-z0-9_:\-]+"
_NAMESPACE = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*", re.ASCII)
_PATTERN = re.compile(rf"(?:{_SEGMENT}|\*)(?:\.(?:{_SEGMENT}|\*))*(?:\.\*\*)?|\*\*", re.ASCII)


def namespace_error(ns: str) -> str | None:
    """Why ``ns`` is not a valid namespace, or None if it is."""
    if not ns:
        return "a namespace must not be empty"
    if len(ns) > MAX_NAMESPACE:
        return f"a namespace has at most {MAX_NAMESPACE} characters"
    if not _NAMESPACE.fullmatch(ns):
        return f"invalid namespace {ns!r}: use dot-separated segments of letters, digits, '_', '-' and ':'"
    return None


def is_pattern(text: str) -> bool:
    return "*" in text


def pattern_error(pattern: str) -> str | None:
    """Why ``pattern`` is neither a namespace nor a valid pattern, or None."""
    if not is_pattern(pattern):
        return namespace_error(pattern)
    if len(pattern) > MAX_NAMESPACE:
        return f"a namespace pattern has at most {MAX_NAMESPACE} characters"
    if not _PATTERN.fullmatch(pattern):
        return (
            f"invalid pattern {pattern!r}: dot-separated segments, each a name, '*' (one segment) "
            "or, last, '**' (one or more segments)"
        )
    return None


def is_system(namespace: str) -> bool:
    """Whether ``namespace`` (or a pattern's text) is in a reserved control-plane namespace."""
    return namespace.startswith(SYSTEM_PREFIXES)


def system_namespace(broadcaster: str) -> str:
    """The control-plane namespace of a broadcaster: ``icrc72:broadcaster:sys:<id>``, with
    characters a namespace cannot hold replaced by ``-``."""
    name = re.sub(r"[^A-Za-z0-9_:.\-]|\.(?=\.)|^\.|\.$", "-", broadcaster) or "-"
    return (SYSTEM_PREFIXES[0] + name)[:MAX_NAMESPACE].rstrip(".")


def is_catch_all(pattern: str) -> bool:
    """Whether a valid pattern names no segment (only ``*`` and ``**``): it covers every
    namespace, or every one of a depth."""
    return is_pattern(pattern) and all(seg in ("*", "**") for seg in pattern.split("."))


def matcher(pattern: str) -> Callable[[str], bool]:
    """A test of namespaces against a valid namespace or pattern."""
    if not is_pattern(pattern):
        return pattern.__eq__
    parts = []
    for seg in pattern.split("."):
        if seg == "*":
            parts.append(_SEGMENT)
        elif seg == "**":
            parts.append(rf"{_SEGMENT}(?:\.{_SEGMENT})*")
        else:
            parts.append(re.escape(seg))
    rx = re.compile(r"\.".join(parts), re.ASCII)
    return lambda ns: rx.fullmatch(ns) is not None
