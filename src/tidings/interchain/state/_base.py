"""What the distributor keeps durably, behind one small interface.

Four things, all keyed by name:

* **sets** of global ids: ``publishedEvents:<network>`` (the event is on that network)
  and ``notifiedEvents:<subscription>`` (that subscription has been notified of it);
* **outboxes**: per target (``net:<network>`` or ``sub:<subscription>``), the payloads
  still to send, in order;
* **subscriptions** of interest, by id;
* **cursors**: how far the distributor has read a network (Redis stream id, ...).

A fifth, ``deliveredEvents:<subscription>``, records what each consumer acknowledged;
it is written by :meth:`State.pop` in the same atomic step that removes the item from
the outbox.

The one primitive that makes replication exactly-once per target is :meth:`State.mark`:
add a global id to a set and, *only if it was not there*, append a payload to an
outbox, atomically (Redis: one Lua script around SADD's answer; SQLite: one
transaction around INSERT OR IGNORE's changed-row count). Two networks delivering the
same event at the same moment both call it; exactly one sees "added" and enqueues.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import msgspec

__all__ = ["Mark", "State", "delivered_set", "notified_set", "published_set"]


def published_set(network: str) -> str:
    return f"publishedEvents:{network}"


def notified_set(subscription: str) -> str:
    return f"notifiedEvents:{subscription}"


def delivered_set(subscription: str) -> str:
    """The global ids the subscription's consumer has acknowledged (answered 2xx to)."""
    return f"deliveredEvents:{subscription}"


class Mark(msgspec.Struct, frozen=True):
    """Add ``gid`` to set ``set_name``; if newly added and ``outbox`` is given, append ``payload`` to it.

    A msgspec Struct rather than a frozen dataclass: one is made per target per event on
    the live path, and a Struct is built in a tenth of the time
    (docs/benchmarks/history/2026-11-25-distributor-dedup.md)."""

    set_name: str
    gid: str
    outbox: str | None = None
    payload: bytes = b""


class State(ABC):
    """The distributor's durable state. Implementations: Redis (shared, the production
    choice) and SQLite (the embedded default, one distributor process)."""

    async def open(self) -> None:  # noqa: B027 (optional hook)
        """Connect or create; called once before use."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release connections."""

    @abstractmethod
    async def mark(self, marks: Sequence[Mark]) -> list[bool]:
        """Apply each mark atomically (each on its own); True where the id was newly added."""

    @abstractmethod
    async def members(self, set_name: str) -> set[str]:
        """Every global id in a set (reports and reconciliation)."""

    @abstractmethod
    async def peek(self, outbox: str, n: int) -> list[bytes]:
        """The first ``n`` payloads of an outbox, oldest first, without removing them."""

    @abstractmethod
    async def pop(self, outbox: str, sent: Sequence[bytes], *, record: str | None = None,
                  gids: Sequence[str] = ()) -> int:
        """After sending: remove the leading payloads of ``outbox`` that are ``sent``, in
        order, stopping at the first that differs (someone else removed it already), and
        in the same atomic step add the ``gids`` of the removed ones (``gids[i]`` belongs
        to ``sent[i]``) to the set ``record``. Returns how many were removed.

        This is the delivery record: an item is either still at the head (it will be sent
        again, with the same idempotency key) or gone and recorded, never one without the
        other, whatever moment the process dies at."""

    @abstractmethod
    async def outbox_size(self, outbox: str) -> int: ...

    @abstractmethod
    async def save_subscription(self, sub_id: str, body: bytes) -> bool:
        """Keep a subscription; False if ``sub_id`` was already kept."""

    @abstractmethod
    async def subscriptions(self) -> list[tuple[str, bytes]]:
        """Every kept subscription, ``(id, body)``."""

    @abstractmethod
    async def get_cursor(self, name: str) -> str | None: ...

    @abstractmethod
    async def set_cursor(self, name: str, value: str) -> None: ...
