"""The cluster concern: broadcasters sharing one store, their leases, and change signals.

Only a store that several processes share offers it (PostgreSQL); a broker on another
store is the only broadcaster there is (docs/scaling.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence

import msgspec

from ._clocked import Clocked
from ._records import NewEvent, Stat, StoredEvent

__all__ = [
    "CHANGE_LOG",
    "CHANGE_LOST",
    "CHANGE_REGISTRY",
    "BroadcasterRecord",
    "ClusterStore",
    "Fence",
    "LeaseRecord",
]

CHANGE_LOG = "log"
"""Events were appended by another process."""
CHANGE_REGISTRY = "registry"
"""Another process changed publications, publishers, subscriptions or their secrets;
the payload's argument names what (``sub:<id>``, ``pub:<namespace>``), or is empty."""


CHANGE_LOST = "lost"
"""The connection signals arrive on closed: signals may have been missed since."""


class BroadcasterRecord(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    url: str
    started_at: int
    """Unix milliseconds."""
    seen_ms_ago: int
    """Milliseconds since its last heartbeat, by the database's clock."""


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    owner: str
    expires_in_ms: int
    """Negative once lapsed."""
    epoch: int = 0
    """The fencing token: rises each time the lease passes to another owner."""


class Fence(msgspec.Struct, frozen=True):
    """The lease a write for leased work is made under. A store shared by several
    processes refuses the write (``LeaseLost``) unless the lease still has this owner and
    epoch; a store only one process uses has no leases and takes every write."""

    key: str
    owner: str
    epoch: int


class ClusterStore(Clocked, ABC):
    """Membership and leases, timed by the store's clock so that the broadcasters' clocks
    need not agree."""

    @abstractmethod
    async def heartbeat(self, node: str, url: str, *, forget_after_s: float) -> list[BroadcasterRecord]:
        """Record ``node`` as alive now and return every broadcaster seen within
        ``forget_after_s`` seconds (older rows are dropped), by id. Also reads the
        database's clock into :attr:`clock` (``Clock.observe``): the members' one clock."""

    @abstractmethod
    async def leave(self, node: str) -> None:
        """``node`` stops: its row and its leases go, so others take over at once."""

    @abstractmethod
    async def claim_leases(self, owner: str, keys: Sequence[str], ttl_s: float) -> dict[str, int]:
        """Take or renew, for ``ttl_s`` seconds from when the store runs the claim, each
        key whose lease is free, lapsed or already ``owner``'s; return the keys ``owner``
        holds now, each with its epoch (the same on a renewal, a new and higher one when
        the lease changes owner)."""

    @abstractmethod
    async def release_leases(self, owner: str, keys: Sequence[str]) -> None:
        """Give up those of ``keys`` that ``owner`` holds."""

    @abstractmethod
    async def leases(self, prefix: str = "") -> list[LeaseRecord]:
        """Every lease whose key starts with ``prefix``, lapsed ones included, by key."""

    @abstractmethod
    async def append_relayed(
        self, events: Sequence[NewEvent], stats: Iterable[Stat], token: str | None
    ) -> list[StoredEvent]:
        """Append events another broadcaster forwarded, storing ``token`` with them in the
        same commit; refused if the token is stored already (withdrawn, or used)."""

    @abstractmethod
    async def withdraw_relay(self, token: str) -> list[StoredEvent] | None:
        """Make sure nobody stores a forwarded publish from now on: None if it was not
        stored (and never will be), else the events it was stored as."""

    @abstractmethod
    async def peer_secret(self, candidate: bytes) -> bytes:
        """The secret every broadcaster of this store shares (to sign what one sends
        another): the one stored, or ``candidate``, stored now, if there is none yet."""

    @abstractmethod
    async def listen(self, on_change: Callable[[str, str], None]) -> Callable[[], Awaitable[None]]:
        """Call ``on_change(kind, argument)`` for each change another process makes
        (``CHANGE_LOG``, ``CHANGE_REGISTRY``) until the returned coroutine function is
        awaited. Signals may be lost (a dropped connection): they are hints, and the
        broker also reads on a timer."""
