"""This broadcaster's control-plane namespace, ``icrc72:broadcaster:sys:<id>`` (ICRC-72's
reserved namespaces; docs/scaling.md "Control plane").

With several broadcasters, each records there, as an ordinary event in the log, every
change of what it delivers: the subscriptions it takes (``icrc72:broadcaster:subscriber:add``)
and gives up (``...:remove``), each as ``[namespace, subscriber, subscription id]``, in the
key names of the reference implementation. So an operator can tail or subscribe to it
(admins only, by its exact name), the archive keeps it, and who delivered a subscription
when can be read back from the log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ..core.config import PUBLICATION_CONTROLLERS
from ..core.namespaces import system_namespace
from ..store import NewEvent, PublicationRecord, Store, StoredEvent, SubscriptionRecord
from .registry import Registry

__all__ = ["ADD", "REMOVE", "ControlLog"]

ADD = "icrc72:broadcaster:subscriber:add"
REMOVE = "icrc72:broadcaster:subscriber:remove"


class ControlLog:
    def __init__(
        self, store: Store, registry: Registry, broadcaster: str, *,
        on_appended: Callable[[list[StoredEvent]], None],
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._store = store
        self._registry = registry
        self._me = broadcaster
        self.namespace = system_namespace(broadcaster)
        self._on_appended = on_appended
        self._clock = clock

    async def open(self) -> None:
        """Register the namespace (once; the service's own publication, which no principal
        may publish to)."""
        if self.namespace in self._registry.publications:
            return
        # No controllers (but admins) and no publishers: whatever principal shares the
        # broadcaster's name, the namespace stays the service's.
        config: list[Any] = [[PUBLICATION_CONTROLLERS, {"Array": []}]]
        rec = PublicationRecord(namespace=self.namespace, owner=self._me, config=config, created_at=self._clock())
        await self._store.create_publication(rec)
        stored = [p for p in await self._store.list_publications() if p.namespace == self.namespace]
        self._registry.set_publication(stored[0] if stored else rec)

    async def record(self, added: Sequence[SubscriptionRecord], removed: Sequence[SubscriptionRecord]) -> None:
        """One event for one heartbeat's changes."""
        pairs = [(key, subs) for key, subs in ((ADD, added), (REMOVE, removed)) if subs]
        if not pairs:
            return
        data = {"Map": [
            [key, {"Array": [
                {"Array": [{"Text": s.namespace}, {"Text": s.subscriber}, {"Nat": s.id}]} for s in subs
            ]}]
            for key, subs in pairs
        ]}
        event = NewEvent(
            namespace=self.namespace, source=self._me, timestamp=self._clock(), data=msgspec.json.encode(data)
        )
        self._on_appended(await self._store.append([event]))
