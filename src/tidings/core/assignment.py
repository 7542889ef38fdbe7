"""Which broadcaster does what, when several share one store (docs/scaling.md).

Work is assigned by rendezvous (highest random weight) hashing over the live
broadcasters: every broadcaster computes the same answer from the same list, with no
coordinator, and when one joins or leaves only the work it takes or held moves. The
answer is a wish: a broadcaster acts on a unit of work only while it holds that unit's
lease in the store, so two never deliver one subscription at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["LEADER", "owner", "publication_key", "subscription_key"]

LEADER = "leader"
"""The lease of the singleton jobs (retention)."""


def subscription_key(sub_id: int) -> str:
    """The lease of one subscription's delivery."""
    return f"sub:{sub_id}"


def publication_key(namespace: str) -> str:
    """The unit a publication is assigned by (its owner is where the SDK should publish)."""
    return f"pub:{namespace}"


def _weight(node: str, key: str) -> bytes:
    return hashlib.blake2b(f"{node}\x00{key}".encode(), digest_size=8).digest()


def owner(key: str, nodes: Iterable[str]) -> str | None:
    """The broadcaster among ``nodes`` that ``key`` is assigned to; None if there is none."""
    best: tuple[bytes, str] | None = None
    for node in nodes:
        w = (_weight(node, key), node)
        if best is None or w > best:
            best = w
    return None if best is None else best[1]
