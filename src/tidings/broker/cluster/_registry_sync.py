"""Keeping this broadcaster's registry in step with changes made through the others
(several broadcasters on one store: docs/scaling.md).

Another broadcaster's change arrives as a signal naming what changed (``sub:<id>``,
``pub:<namespace>``, ``schema:``); this reads that item from the store and applies it to the
registry, telling delivery as the orchestrator would have. Reading item by item, never
the whole registry while serving, keeps a change made here meanwhile from being undone
by an older read of another item.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from ...store import Store, SubscriptionRecord
from ..registry import Orchestrator, RegistryListener, read_sub_config

__all__ = ["RegistrySync"]

_ASK_AGAIN_S = 1.0
_MAX_ASKED = 16


class RegistrySync:
    def __init__(
        self, store: Store, orchestrator: Orchestrator, listener: RegistryListener,
        schemas_fresh: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._orch = orchestrator
        self._schemas_fresh = schemas_fresh
        """Brings the schema registry up to the store (``SchemaRegistry.refresh``: one
        cheap read of its version when nothing changed)."""
        self._schemas = False
        self._listener = listener
        """Delivery itself: a change read here was made elsewhere, and sent from there."""
        self._store = store
        self._subs: set[int] = set()
        self._pubs: set[str] = set()
        self._asked: dict[tuple[str, str | None], float] = {}
        self._asking = asyncio.Lock()

    def changed(self, what: str) -> bool:
        """Note a signal's argument; True if it names something to read."""
        kind, _, key = what.partition(":")
        if kind == "sub" and key.isdigit():
            self._subs.add(int(key))
        elif kind == "pub" and key:
            self._pubs.add(key)
        elif kind == "schema":
            self._schemas = True
        else:
            return False
        return True

    def known(self, sub_id: int) -> SubscriptionRecord | None:
        return self._orch.subscriptions.get(sub_id)

    def subscription_ids(self) -> list[int]:
        return list(self._orch.subscriptions)

    async def fresh(self, sub_id: int) -> SubscriptionRecord | None:
        """Subscription ``sub_id`` as stored now (its cursor included), or None if gone."""
        found = await self._store.list_subscriptions(after=sub_id - 1, limit=1)
        return found[0] if found and found[0].id == sub_id else None

    async def look_up(self, namespaces: Sequence[str], principal: str | None = None) -> None:
        """Read these publications now (``Orchestrator.known``: asked about a namespace
        registered through another broadcaster before its signal arrived; with
        ``principal``, ``Orchestrator.publish_refusals``: a publisher just added through
        another broadcaster). A namespace asked about (for that principal) in the last
        second is not read again: names from a caller must not turn into a read each."""
        async with self._asking:  # callers asking at once wait for one read, then find it
            known = self._orch.registry.publications
            now = time.monotonic()
            if len(self._asked) > 10_000:
                self._asked = {k: t for k, t in self._asked.items() if t > now - _ASK_AGAIN_S}
            fresh = {
                ns for ns in namespaces[:_MAX_ASKED]
                if (principal is not None or ns not in known)
                and self._asked.get((ns, principal), 0.0) <= now - _ASK_AGAIN_S
            }
            if fresh:
                self._asked.update(dict.fromkeys(((ns, principal) for ns in fresh), now))
                await self._reload_publications(fresh)

    async def reload_all(self) -> None:
        """Compare the whole registry with the store and apply what differs: after the
        signals may have been missed (at start, before listening; a dropped connection;
        and now and then). Each difference is read again item by item before it is
        applied, so a change made here meanwhile is never undone by the older list."""
        self._schemas = True
        reg = self._orch.registry
        stored_pubs = {p.namespace: p for p in await self._store.list_publications()}
        publishers: dict[str, set[str]] = {}
        for ns, principal in await self._store.list_publishers():
            publishers.setdefault(ns, set()).add(principal)
        self._pubs |= set(stored_pubs) ^ set(reg.publications)
        self._pubs |= {ns for ns, p in stored_pubs.items() if reg.publications.get(ns) != p}
        self._pubs |= {ns for ns in stored_pubs if publishers.get(ns, set()) != reg.publishers.get(ns, set())}
        stored_subs = {s.id: s for s in await self._store.list_subscriptions()}
        self._subs |= set(stored_subs) ^ set(reg.subscriptions)
        for i, s in stored_subs.items():
            old = reg.subscriptions.get(i)
            if old is not None and (old.endpoint, old.mode, old.config) != (s.endpoint, s.mode, s.config):
                self._subs.add(i)
        await self.reload()

    async def reload(self) -> None:
        """Apply the changes signalled since the last call."""
        pubs, self._pubs = self._pubs, set()
        subs, self._subs = self._subs, set()
        schemas, self._schemas = self._schemas, False
        if schemas and self._schemas_fresh is not None:
            await self._schemas_fresh()
        if pubs:
            await self._reload_publications(pubs)
        for sub_id in sorted(subs):
            await self._reload_subscription(sub_id)

    async def _reload_publications(self, namespaces: set[str]) -> None:
        reg = self._orch.registry
        stored = {p.namespace: p for p in await self._store.list_publications() if p.namespace in namespaces}
        for ns in sorted(namespaces):
            pub = stored.get(ns)
            if pub is None:
                if ns in reg.publications:
                    reg.drop_publication(ns)
                continue
            if reg.publications.get(ns) != pub:
                reg.set_publication(pub)
            reg.publishers[ns] = {p for _, p in await self._store.list_publishers(ns)}

    async def _reload_subscription(self, sub_id: int) -> None:
        reg = self._orch.registry
        listener = self._listener
        sub = await self.fresh(sub_id)
        old = reg.subscriptions.get(sub_id)
        if sub is None:
            if old is not None:
                reg.subscriptions.pop(sub_id, None)
                reg.sub_configs.pop(sub_id, None)
                listener.subscription_removed(sub_id)
        elif old is None:
            reg.subscriptions[sub_id] = sub
            reg.sub_configs[sub_id] = read_sub_config(sub.config)
            listener.subscription_added(sub)
        elif (old.endpoint, old.mode, old.config) != (sub.endpoint, sub.mode, sub.config):
            was_stopped = reg.sub_configs[sub_id].stopped
            reg.subscriptions[sub_id] = sub
            conf = reg.sub_configs[sub_id] = read_sub_config(sub.config)
            listener.subscription_changed(sub, started=was_stopped and not conf.stopped)
