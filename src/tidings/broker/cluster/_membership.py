"""What this broadcaster knows of the others: who is alive, and which subscriptions it
delivers (the leases it holds). ``Cluster`` keeps it up to date; delivery, replays and
the broadcaster queries read it.

A lease is acted on only while this process's own clock says it is surely still held:
``valid_until`` is counted on the monotonic clock from when the claim was *asked*, less
a margin, while the store times the lease from when it ran the claim, which is later
(Chubby's conservative local lease, REFERENCE §11). So a broadcaster that was stopped,
or cut off from the store, stops pushing before anyone else can take its leases; and
every write it makes for that work carries the lease's epoch (``fence``), which the
store checks, for the instant a stopped process resumes at.

On a store that only one process uses (SQLite, memory) this broadcaster is the only one
and delivers every subscription: ``Membership.alone``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ...core.assignment import owner, publication_key, subscription_key
from ...core.namespaces import is_system, system_namespace
from ...store import BroadcasterRecord, Fence

__all__ = ["Membership"]


class Membership:
    def __init__(
        self, me: str, url: str, *, shared: bool, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.me = me
        self.url = url
        self.shared = shared
        """Whether other broadcasters may share the store (then delivery needs leases)."""
        self.nodes: list[BroadcasterRecord] = []
        """The live broadcasters at the last heartbeat, by id."""
        self.held: set[int] = set()
        """The subscriptions whose lease this broadcaster holds (``shared`` only)."""
        self.nodes_read_at = 0.0
        """When ``nodes`` was read, on ``monotonic``."""
        self.epochs: dict[int, int] = {}
        """Each held subscription's lease epoch, the fencing token its writes carry."""
        self.valid_until = 0.0
        """On ``monotonic``: until when every lease held is surely still this process's."""
        self._monotonic = monotonic
        self.reassess = asyncio.Event()
        """Set when subscriptions appeared: the next heartbeat comes now rather than on
        its timer, so a new subscription is delivered at once, not up to a beat later."""

    @classmethod
    def alone(cls, me: str, url: str = "") -> Membership:
        return cls(me, url, shared=False)

    def owns(self, sub_id: int) -> bool:
        """Whether this broadcaster delivers subscription ``sub_id`` now."""
        return not self.shared or sub_id in self.held

    def seen_within(self, node: BroadcasterRecord, seconds: float) -> bool:
        """Whether ``node``'s last heartbeat is at most ``seconds`` old now (by its age at
        this process's last heartbeat, plus the time since)."""
        if node.id == self.me:
            return True
        return node.seen_ms_ago / 1000 + (self._monotonic() - self.nodes_read_at) <= seconds

    def fence(self, sub_id: int) -> Fence | None:
        """The lease writes for ``sub_id``'s delivery are made under (None: no leases)."""
        if not self.shared:
            return None
        return Fence(subscription_key(sub_id), self.me, self.epochs.get(sub_id, -1))

    def may_act(self, sub_id: int) -> bool:
        """Whether this process may push ``sub_id`` now: it holds the lease and, by its
        own clock, nobody else can have taken it yet."""
        return not self.shared or (sub_id in self.held and self._monotonic() < self.valid_until)

    def acts_until(self, sub_id: int) -> float:
        """Until when, on ``monotonic``, this process may push ``sub_id`` (:meth:`may_act`):
        0 when it may not now; infinity alone."""
        if not self.shared:
            return float("inf")
        return self.valid_until if self.may_act(sub_id) else 0.0

    def lost(self, sub_id: int) -> None:
        """The store refused a write for ``sub_id`` under its fence: another holds the
        lease. Forget it now; the next heartbeat claims again what is this one's."""
        self.held.discard(sub_id)
        self.epochs.pop(sub_id, None)
        self.reassess.set()

    async def until_may_act(self, sub_id: int) -> None:
        """Wait until :meth:`may_act` (a renewal comes), or be cancelled (the lease went
        to another: ``Cluster`` stops the worker)."""
        while not self.may_act(sub_id):
            await asyncio.sleep(0.05)

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
