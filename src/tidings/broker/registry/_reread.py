"""Reading one object of the registry again from the store, after a compare-and-set
found the stored record changed meanwhile (docs/scaling.md, "Shared state"): the
change is then computed again from what is stored, never from the cached copy."""

from __future__ import annotations

from typing import Protocol

from ...store import Store, SubscriptionRecord
from ._registry import Registry, read_sub_config

__all__ = ["reread_publication", "reread_subscription"]


class _Told(Protocol):
    def subscription_changed(self, sub: SubscriptionRecord, *, started: bool) -> None: ...

    def subscription_removed(self, sub_id: int) -> None: ...


async def reread_publication(store: Store, registry: Registry, namespace: str) -> None:
    """The stored record of ``namespace`` into ``registry``."""
    # A conflict is rare: the whole list is read rather than adding a look-up by name.
    stored = next((p for p in await store.list_publications() if p.namespace == namespace), None)
    if stored is None:
        if namespace in registry.publications:
            registry.drop_publication(namespace)
    elif registry.publications.get(namespace) != stored:
        registry.set_publication(stored)


async def reread_subscription(store: Store, registry: Registry, listener: _Told | None, sub_id: int) -> None:
    """The stored record of subscription ``sub_id`` into ``registry``, telling delivery
    (``listener``) as a change made here would."""
    found = await store.list_subscriptions(after=sub_id - 1, limit=1)
    stored = found[0] if found and found[0].id == sub_id else None
    old = registry.subscriptions.get(sub_id)
    if old is None:
        return  # gone here already, or not known yet: the other broadcaster's signal brings it
    if stored is None:
        if listener is not None:  # told first: it may look up what the subscription was
            listener.subscription_removed(sub_id)
        registry.subscriptions.pop(sub_id, None)
        registry.sub_configs.pop(sub_id, None)
        return
    if (old.endpoint, old.mode, old.config) == (stored.endpoint, stored.mode, stored.config):
        return
    was = registry.sub_configs.get(sub_id)
    conf = read_sub_config(stored.config)
    registry.subscriptions[sub_id] = stored
    registry.sub_configs[sub_id] = conf
    if listener is not None:
        listener.subscription_changed(stored, started=was is not None and was.stopped and not conf.stopped)
