"""The orchestrator: publications, publishers, subscriptions, their configs, the queries.

It keeps the registry in memory (loaded from the store at start, written through on
every change) so that the publish and delivery paths check permissions without
touching the store; a change applies from the next event on.

Who may change what: a publication's controllers are its ``icrc72:publication:controllers``
list, or its owner (first registrant) when there is none; a subscription's are its
``icrc72:subscription:controllers`` list, or its subscriber. Admin principals may change
anything.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from msgspec import UNSET

from ...core import config as cfg
from ...core import webhooks
from ...core.namespaces import is_catch_all, is_pattern, is_system, namespace_error, pattern_error
from ...core.wire import (
    ItemResult,
    PublicationRegistration,
    PublicationUpdate,
    SubscriptionRegistration,
    SubscriptionUpdate,
    err,
    ok,
)
from ...store import PrincipalRecord, PublicationRecord, Store, SubscriptionRecord
from ._checks import (
    SYSTEM_REFUSAL,
    check_values,
    config_problem,
    endpoint_error,
    limit_reached,
    url_problem,
)
from ._queries import RegistryQueries
from ._registry import Registry, read_sub_config

__all__ = ["Orchestrator", "RegistryListener"]


class Authorizer(Protocol):
    """Asks a publisher to approve a subscription (see ``broker/auth/_authorization.py``)."""

    async def authorize(
        self, conf: cfg.PublicationConfig, namespace: str, subscriber: str, auth_info: Any, endpoint: str | None
    ) -> ItemResult | None: ...


class RegistryListener(Protocol):
    """What delivery is told about subscriptions."""

    def subscription_added(self, sub: SubscriptionRecord) -> None: ...

    def subscription_changed(self, sub: SubscriptionRecord, *, started: bool) -> None: ...

    def subscription_removed(self, sub_id: int) -> None: ...

    def sent_position(self, namespace: str) -> int | None:
        """The seq up to which every subscription of ``namespace`` delivered here has been
        sent its events."""
        ...

    def delivers(self, sub_id: int) -> bool:
        """Whether subscription ``sub_id`` is delivered here (in a cluster, another
        broadcaster may deliver it: its progress is its stored cursor)."""
        ...


class Orchestrator(RegistryQueries):
    """Changes the registry: writes each change to the store, then to ``registry``, then
    tells ``listener`` (delivery). Reading the registry through it is kept for the faces."""

    def __init__(
        self, store: Store, registry: Registry, *, broadcaster_id: str,
        url_problem: Callable[[str, str], Awaitable[str | None]] | None = None,
        listener: RegistryListener | None = None,
        authorizer: Authorizer | None = None,
        schema_problem: Callable[[int | str], str | None] | None = None,
        on_subscription_created: Callable[[SubscriptionRecord, str | None], Awaitable[None]] | None = None,
        max_publications: int = 1_000, max_subscriptions: int = 10_000,
        look_up: Callable[[Sequence[str], str | None], Awaitable[None]] | None = None,
        on_publication_changed: Callable[[str, str, str], None] = lambda action, namespace, principal: None,
        handshake: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:
        self._store = store
        self._handshake = handshake
        """The CloudEvents webhook handshake with an endpoint (``broker.delivery.Handshake``)."""
        self._changed = on_publication_changed
        """Told ``(action, namespace, principal)`` of each publication change made here
        (``broker.cluster.Commands``)."""
        self._look_up = look_up
        """Reads publications this process does not know yet from the store (registered
        through another broadcaster a moment ago: ``broker.cluster.RegistrySync``)."""
        self.registry = registry
        self._max_publications = max_publications
        self._max_subscriptions = max_subscriptions
        # What each principal holds, for its limits (docs/security.md): kept up to date
        # here rather than counted per registration, so a batch stays linear.
        self._owned: Counter[str] = Counter()
        self._subscribed: Counter[str] = Counter()
        self._url_problem = url_problem
        """The outbound policy's check of a URL at registration (docs/security.md)."""
        self._broadcaster_id = broadcaster_id
        self.listener = listener
        self.authorizer = authorizer
        self.schema_problem = schema_problem
        """Why a publication's events could not be checked against this schema now (unknown,
        deleted, Retracted, Deprecated past its window), or None: asked when a publication
        binds it, and by the publication queries."""
        self.on_subscription_created = on_subscription_created
        """Awaited with a new subscription and its registration's ``secret`` before its delivery starts."""

    async def load(self) -> None:
        await self.registry.load(self._store)
        self.recount()

    def recount(self) -> None:
        """Count what each principal holds, for its limits (after the registry changed
        through another broadcaster)."""
        self._owned = Counter(pub.owner for pub in self.registry.publications.values())
        self._subscribed = Counter(sub.subscriber for sub in self.registry.subscriptions.values())

    # -- publications -----------------------------------------------------------------

    async def register_publications(
        self, caller: PrincipalRecord, regs: Sequence[PublicationRegistration]
    ) -> list[ItemResult]:
        out: list[ItemResult] = []
        for reg in regs:
            problem = namespace_error(reg.namespace) or check_values(reg.config)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            if is_system(reg.namespace):
                out.append(err("Unauthorized", SYSTEM_REFUSAL.format(reg.namespace)))
                continue
            config = [list(p) for p in reg.config]
            problem = self._config_problem(config) or await self._authorization_url_problem(config)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            existing = self.publications.get(reg.namespace)
            created = False
            if existing is None and not caller.admin and self._owned[caller.name] >= self._max_publications:
                out.append(limit_reached(
                    "publications", self._max_publications, "TIDINGS_MAX_PUBLICATIONS_PER_PRINCIPAL"
                ))
                continue
            if existing is None:
                rec = PublicationRecord(
                    namespace=reg.namespace, owner=caller.name, config=config, created_at=time.time_ns()
                )
                if await self._store.create_publication(rec, publisher=caller.name):
                    self.registry.set_publication(rec)
                    self._owned[caller.name] += 1
                    created = True
            elif config and config != existing.config:
                out.append(err(
                    "ImproperConfig",
                    f"namespace {reg.namespace!r} is already registered; change its config with "
                    "icrc72_update_publication",
                ))
                continue
            # The creator owns the publication even when its lists do not let it publish
            # (an Err would claim the item took no effect); the lists still apply to publishing.
            refused_by = None if created else self.pub_configs[reg.namespace].publisher_refusal(caller.name)
            if refused_by is not None:
                out.append(err(
                    "Unauthorized", f"{caller.name} may not publish to {reg.namespace!r}: refused by its {refused_by}"
                ))
                continue
            if created or await self._store.add_publisher(reg.namespace, caller.name):
                self.publishers[reg.namespace].add(caller.name)
                self._changed("publication:add" if created else "publisher:add", reg.namespace, caller.name)
            out.append(ok(reg.namespace))
        return out

    async def update_publications(
        self, caller: PrincipalRecord, updates: Sequence[PublicationUpdate]
    ) -> list[ItemResult]:
        await self.known([u.namespace for u in updates])
        out: list[ItemResult] = []
        for u in updates:
            pub = self.publications.get(u.namespace)
            if pub is None:  # deleted earlier in this batch
                out.append(err("NotFound", f"no publication {u.namespace!r}"))
                continue
            if not self.controls_publication(caller, pub):
                out.append(err("Unauthorized", f"{caller.name} is not a controller of {u.namespace!r}"))
                continue
            problem = check_values(u.config)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            config = cfg.merge(pub.config, u.config)
            # Only an update that (re)binds a schema is a binding; one that leaves the
            # binding alone keeps it, usable or not (docs/schemas.md).
            binds = any(k == cfg.SCHEMA and v is not None for k, v in u.config)
            problem = self._config_problem(config, binds) or await self._authorization_url_problem(config)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            rec = PublicationRecord(namespace=pub.namespace, owner=pub.owner, config=config, created_at=pub.created_at)
            await self._store.update_publication(rec)
            await self._keep_config_before(pub.namespace)
            self.registry.set_publication(rec)
            self._changed("publication:update", rec.namespace, caller.name)
            out.append(ok(True))
        return out

    async def _authorization_url_problem(self, config: list[Any]) -> str | None:
        return await url_problem(self._url_problem, cfg.PublicationConfig.read(config).authorization_url,
                                 "authorization URL")

    async def _endpoint_problem(self, endpoint: str | None) -> str | None:
        return await url_problem(self._url_problem, endpoint, "endpoint")

    def _config_problem(self, config: list[Any], binds: bool = True) -> str | None:
        return config_problem(config, self.schema_problem if binds else None)

    async def delete_publications(self, caller: PrincipalRecord, namespaces: Sequence[str]) -> list[ItemResult]:
        await self.known(namespaces)
        out: list[ItemResult] = []
        for ns in namespaces:
            pub = self.publications.get(ns)
            if pub is None:
                out.append(err("NotFound", f"no publication {ns!r}"))
                continue
            if not self.controls_publication(caller, pub):
                out.append(err("Unauthorized", f"{caller.name} is not a controller of {ns!r}"))
                continue
            for sub_id in await self._store.delete_publication(ns):
                self._forget_subscription(sub_id)
            self.registry.drop_publication(ns)
            self._owned[pub.owner] -= 1
            self._changed("publication:remove", ns, caller.name)
            out.append(ok(True))
        return out

    async def _keep_config_before(self, namespace: str) -> None:
        """Before a publication's config changes: remember the old one for the events
        published so far, and forget what every subscription has passed."""
        history = self.registry.configs_before.get(namespace, [])
        passed = self.listener.sent_position(namespace) if self.listener is not None else None
        history = [h for h in history if passed is not None and h[0] > passed]
        head = await self._store.head()
        if passed is not None and head > passed:
            history.append((head, self.pub_configs[namespace]))
        if history:
            self.registry.configs_before[namespace] = history
        else:
            self.registry.configs_before.pop(namespace, None)

    # -- subscriptions ----------------------------------------------------------------

    async def register_subscriptions(
        self, caller: PrincipalRecord, regs: Sequence[SubscriptionRegistration]
    ) -> list[ItemResult]:
        # An invalid namespace is refused item by item (ImproperConfig) below, not as unknown.
        await self.known([
            r.namespace for r in regs if not is_pattern(r.namespace) and namespace_error(r.namespace) is None
        ])
        out: list[ItemResult] = []
        for reg in regs:
            problem = (
                pattern_error(reg.namespace) or endpoint_error(reg.endpoint, caller.name) or check_values(reg.config)
                or (webhooks.secret_error(reg.secret) if reg.secret is not None else None)
            ) or await self._endpoint_problem(reg.endpoint)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            if not caller.admin and self._subscribed[caller.name] >= self._max_subscriptions:
                out.append(limit_reached(
                    "subscriptions", self._max_subscriptions, "TIDINGS_MAX_SUBSCRIPTIONS_PER_PRINCIPAL"
                ))
                continue
            if is_system(reg.namespace) and not caller.admin:
                out.append(err("Unauthorized", SYSTEM_REFUSAL.format(reg.namespace) + "; admins may subscribe"))
                continue
            if is_catch_all(reg.namespace) and not caller.admin:
                out.append(err("Unauthorized", (
                    f"the pattern {reg.namespace!r} names no segment, so it covers every namespace "
                    "(of its depth): only an admin may subscribe with it"
                )))
                continue
            refused_by = None if is_pattern(reg.namespace) else self.subscriber_refusal(reg.namespace, caller.name)
            if refused_by is not None:
                out.append(err(
                    "Unauthorized", f"{caller.name} may not subscribe to {reg.namespace!r}: refused by its {refused_by}"
                ))
                continue
            config = [list(p) for p in reg.config]
            shortcuts: list[tuple[str, Any]] = []
            if reg.filter is not None:
                shortcuts.append((cfg.FILTER, {"Text": reg.filter}))
            if reg.skip is not None:
                skip = reg.skip if isinstance(reg.skip, list) else [reg.skip]
                if any(n < 0 for n in skip):
                    out.append(err("ImproperConfig", f"{cfg.SKIP}: mod and offset are Nats"))
                    continue
                shortcuts.append((cfg.SKIP, {"Array": [{"Nat": n} for n in skip]}))
            if reg.stopped:
                shortcuts.append((cfg.STOPPED, {"Bool": True}))
            if not reg.reliable:
                shortcuts.append((cfg.RELIABLE, {"Bool": False}))
            config = cfg.merge(config, shortcuts)
            try:
                conf = read_sub_config(config, strict=True)
            except cfg.ImproperConfig as e:
                out.append(err("ImproperConfig", str(e)))
                continue
            refused = await self._handshake_problem(conf, reg.endpoint)
            if refused is not None:
                out.append(err("ImproperConfig", refused))
                continue
            if not is_pattern(reg.namespace) and self.authorizer is not None:
                denied = await self.authorizer.authorize(
                    self.pub_configs[reg.namespace], reg.namespace, caller.name, reg.authInfo, reg.endpoint
                )
                if denied is not None:
                    out.append(denied)
                    continue
            rec = await self._store.create_subscription(SubscriptionRecord(
                id=0, subscriber=caller.name, namespace=reg.namespace, endpoint=reg.endpoint,
                mode=reg.mode, config=config, created_at=time.time_ns(),
            ))
            if self.on_subscription_created is not None:
                await self.on_subscription_created(rec, reg.secret)
            self.subscriptions[rec.id] = rec
            self._subscribed[rec.subscriber] += 1
            self.sub_configs[rec.id] = conf
            if self.listener is not None:
                self.listener.subscription_added(rec)
            out.append(ok(rec.id))
        return out

    async def update_subscriptions(
        self, caller: PrincipalRecord, updates: Sequence[SubscriptionUpdate]
    ) -> list[ItemResult]:
        out: list[ItemResult] = []
        for u in updates:
            sub = self.subscriptions.get(u.id)
            if sub is None:
                out.append(err("NotFound", f"no subscription {u.id}"))
                continue
            if not self.controls_subscription(caller, sub):
                out.append(err("Unauthorized", f"{caller.name} is not a controller of subscription {u.id}"))
                continue
            problem = check_values(u.config) or (
                endpoint_error(u.endpoint, sub.subscriber) if u.endpoint is not None else None
            ) or await self._endpoint_problem(u.endpoint)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            config = cfg.merge(sub.config, u.config)
            try:
                conf = read_sub_config(config, strict=True)
            except cfg.ImproperConfig as e:
                out.append(err("ImproperConfig", str(e)))
                continue
            moved = u.endpoint is not None and u.endpoint != sub.endpoint
            if moved or not self.sub_configs[sub.id].handshake:
                refused = await self._handshake_problem(conf, u.endpoint or sub.endpoint)
                if refused is not None:
                    out.append(err("ImproperConfig", refused))
                    continue
            if (moved or u.authInfo is not UNSET) and self.authorizer is not None and not is_pattern(sub.namespace):
                # The publisher approved a subscriber at an address with some credentials:
                # a new address or new credentials are a new request (XEP-0021 §4.3).
                denied = await self.authorizer.authorize(
                    self.pub_configs[sub.namespace], sub.namespace, sub.subscriber,
                    None if u.authInfo is UNSET else u.authInfo, u.endpoint or sub.endpoint,
                )
                if denied is not None:
                    out.append(denied)
                    continue
            started = self.sub_configs[sub.id].stopped and not conf.stopped
            rec = SubscriptionRecord(
                id=sub.id, subscriber=sub.subscriber, namespace=sub.namespace,
                endpoint=u.endpoint or sub.endpoint, mode=u.mode or sub.mode, config=config,
                cursor=sub.cursor, created_at=sub.created_at,
            )
            await self._store.update_subscription(rec)
            self.subscriptions[rec.id] = rec
            self.sub_configs[rec.id] = conf
            if self.listener is not None:
                self.listener.subscription_changed(rec, started=started)
            out.append(ok(True))
        return out

    async def _handshake_problem(self, conf: cfg.SubscriptionConfig, endpoint: str | None) -> str | None:
        if not conf.handshake or self._handshake is None or endpoint is None or not endpoint.startswith("http"):
            return None
        refused = await self._handshake(endpoint)
        return None if refused is None else f"{cfg.HANDSHAKE}: {refused}"

    async def set_stopped(self, caller: PrincipalRecord, ids: Sequence[int], stopped: bool) -> list[ItemResult]:
        return await self.update_subscriptions(
            caller, [SubscriptionUpdate(id=i, config=[(cfg.STOPPED, {"Bool": stopped})]) for i in ids]
        )

    async def delete_subscriptions(self, caller: PrincipalRecord, ids: Sequence[int]) -> list[ItemResult]:
        out: list[ItemResult] = []
        for i in ids:
            sub = self.subscriptions.get(i)
            if sub is None:
                out.append(err("NotFound", f"no subscription {i}"))
                continue
            if not self.controls_subscription(caller, sub):
                out.append(err("Unauthorized", f"{caller.name} is not a controller of subscription {i}"))
                continue
            await self.end_subscription(i)
            out.append(ok(True))
        return out

    async def end_subscription(self, sub_id: int) -> None:
        """Delivery ended it: its dead letters stay, for its subscriber (docs/delivery.md)."""
        await self._store.delete_subscription(sub_id, keep_dead_letters=True)
        self._forget_subscription(sub_id)

    def _forget_subscription(self, sub_id: int) -> None:
        if self.listener is not None:  # told first: it may look up what the subscription was
            self.listener.subscription_removed(sub_id)
        gone = self.subscriptions.pop(sub_id, None)
        if gone is not None:
            self._subscribed[gone.subscriber] -= 1
        self.sub_configs.pop(sub_id, None)
