"""Namespace names and subscription patterns.

A namespace is dot-separated segments of letters, digits, ``_``, ``-`` and ``:``, at most
255 characters in all (``com.example.orders``).

A subscription may name a *pattern* instead: a namespace in which a segment is ``*``
(exactly one segment) or the last segment is ``**`` (one or more segments):

* ``com.example.orders.*`` matches ``com.example.orders.created``, not
  ``com.example.orders`` nor ``com.example.orders.eu.created``;
* ``com.*.orders`` matches ``com.example.orders``;
* ``com.example.**`` matches ``com.example.orders`` and ``com.example.orders.eu.created``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["MAX_NAMESPACE", "is_pattern", "matcher", "namespace_error", "pattern_error"]

MAX_NAMESPACE = 255
_SEGMENT = r"[A-Za-z0-9_:\-]+"
_NAMESPACE = re.compile(rf"^{_SEGMENT}(\.{_SEGMENT})*$")
_SEGMENT_RE = re.compile(rf"^{_SEGMENT}$")


def namespace_error(ns: str) -> str | None:
    """Why ``ns`` is not a valid namespace, or None if it is."""
    if not ns:
        return "a namespace must not be empty"
    if len(ns) > MAX_NAMESPACE:
        return f"a namespace has at most {MAX_NAMESPACE} characters"
    if not _NAMESPACE.match(ns):
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
    segments = pattern.split(".")
    for i, seg in enumerate(segments):
        if seg == "*" or (seg == "**" and i == len(segments) - 1):
            continue
        if seg == "**":
            return f"invalid pattern {pattern!r}: '**' may only be the last segment"
        if not _SEGMENT_RE.match(seg):
            return (
                f"invalid pattern {pattern!r}: segments are names, '*' (one segment) "
                "or a final '**' (one or more segments)"
            )
    return None


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
    rx = re.compile(r"\.".join(parts) + r"\Z")
    return lambda ns: rx.match(ns) is not None
