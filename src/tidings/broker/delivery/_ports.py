"""What each of delivery's collaborators needs of the hub, as narrow Protocols.

``Delivery`` (``_delivery``) builds the workers and the router and calls the
confirmation, handing each itself; each of them sees it only as the Protocol here that
names what that collaborator reads or calls, never as the class. So no module of the
room imports ``_delivery`` back (not even for its annotations), a collaborator's needs
are written down where a reader finds them, and a test double supplies only those.
``mypy`` checks that ``Delivery`` fits each one where it hands itself over.

================  ==============================  =========================================
Protocol          who is given it                 what it reads or calls
================  ==============================  =========================================
``BehindHub``     ``_behind.Behind``              the store, counters, clock, task group
``RedeliveryHub`` ``_redelivery.Redelivery``      + settings, registry, clocks, the gate,
                                                  the events of pending notifications
``DirectHub``     ``_direct.DirectPush``          + settings, the ids set aside
``WorkerHub``     ``_worker.Worker``              all three, and the push, the tail, the
                                                  fence, the end of a subscription
``RouterHub``     ``_routing.Router``             the registry, decoded data, the running
                                                  workers (``Routable``), the hand-over
``ConfirmHub``    ``_confirmation.confirm``       the store, counters, clock, a worker
                                                  (``Confirmable``)
================  ==============================  =========================================
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from ...core.config import SubscriptionConfig
from ...settings import Settings
from ...store import Fence, PendingNotification, Store, StoredEvent, SubscriptionRecord
from ..metrics import Metrics
from ..registry import Registry
from ._notes import Gone, Note, Pushed, RoutedTo
from ._tail import Tail
from ._yielding import LiveFirst

__all__ = [
    "BehindHub",
    "ConfirmHub",
    "Confirmable",
    "DirectHub",
    "IdSource",
    "RedeliveryHub",
    "Routable",
    "RouterHub",
    "WorkerHub",
]


class _Hub(Protocol):
    """What every collaborator needs: where to write, what to count, and the time."""

    @property
    def store(self) -> Store: ...

    @property
    def metrics(self) -> Metrics: ...

    def now_ns(self) -> int: ...


class BehindHub(_Hub, Protocol):
    """What the writes behind the pushes need: and the task group they run in (None
    once shutting down)."""

    @property
    def task_group(self) -> asyncio.TaskGroup | None: ...


class RedeliveryHub(_Hub, Protocol):
    """What pushing again and giving up need: the subscription's config and the service's
    settings, the clocks, the gate replays and redrives wait at, and the events of
    pending notifications (a replayed one carries its own copy)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def gate(self) -> LiveFirst: ...

    def monotonic(self) -> float: ...

    async def events_of(self, notes: Sequence[PendingNotification], /) -> dict[int, StoredEvent]: ...


class IdSource(Protocol):
    """Notification ids set aside in the store (``_direct.NoteIds``)."""

    async def take(self, n: int, /) -> int: ...


class DirectHub(_Hub, Protocol):
    """What pushing first and recording once confirmed needs."""

    @property
    def settings(self) -> Settings: ...

    @property
    def note_ids(self) -> IdSource: ...


class WorkerHub(BehindHub, RedeliveryHub, DirectHub, Protocol):
    """What a subscription's worker needs, its three halves' needs included: the push,
    the tail and the store to read from, the lease it works under, the injected clocks
    and randomness, and the hub's end of a subscription (``Gone``)."""

    @property
    def tail(self) -> Tail: ...

    @property
    def draining(self) -> bool: ...

    def random(self) -> float: ...

    def sleep(self, seconds: float, /) -> Awaitable[None]: ...

    async def post(self, sub: SubscriptionRecord, batch: Sequence[Note], conf: SubscriptionConfig, /) -> Pushed: ...

    def fence_of(self, sub_id: int, /) -> Fence | None: ...

    def lease_lost(self, sub_id: int, /) -> None: ...

    def data_of(self, e: StoredEvent, /) -> Any: ...

    async def ended(self, sub_id: int, gone: Gone, /) -> None: ...


class Routable(Protocol):
    """A running worker as the router reads it, from the store's writing thread."""

    @property
    def sub(self) -> SubscriptionRecord: ...

    @property
    def started(self) -> bool: ...

    @property
    def scan(self) -> int: ...

    @property
    def generation(self) -> int: ...

    @property
    def opening(self) -> tuple[int, int] | None: ...

    def saturated(self, slack: int = 0, /) -> bool: ...

    def direct(self) -> bool: ...


class RouterHub(Protocol):
    """What routing at append needs: whom a namespace's events may go to, whether they
    pass, and where to hand the routes over (on the event loop)."""

    @property
    def registry(self) -> Registry: ...

    def wakeable(self, namespace: str, /) -> Sequence[Routable]: ...

    def data_of(self, e: StoredEvent, /) -> Any: ...

    def routed(self, routes: Sequence[RoutedTo], /) -> None: ...


class Confirmable(Protocol):
    """A worker as a confirmation reaches it: told which notification is settled."""

    def confirmed(self, nid: int, /) -> None: ...


class ConfirmHub(_Hub, Protocol):
    """What ``icrc72_confirm_notifications`` needs: and a worker, to tell it."""

    def worker(self, sub_id: int, /) -> Confirmable | None: ...
