"""Namespace names.

A namespace is dot-separated segments of letters, digits, ``_``, ``-`` and ``:``, at most
255 characters in all (``com.example.orders``). ``*`` is not allowed in a namespace: it
is kept for subscription patterns.
"""

from __future__ import annotations

import re

__all__ = ["MAX_NAMESPACE", "namespace_error"]

MAX_NAMESPACE = 255
_SEGMENT = r"[A-Za-z0-9_:\-]+"
_NAMESPACE = re.compile(rf"^{_SEGMENT}(\.{_SEGMENT})*$")


def namespace_error(ns: str) -> str | None:
    """Why ``ns`` is not a valid namespace, or None if it is."""
    if not ns:
        return "a namespace must not be empty"
    if len(ns) > MAX_NAMESPACE:
        return f"a namespace has at most {MAX_NAMESPACE} characters"
    if not _NAMESPACE.match(ns):
        return (
            f"invalid namespace {ns!r}: use dot-separated segments of letters, digits, '_', '-' and ':'"
        )
    return None
