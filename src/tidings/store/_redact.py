"""Showing a store address without its password (its own module: the stores import it,
and ``_address`` imports the stores)."""

from __future__ import annotations

__all__ = ["redact_address"]


def redact_address(address: str) -> str:
    """``address`` with any password left out, for logs and messages."""
    scheme, sep, rest = address.partition("://")
    if not sep or "@" not in rest:
        return address
    auth, _, host = rest.rpartition("@")
    return f"{scheme}://{auth.split(':', 1)[0]}@{host}"
