"""The control plane on the log: each broadcaster's namespace ``icrc72:broadcaster:sys:<id>``
(ICRC-72's reserved namespaces; docs/scaling.md "Control plane").

With several broadcasters, two kinds of ordinary events go there:

- **Records.** A broadcaster records, on its own namespace, every change of what it
  delivers: the subscriptions it takes (``icrc72:broadcaster:subscriber:add``) and gives
  up (``...:remove``), each as ``[namespace, subscriber, subscription id]``, in the key
  names of the reference implementation.
- **Commands.** The orchestrator part of the broadcaster a change is made through
  sends it to the broadcasters it concerns: a subscription's change to the one
  delivering it (``tidings:command:subscription:add|update|stop|start|remove``, each
  ``[namespace, subscriber, subscription id]``), a publication's to every live one
  (``tidings:command:publication:add|update|remove`` and
  ``tidings:command:publisher:add``, each ``[namespace, principal]``). A broadcaster
  reads the commands on its namespace from the log and reads the items they name again
  from the store (``_registry_sync``). The store stays the truth and ``NOTIFY`` the fast
  path: a command is a second channel, and the record of who changed what, when.

So an operator can tail or subscribe to them (admins only, by exact name), the archive
keeps them, and what happened can be read back from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ...core.config import PUBLICATION_CONTROLLERS
from ...core.namespaces import system_namespace
from ...store import NewEvent, PublicationRecord, Stat, Store, StoredEvent, SubscriptionRecord
from ...tasks import stop_if_cancelled
from ..registry import Registry, RegistryListener, read_sub_config
from ._membership import Membership
from ._outage import Outage

_log = logging.getLogger("tidings.cluster")

__all__ = ["ADD", "COMMAND", "REMOVE", "Commands", "ControlLog"]

ADD = "icrc72:broadcaster:subscriber:add"
REMOVE = "icrc72:broadcaster:subscriber:remove"
COMMAND = "tidings:command:"
_MAX_ITEMS = 1_000
"""Items per command event: a batch registration of 10k subscriptions is 10 events."""


class ControlLog:
    def __init__(
        self, store: Store, registry: Registry, membership: Membership, *,
        on_appended: Callable[[list[StoredEvent]], None],
        clock: Callable[[], int] = time.time_ns, outage: Outage | None = None,
    ) -> None:
        self._outage = outage if outage is not None else Outage(_log)
        self._store = store
        self._registry = registry
        self._m = membership
        self._me = membership.me
        self.namespace = system_namespace(self._me)
        self._on_appended = on_appended
        self._clock = clock
        self._queued: dict[str, dict[str, list[Any]]] = {}
        self._wake = asyncio.Event()

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
        await self._append([event])

    def reassess(self) -> None:
        self._m.reassess.set()

    def known_subscription(self, sub_id: int) -> SubscriptionRecord | None:
        return self._registry.subscriptions.get(sub_id)

    # -- commands -----------------------------------------------------------------------

    def command(self, action: str, namespace: str, principal: str, sub_id: int | None = None) -> None:
        """Queue a command (``subscription:stop``, ``publication:update``...) for the
        broadcasters it concerns; ``send`` appends what is queued."""
        if sub_id is not None:
            targets = [self._m.subscription_owner(sub_id) or self._me]
            item: Any = {"Array": [{"Text": namespace}, {"Text": principal}, {"Nat": sub_id}]}
        else:
            targets = self._m.live_ids()
            item = {"Array": [{"Text": namespace}, {"Text": principal}]}
        for t in targets:
            self._queued.setdefault(t, {}).setdefault(COMMAND + action, []).append(item)
        self._wake.set()

    async def send(self) -> None:
        """Append the queued commands: one event per broadcaster concerned per round."""
        queued, self._queued = self._queued, {}
        events = []
        for target, by_key in queued.items():
            for key, items in by_key.items():
                for k in range(0, len(items), _MAX_ITEMS):
                    data = {"Map": [[key, {"Array": items[k:k + _MAX_ITEMS]}]]}
                    events.append(NewEvent(
                        namespace=system_namespace(target), source=self._me, timestamp=self._clock(),
                        data=msgspec.json.encode(data),
                    ))
        if events:
            await self._append(events)

    async def _append(self, events: list[NewEvent]) -> None:
        # Counted as publishes are, so that a system publication's ``events`` and
        # ``events:sent`` statistics agree for an operator who lists it.
        per_ns: dict[str, int] = {}
        for e in events:
            per_ns[e.namespace] = per_ns.get(e.namespace, 0) + 1
        stats = [Stat("publication", ns, "icrc72:publication:stats:events", n) for ns, n in per_ns.items()]
        self._on_appended(await self._store.append(events, stats))

    async def run(self) -> None:
        """Send commands as they are queued, until cancelled (then send what is left)."""
        try:
            while True:
                stop_if_cancelled()  # also when a store call returned from a cancel as if done
                await self._wake.wait()
                self._wake.clear()
                await asyncio.sleep(0.01)  # a batch call's commands: one round
                try:
                    await self.send()
                except Exception as e:  # the change itself is stored: the others read it anyway
                    stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                    self._outage.failed("sending control-plane commands", e)
        finally:
            if self._queued:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.send())

    def items_named(self, events: Sequence[StoredEvent]) -> list[str]:
        """What the commands another broadcaster sent this one among ``events`` name, as
        ``sub:<id>`` and ``pub:<namespace>`` (``RegistrySync.changed``)."""
        out: list[str] = []
        for e in events:
            if e.namespace != self.namespace or e.source == self._me:
                continue
            try:
                pairs = msgspec.json.decode(e.data)["Map"]
                for key, value in pairs:
                    if not key.startswith(COMMAND):
                        continue
                    for item in value["Array"]:
                        fields = item["Array"]
                        if key.startswith(COMMAND + "subscription:"):
                            out.append(f"sub:{fields[2]['Nat']}")
                        else:
                            out.append(f"pub:{fields[0]['Text']}")
            except (msgspec.DecodeError, KeyError, IndexError, TypeError, ValueError):
                _log.warning("event %s on %s is not a command this broadcaster reads", e.id, e.namespace)
        return out


class Commands:
    """Delivery's registry listener, which also sends each change the orchestrator makes
    here as a command (``ControlLog.command``). Changes read from the store (made
    through another broadcaster) go to delivery directly, so none is sent twice."""

    def __init__(self, inner: RegistryListener, log: ControlLog) -> None:
        self._inner = inner
        self._log = log

    def subscription_added(self, sub: SubscriptionRecord) -> None:
        self._inner.subscription_added(sub)
        self._log.command("subscription:add", sub.namespace, sub.subscriber, sub.id)
        self._log.reassess()

    def subscription_changed(self, sub: SubscriptionRecord, *, started: bool) -> None:
        self._inner.subscription_changed(sub, started=started)
        action = "start" if started else "stop" if read_sub_config(sub.config).stopped else "update"
        self._log.command(f"subscription:{action}", sub.namespace, sub.subscriber, sub.id)

    def subscription_removed(self, sub_id: int) -> None:
        sub = self._log.known_subscription(sub_id)
        self._inner.subscription_removed(sub_id)
        self._log.command("subscription:remove", sub.namespace if sub else "", sub.subscriber if sub else "", sub_id)

    def sent_position(self, namespace: str) -> int | None:
        return self._inner.sent_position(namespace)

    def delivers(self, sub_id: int) -> bool:
        return self._inner.delivers(sub_id)

    def publication_changed(self, action: str, namespace: str, principal: str) -> None:
        self._log.command(action, namespace, principal)
