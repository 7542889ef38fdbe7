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
from ...errors import LimitReached
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
from ._reread import reread_publication, reread_subscription

__all__ = ["Orchestrator", "RegistryListener"]

_CAS_TRIES = 16
"""Tries of a compare-and-set before an item is answered Busy (each lost try means
another change of the same object landed meanwhile)."""


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
        schemas_fresh: Callable[[], Awaitable[None]] | None = None,
        now_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._store = store
        self._now_ns = now_ns
        """The cluster's clock (``Broker.clock``): creation times, which users compare."""
        self._schemas_fresh = schemas_fresh
        """Brings the schema registry up to the store (``SchemaRegistry.refresh``): asked
        before a binding is checked, so a schema registered through another broadcaster
        a moment ago is known."""
        self._handshake = handshake
        """The CloudEvents webhook handshake with an endpoint (``broker.delivery.Handshake``)."""
        self._changed = on_publication_changed
        """Told ``(action, namespace, principal)`` of each publication change made here
        (``broker.cluster.Commands``)."""
        self._look_up = look_up
        """Reads publications this process does not know yet from the store (registered
        through another broadcaster a moment ago: ``broker.cluster.RegistrySync``)."""
        self.registry = registry
        # The limits per principal (docs/security.md) are enforced by the store, in the
        # insert's own atomic step: a count kept here would be this process's alone, and
        # registrations through other broadcasters, or racing ones through this one,
        # would pass it (docs/scaling.md, "Shared state: one truth").
        self._max_publications = max_publications
        self._max_subscriptions = max_subscriptions
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
            if self._schemas_fresh is not None and any(k == cfg.SCHEMA and v is not None for k, v in config):
                await self._schemas_fresh()
            problem = self._config_problem(config) or await self._authorization_url_problem(config)
            if problem:
                out.append(err("ImproperConfig", problem))
                continue
            existing = self.publications.get(reg.namespace)
            created = False
            if existing is None:
                rec = PublicationRecord(
                    namespace=reg.namespace, owner=caller.name, config=config, created_at=self._now_ns()
                )
                try:
                    made = await self._store.create_publication(
                        rec, publisher=caller.name, limit=None if caller.admin else self._max_publications
                    )
                except LimitReached:
                    out.append(limit_reached(
                        "publications", self._max_publications, "TIDINGS_MAX_PUBLICATIONS_PER_PRINCIPAL"
                    ))
                    continue
                if made:
                    self.registry.set_publication(rec)
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
            # A compare-and-set on the stored record: a change made meanwhile (here or
            # through another broadcaster) is read again and this one merged onto it,
            # so neither is lost (docs/scaling.md, "Shared state").
            for _ in range(_CAS_TRIES):
                answer = await self._update_publication(caller, u)
                if answer is not None:
                    break
                await reread_publication(self._store, self.registry, u.namespace)
            else:
                answer = err("Busy", f"publication {u.namespace!r} kept changing meanwhile; try again")
            out.append(answer)
        return out

    async def _update_publication(self, caller: PrincipalRecord, u: PublicationUpdate) -> ItemResult | None:
        """One try of an update: its answer, or None if the stored record changed meanwhile."""
        pub = self.publications.get(u.namespace)
        if pub is None:  # deleted earlier in this batch, or meanwhile
            return err("NotFound", f"no publication {u.namespace!r}")
        if not self.controls_publication(caller, pub):
            return err("Unauthorized", f"{caller.name} is not a controller of {u.namespace!r}")
        problem = check_values(u.config)
        if problem:
            return err("ImproperConfig", problem)
        config = cfg.merge(pub.config, u.config)
        # Only an update that (re)binds a schema is a binding; one that leaves the
        # binding alone keeps it, usable or not (docs/schemas.md).
        binds = any(k == cfg.SCHEMA and v is not None for k, v in u.config)
        if binds and self._schemas_fresh is not None:
            await self._schemas_fresh()  # a schema registered through another broadcaster a moment ago
        problem = self._config_problem(config, binds) or await self._authorization_url_problem(config)
        if problem:
            return err("ImproperConfig", problem)
        rec = PublicationRecord(namespace=pub.namespace, owner=pub.owner, config=config, created_at=pub.created_at)
        before = self.pub_configs[pub.namespace]
        if not await self._store.update_publication(rec, expected=pub):
            return None
        # A later change may have been applied here while this one was written (a change
        # that lost its compare-and-set to this one reads it back and goes on from it):
        # then this one is in it already, and is not set back over it.
        if self.publications.get(pub.namespace) is pub:
            self.registry.set_publication(rec)
        await self._keep_config_before(pub.namespace, before)
        self._changed("publication:update", rec.namespace, caller.name)
        return ok(True)

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
            self._changed("publication:remove", ns, caller.name)
            out.append(ok(True))
        return out

    async def _keep_config_before(self, namespace: str, before: cfg.PublicationConfig) -> None:
        """As a publication's config changes: remember the old one, ``before``, for the
        events published so far, and forget what every subscription has passed."""
        history = self.registry.configs_before.get(namespace, [])
        passed = self.listener.sent_position(namespace) if self.listener is not None else None
        history = [h for h in history if passed is not None and h[0] > passed]
        head = await self._store.head()
        if passed is not None and head > passed:
            history.append((head, before))
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
            try:
                rec = await self._store.create_subscription(SubscriptionRecord(
                    id=0, subscriber=caller.name, namespace=reg.namespace, endpoint=reg.endpoint,
                    mode=reg.mode, config=config, created_at=self._now_ns(),
                ), limit=None if caller.admin else self._max_subscriptions)
            except LimitReached:
                out.append(limit_reached(
                    "subscriptions", self._max_subscriptions, "TIDINGS_MAX_SUBSCRIPTIONS_PER_PRINCIPAL"
                ))
                continue
            if self.on_subscription_created is not None:
                await self.on_subscription_created(rec, reg.secret)
            self.subscriptions[rec.id] = rec
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
            for _ in range(_CAS_TRIES):  # a compare-and-set, as for publications
                answer = await self._update_subscription(caller, u)
                if answer is not None:
                    break
                await reread_subscription(self._store, self.registry, self.listener, u.id)
            else:
                answer = err("Busy", f"subscription {u.id} kept changing meanwhile; try again")
            out.append(answer)
        return out

    async def _update_subscription(self, caller: PrincipalRecord, u: SubscriptionUpdate) -> ItemResult | None:
        """One try of an update: its answer, or None if the stored record changed meanwhile."""
        sub = self.subscriptions.get(u.id)
        if sub is None:
            return err("NotFound", f"no subscription {u.id}")
        if not self.controls_subscription(caller, sub):
            return err("Unauthorized", f"{caller.name} is not a controller of subscription {u.id}")
        problem = check_values(u.config) or (
            endpoint_error(u.endpoint, sub.subscriber) if u.endpoint is not None else None
        ) or await self._endpoint_problem(u.endpoint)
        if problem:
            return err("ImproperConfig", problem)
        config = cfg.merge(sub.config, u.config)
        try:
            conf = read_sub_config(config, strict=True)
        except cfg.ImproperConfig as e:
            return err("ImproperConfig", str(e))
        moved = u.endpoint is not None and u.endpoint != sub.endpoint
        old_conf = self.sub_configs.get(sub.id)
        if moved or old_conf is None or not old_conf.handshake:
            refused = await self._handshake_problem(conf, u.endpoint or sub.endpoint)
            if refused is not None:
                return err("ImproperConfig", refused)
        if (moved or u.authInfo is not UNSET) and self.authorizer is not None and not is_pattern(sub.namespace):
            pub_conf = self.pub_configs.get(sub.namespace)
            if pub_conf is None:
                return err("NotFound", f"no publication {sub.namespace!r}")
            # The publisher approved a subscriber at an address with some credentials:
            # a new address or new credentials are a new request (XEP-0021 §4.3).
            denied = await self.authorizer.authorize(
                pub_conf, sub.namespace, sub.subscriber,
                None if u.authInfo is UNSET else u.authInfo, u.endpoint or sub.endpoint,
            )
            if denied is not None:
                return denied
        rec = SubscriptionRecord(
            id=sub.id, subscriber=sub.subscriber, namespace=sub.namespace,
            endpoint=u.endpoint or sub.endpoint, mode=u.mode or sub.mode, config=config,
            cursor=sub.cursor, created_at=sub.created_at,
        )
        if not await self._store.update_subscription(rec, expected=sub):
            return None
        if self.subscriptions.get(rec.id) is not sub:
            return ok(True)  # a later change, made on top of this one, was applied here meanwhile
        # Read after the awaits: the subscription may have been stopped or started meanwhile.
        current = self.sub_configs.get(rec.id)
        started = current is not None and current.stopped and not conf.stopped
        self.subscriptions[rec.id] = rec
        self.sub_configs[rec.id] = conf
        if self.listener is not None:
            self.listener.subscription_changed(rec, started=started)
        return ok(True)

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
        self.subscriptions.pop(sub_id, None)
        self.sub_configs.pop(sub_id, None)
