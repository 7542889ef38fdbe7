"""The contract every network adapter meets.

A network is anything events can be published to and read back from: a DLT adapter, a
tidings broker, a NATS JetStream stream, a Redis stream. Adding a kind is one subclass
of :class:`Network` with a ``kind`` name; it registers itself in :data:`KINDS`.

Required: :meth:`Network.publish`, :meth:`Network.follow` and :meth:`Network.events`.
Lifecycle: ``open`` once, then ``follow`` runs in its own task for the life of the
distributor (it is restarted with back-off when it raises), ``publish`` is called by
one outbox worker at a time, ``close`` at shutdown. Adapters run in the distributor's
event loop only; they are not picklable and never go to Spark executors.

Examples::

    class Memory(Network):
        kind = "memory"

        async def publish(self, event: DltPublish) -> None:
            self.log.append(event)
        async def follow(self, deliver: Deliver) -> None:
            ...   # call ``await deliver([notification, ...])`` for every event, forever
        async def events(self) -> list[NetworkNotification]:
            return [notification_of(e, id=i, timestamp=None, network=self.name) for i, e in enumerate(self.log)]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ...core.addresses import DEFAULT_CONNECT_TIMEOUT_S
from ...core.interchain import DltPublish, NetworkNotification
from ...errors import ConfigError
from ..state import State

__all__ = ["KINDS", "Deliver", "Network", "NetworkContext"]

Deliver = Callable[[list[NetworkNotification]], Awaitable[None]]
"""Hands events seen on a network, in the network's order, to the distributor; returns
once they are recorded (so a cursor may move past them). Batches save round trips."""

log = logging.getLogger("tidings.interchain")

FOLLOW_WAIT_S = 30.0
"""How long a push that arrives before its network is followed waits for it (a start, a
restart of following) before it is refused: not being ready yet is back-pressure."""

KINDS: dict[str, type[Network]] = {}
"""Adapter classes by ``kind``, as the config file names them."""


@dataclass(frozen=True, slots=True)
class NetworkContext:
    """What an adapter may use of the distributor."""

    public_url: str
    """Where the distributor's HTTP server is reached (push endpoints are under it)."""
    state: State
    """For cursors (how far a network has been read)."""
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    """How long a connection to the network may take (``TIDINGS_CONNECT_TIMEOUT_S``)."""


class Network(ABC):
    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.kind:
            KINDS[cls.kind] = cls

    def __init__(self, name: str, params: Mapping[str, Any], context: NetworkContext) -> None:
        self.name = name
        self.params = dict(params)
        self.context = context
        self._deliver: Deliver | None = None
        self._followed = asyncio.Event()
        self._waiting_told = False

    def _following(self, deliver: Deliver | None) -> None:
        """Pushes go to ``deliver`` from now on (None: not followed, pushes wait)."""
        self._deliver = deliver
        if deliver is None:
            self._followed.clear()
        else:
            self._followed.set()
            if self._waiting_told:
                log.info("%s: followed now; the pushes that waited are delivered", self.name)
            self._waiting_told = False

    async def _deliverer(self, wait_s: float = FOLLOW_WAIT_S) -> Deliver | None:
        """Where a push goes: waits (up to ``wait_s``) while the network is not followed
        yet, telling it once per wait, not once per event; None if it still is not."""
        if self._deliver is None:
            if not self._waiting_told:
                self._waiting_told = True
                log.info("%s: pushes arrived before the network is followed; they wait for it", self.name)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._followed.wait()
        return self._deliver

    def param(self, key: str, default: Any = ..., kind: type | tuple[type, ...] = str) -> Any:
        """A config parameter of this network, checked; ``default`` ``...`` means required."""
        if key not in self.params:
            if default is ...:
                raise ConfigError(f"network {self.name!r} ({self.kind}): missing parameter {key!r}")
            return default
        value = self.params[key]
        if not isinstance(value, kind):
            raise ConfigError(f"network {self.name!r}: parameter {key!r} has the wrong type ({type(value).__name__})")
        return value

    @property
    def push_path(self) -> str:
        """The path of this network's push endpoint on the distributor, if it needs one."""
        return f"/interchain/v1/push/{self.name}"

    def routes(self) -> list[Any]:
        """Starlette routes this adapter needs on the distributor's server (push endpoints)."""
        return []

    async def open(self) -> None:  # noqa: B027 (optional hook)
        """Connect; a network that is down must not make this fail (publish and follow retry)."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        ...

    @abstractmethod
    async def publish(self, event: DltPublish) -> None:
        """Publish ``event`` as it is; raise :class:`NetworkUnavailable` if the network cannot take it now."""

    async def publish_many(self, events: list[DltPublish]) -> int:
        """Publish ``events`` in order; return how many (a prefix) were published before
        a failure. Raise :class:`NetworkUnavailable` when not even the first was. Override
        where the network takes batches (the default publishes one at a time)."""
        for i, e in enumerate(events):
            try:
                await self.publish(e)
            except Exception:
                if i == 0:
                    raise
                return i
        return len(events)

    @abstractmethod
    async def follow(self, deliver: Deliver) -> None:
        """Deliver every event of the network, with ``network`` set to this network's name,
        from where the last run stopped; run until cancelled. Raise to be restarted."""

    @abstractmethod
    async def events(self) -> list[NetworkNotification]:
        """Every event currently on the network (reconciliation, ``GET /api/v1/events``)."""

    def frame(self, spark: Any) -> Any | None:
        """Optionally, the network's events as a Spark DataFrame ``(gid, payload)`` read
        in bulk by Spark itself; None to have :meth:`events` collected instead."""
        return None
