"""What this broadcaster knows of the others: who is alive, and which subscriptions it
delivers (the leases it holds). ``Cluster`` keeps it up to date; delivery, replays and
the broadcaster queries read it.

On a store that only one process uses (SQLite, memory) this broadcaster is the only one
and delivers every subscription: ``Membership.alone``.
"""

from __future__ import annotations

import asyncio

from ..core.assignment import owner, publication_key, subscription_key
from ..core.namespaces import is_system, system_namespace
from ..store import BroadcasterRecord

__all__ = ["Membership"]


class Membership:
    def __init__(self, me: str, url: str, *, shared: bool) -> None:
        self.me = me
        self.url = url
        self.shared = shared
        """Whether other broadcasters may share the store (then delivery needs leases)."""
        self.nodes: list[BroadcasterRecord] = []
        """The live broadcasters at the last heartbeat, by id."""
        self.held: set[int] = set()
        """The subscriptions whose lease this broadcaster holds (``shared`` only)."""
        self.reassess = asyncio.Event()
        """Set when subscriptions appeared: the next heartbeat comes now rather than on
        its timer, so a new subscription is delivered at once, not up to a beat later."""

    @classmethod
    def alone(cls, me: str, url: str = "") -> Membership:
        return cls(me, url, shared=False)

    def owns(self, sub_id: int) -> bool:
        """Whether this broadcaster delivers subscription ``sub_id`` now."""
        return not self.shared or sub_id in self.held

    def live_ids(self) -> list[str]:
        return [n.id for n in self.nodes] if self.shared else [self.me]

    def publication_owner(self, namespace: str) -> str:
        """The broadcaster a publication is assigned to (where the SDK should publish); a
        broadcaster's control-plane namespace is its own."""
        live = self.live_ids()
        if is_system(namespace):
            mine = [n for n in live if system_namespace(n) == namespace]
            if mine:
                return mine[0]
        return owner(publication_key(namespace), live) or self.me

    def subscription_owner(self, sub_id: int) -> str | None:
        """The broadcaster a subscription is assigned to, by the live list (its lease may
        still be another's for up to one lease term)."""
        return owner(subscription_key(sub_id), self.live_ids())
