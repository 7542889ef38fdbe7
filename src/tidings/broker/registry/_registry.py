"""The registry in memory: publications, publishers, subscriptions and their configs.

Loaded from the store at start; the orchestrator changes it (after writing through to
the store), and everything else reads it: the publish path (may this principal publish
here?), delivery (which namespaces does this subscription cover, what is its config,
was this subscriber allowed this event?), signing, replays and the faces' queries. It
is a collaborator of its own so that delivery and signing can be built before the
orchestrator that notifies them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

from ...core import config as cfg
from ...core.namespaces import is_pattern, is_system, matcher
from ...errors import NotFound
from ...store import PrincipalRecord, PublicationRecord, Store, StoredEvent, SubscriptionRecord

__all__ = ["Registry", "read_sub_config"]

_seq = attrgetter("seq")


class Registry:
    def __init__(self) -> None:
        self.publications: dict[str, PublicationRecord] = {}
        self.pub_configs: dict[str, cfg.PublicationConfig] = {}
        self.configs_before: dict[str, list[tuple[int, cfg.PublicationConfig]]] = {}
        """Per namespace, ascending: (seq, the config that was in force for events up to
        seq), so that a change of the subscriber lists applies from the next event on, also
        for a subscription that is behind. Kept while some subscription has not passed seq."""
        self.publishers: dict[str, set[str]] = defaultdict(set)
        self.subscriptions: dict[int, SubscriptionRecord] = {}
        self.sub_configs: dict[int, cfg.SubscriptionConfig] = {}
        self._version = 0
        self._pattern_cache: dict[str, tuple[int, list[str]]] = {}
        self._matchers: dict[str, Callable[[str], bool]] = {}

    async def load(self, store: Store) -> None:
        for pub in await store.list_publications():
            self.set_publication(pub)
        for ns, principal in await store.list_publishers():
            self.publishers[ns].add(principal)
        for sub in await store.list_subscriptions():
            self.subscriptions[sub.id] = sub
            self.sub_configs[sub.id] = read_sub_config(sub.config)

    def set_publication(self, pub: PublicationRecord) -> None:
        self.publications[pub.namespace] = pub
        self.pub_configs[pub.namespace] = cfg.PublicationConfig.read(pub.config)
        self._version += 1

    def drop_publication(self, namespace: str) -> None:
        self.publications.pop(namespace, None)
        self.pub_configs.pop(namespace, None)
        self.configs_before.pop(namespace, None)
        self.publishers.pop(namespace, None)
        self._version += 1

    # -- questions the publish and delivery paths ask ---------------------------------

    def require_namespaces(self, namespaces: Iterable[str]) -> None:
        """Raise 404 ``namespace_not_found`` naming every unknown namespace in a batch."""
        missing = sorted({ns for ns in namespaces if ns not in self.publications})
        if missing:
            raise NotFound(
                f"no publication is registered for namespace(s) {', '.join(map(repr, missing))}; "
                "register it with icrc72_register_publication first",
                code="namespace_not_found",
            )

    def may_publish(self, principal: str, namespace: str) -> bool:
        return self.publish_refusal(principal, namespace) is None

    def publish_refusal(self, principal: str, namespace: str) -> str | None:
        """Why ``principal`` may not publish to ``namespace`` (naming the list that refuses
        it, if one does), or None if it may."""
        conf = self.pub_configs.get(namespace)
        if conf is None:
            return f"no publication is registered for {namespace!r}"
        refused_by = conf.publisher_refusal(principal)
        if refused_by is not None:
            return f"{principal} may not publish to {namespace!r}: refused by its {refused_by}"
        listed = conf.publishers_allowed is not None and principal in conf.publishers_allowed
        if listed or principal in self.publishers.get(namespace, ()):
            return None
        return f"{principal} is not a registered publisher of {namespace!r}"

    def subscriber_allowed(self, namespace: str, principal: str, seq: int | None = None) -> bool:
        """Whether ``principal`` may subscribe to ``namespace`` now, or be sent the event
        ``seq`` of it (by the lists in force when that event was published)."""
        conf = self.pub_configs.get(namespace)
        if seq is not None:
            for upto, before in self.configs_before.get(namespace, ()):
                if seq <= upto:
                    conf = before
                    break
        return conf is not None and conf.subscriber_allowed(principal)

    def deliverable(
        self, principal: str, conf: cfg.SubscriptionConfig, events: Sequence[StoredEvent],
        data_of: Callable[[StoredEvent], Any], namespace: str | None = None,
    ) -> list[StoredEvent]:
        """The events, in order, that a subscription of ``principal`` with ``conf`` is
        sent: those its subscriber may be sent (``subscriber_allowed`` by each event's
        seq) that pass its filter and skip. ``namespace``: every event is of it.

        This runs for every subscription of every batch, so the usual case (one
        namespace whose lists have not changed since these events, no filter, no skip)
        costs no call per event (docs/benchmarks/history/2026-11-26-06-slow-day-many-rows-per-statement.md)."""
        if namespace is None or not events:
            allowed = [e for e in events if self.subscriber_allowed(e.namespace, principal, e.seq)]
        else:
            history = self.configs_before.get(namespace)
            if history and min(map(_seq, events)) <= history[-1][0]:
                allowed = [e for e in events if self.subscriber_allowed(namespace, principal, e.seq)]
            elif self.subscriber_allowed(namespace, principal):
                allowed = list(events)
            else:
                return []
        if conf.predicate is None and conf.skip is None:
            return allowed
        return [e for e in allowed if conf.passes(e.id, data_of(e))]

    def subscriber_refusal(self, namespace: str, principal: str) -> str | None:
        """The key of the publication's list that refuses ``principal`` as a subscriber now."""
        conf = self.pub_configs.get(namespace)
        return None if conf is None else conf.subscriber_refusal(principal)

    def namespaces_for(self, sub: SubscriptionRecord) -> list[str]:
        """The registered namespaces a subscription's namespace or pattern covers.

        A pattern does not cover a publication that approves each subscription: that
        approval is asked for one namespace at a time, at registration."""
        if not is_pattern(sub.namespace):
            return [sub.namespace]
        cached = self._pattern_cache.get(sub.namespace)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        match = self.matcher(sub.namespace)
        found = sorted(
            ns for ns in self.publications
            if match(ns) and self.pub_configs[ns].authorization_url is None and not is_system(ns)
        )
        self._pattern_cache[sub.namespace] = (self._version, found)
        return found

    def matcher(self, pattern: str) -> Callable[[str], bool]:
        m = self._matchers.get(pattern)
        if m is None:
            m = self._matchers[pattern] = matcher(pattern)
        return m

    def controls_publication(self, caller: PrincipalRecord, pub: PublicationRecord) -> bool:
        if caller.admin:
            return True
        controllers = self.pub_configs[pub.namespace].controllers
        return caller.name in controllers if controllers is not None else caller.name == pub.owner

    def controls_subscription(self, caller: PrincipalRecord, sub: SubscriptionRecord) -> bool:
        if caller.admin:
            return True
        controllers = self.sub_configs[sub.id].controllers
        return caller.name in controllers if controllers is not None else caller.name == sub.subscriber


def read_sub_config(pairs: Sequence[Sequence[Any]], *, strict: bool = False) -> cfg.SubscriptionConfig:
    """A stored config is read leniently: it was checked when written, and a later,
    stricter version must not lose a subscription at start."""
    try:
        return cfg.SubscriptionConfig.read(pairs)
    except cfg.ImproperConfig:
        if strict:
            raise
        return cfg.SubscriptionConfig()
