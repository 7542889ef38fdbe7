"""The broker: orchestrator, broadcaster and delivery of one process, and their lifecycle.

::

    async with Broker(settings, store) as broker:
        results = await broker.broadcaster.publish(principal, events)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..core.admission import Admission
from ..core.wire import ConfirmResult
from ..errors import ConfigError
from ..outbound import Outbound
from ..schemas import Retention, SchemaBinder, SchemaRegistry
from ..settings import Settings
from ..store import ClusterStore, PrincipalRecord, Store, StoredEvent, redact_address
from ..store.range_reader import reader_address
from ..tracing import TracingUnavailable
from ..tracing import start as start_tracing
from .auth import Authenticator, Authorizer
from .cluster import ClockWatch, Cluster, Commands, ControlLog, Forwarding, Membership, Outage, RegistrySync
from .delivery import DeadLetters, Delivery, Handshake, Signing, Tail, policy_for
from .metrics import Metrics
from .publish import Broadcaster, BroadcasterQueries, Overload
from .registry import Orchestrator, Registry
from .replay import RemotePusher, Replays

__all__ = ["Broker"]

log = logging.getLogger("tidings.broker")


class Broker:
    def __init__(self, settings: Settings, store: Store) -> None:
        shared = isinstance(store, ClusterStore)
        if shared:
            settings = _cluster_settings(settings)
        self.settings = settings
        self.store = store
        self.clock = store.clock
        """The one clock every part stamps and compares by (``core.clock``; docs/semantics.md,
        "Time"): the store's, so that what the store stamps agrees with it."""
        now_ns = self.clock.now_ns
        # Several broadcasters may share this store: each delivers the subscriptions it
        # holds the lease of (docs/scaling.md); alone, it delivers them all.
        self.membership = Membership(settings.broadcaster_id, _advertised(settings), shared=shared)
        owns = self.membership.owns if shared else None
        # A token revoked through another broadcaster stops working here within the
        # cluster's bound on stale state (docs/scaling.md, "Shared state"): 2 s.
        self.auth = Authenticator(store, cache_s=2.0, now_ns=now_ns)
        self.outbound = Outbound(
            policy_for(settings), per_host=settings.outbound_per_host, total=settings.outbound_max_connections,
            connect_timeout_s=settings.connect_timeout_s,
        )
        # Each part is built with the parts it calls, in an order with no cycle: the
        # registry (state) first; delivery and signing read it; the orchestrator changes
        # it and tells them (docs/architecture.md).
        self.registry = Registry()
        self.schemas = SchemaRegistry(store, assert_formats=settings.schema_format_assertion, clock=now_ns)
        self.binder = SchemaBinder(self.schemas)
        self.authorizer = Authorizer(self.outbound, now_ns=now_ns)
        self.signing = Signing(store, self.registry, settings, clock=now_ns)
        self.tail = Tail(0, settings.tail_capacity)
        self.metrics = Metrics()
        try:
            self.tracing = start_tracing(settings.tracing)
            """OpenTelemetry spans (docs/operations.md, "Tracing"); None when off: then free."""
        except TracingUnavailable as e:
            raise ConfigError(str(e)) from None
        self.delivery = Delivery(
            store, self.tail, settings, self.registry, on_gone=self._subscription_gone, metrics=self.metrics,
            outbound=self.outbound, signer=self.signing.sign, owns=owns, tracing=self.tracing,
            leases=self.membership if shared else None, now_ns=now_ns,
        )
        # With others, each change made here is also sent to them as a command on the log.
        # One outage for every loop of the cluster's work: told once, not once per loop.
        outage = Outage(logging.getLogger("tidings.cluster"))
        control = ControlLog(
            store, self.registry, self.membership, on_appended=self._logged, clock=now_ns, outage=outage,
        ) if shared else None
        commands = Commands(self.delivery, control) if control is not None else None
        self.orchestrator = Orchestrator(
            store, self.registry, broadcaster_id=settings.broadcaster_id,
            url_problem=self.outbound.registration_problem,
            listener=commands or self.delivery, authorizer=self.authorizer, schema_problem=self._schema_problem,
            on_subscription_created=self.signing.subscription_created,
            max_publications=settings.max_publications_per_principal,
            max_subscriptions=settings.max_subscriptions_per_principal,
            look_up=self._look_up if shared else None,
            **({"on_publication_changed": commands.publication_changed} if commands is not None else {}),  # type: ignore[arg-type]
            schemas_fresh=self.schemas.refresh, now_ns=now_ns,
            handshake=Handshake(
                self.outbound, urlsplit(self.membership.url).hostname or "tidings", timeout_s=settings.push_timeout_s,
            ).refusal,
        )
        self.dead_letters = DeadLetters(store, self.orchestrator, self.delivery)
        # Alone, a broadcaster owns every publication and has nobody to forward to.
        self.forwarding = Forwarding(
            self.membership, store, timeout_s=settings.forward_timeout_s,  # type: ignore[arg-type]
            stale_after_s=2 * settings.heartbeat_s + 0.5, clock=now_ns,
        ) if shared else None
        self.overload = Overload(
            Admission(settings.max_waiting_bytes, settings.max_waiting_requests),
            store=redact_address(settings.store) if settings.store else str(settings.db_path),
            timeout_s=settings.store_timeout_s, stall_s=settings.store_stall_s,
            probe=lambda: store.append([], []),
        )
        """What waits for the store: admission under the caps, each commit's bounded wait,
        stalls (``/readyz``, the log, ``/metrics``)."""
        self.broadcaster = Broadcaster(
            store,
            self.orchestrator,
            broadcaster_id=settings.broadcaster_id,
            max_batch_items=settings.max_batch_items,
            max_pending_events=settings.max_pending_events,
            on_appended=self._appended,
            schemas=self.binder,
            forwarding=self.forwarding,
            tracing=self.tracing,
            clock=now_ns,
            uncertainty_ns=self.clock.uncertainty_ns,
            max_clock_offset_s=settings.max_clock_offset_s,
            overload=self.overload,
        )
        self.retention = Retention(store, self.schemas, self.binder, self.orchestrator, clock=now_ns)
        self.clock_watch = ClockWatch(
            self.clock, max_offset_s=settings.max_clock_offset_s, shared=shared, me=settings.broadcaster_id,
        )
        self._clock_task: asyncio.Task[None] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._reclaim_task: asyncio.Task[None] | None = None
        reader = reader_address(store) if settings.replay_process and self.tracing is None else None
        self.replays = Replays(
            store, self.orchestrator, self.delivery, settings, owns=owns,
            remote=RemotePusher(settings, reader) if reader is not None else None, secrets=self.signing.live_secrets,
        )
        self._replay_task: asyncio.Task[None] | None = None
        self.broadcasters = BroadcasterQueries(store, self.orchestrator, self.membership)
        self.cluster: Cluster | None = None
        self._sync = RegistrySync(store, self.orchestrator, self.delivery, self.schemas.refresh)
        if isinstance(store, ClusterStore) and control is not None:
            self.cluster = Cluster(
                store, self.membership, self.delivery, self.replays, self.signing,  # type: ignore[arg-type]
                self._sync, self.tail, control,
                on_events=self._appended_elsewhere,
                heartbeat_s=settings.heartbeat_s, lease_s=settings.lease_s, outage=outage,
            )
        self._cluster_task: asyncio.Task[None] | None = None
        self._overload_task: asyncio.Task[None] | None = None
        self._draining = False
        self._started = False

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        await self.outbound.__aenter__()
        try:
            await self.store.open()
        except BaseException:  # an unreachable store: nothing else was started
            await self.outbound.__aexit__(None, None, None)
            raise
        try:
            await self.schemas.load()
            await self.orchestrator.load()
            await self.signing.load()
            head = await self.store.head()
            self.tail.floor = self.tail.head = head
            self._runner = asyncio.create_task(
                self.delivery.run(list(self.orchestrator.subscriptions.values())), name="tidings-delivery"
            )
            ready = asyncio.create_task(self.delivery.ready())
            await asyncio.wait([ready, self._runner], return_when=asyncio.FIRST_COMPLETED)
            if self._runner.done():
                ready.cancel()
                self._runner.result()  # raises what stopped delivery
            self._replay_task = asyncio.create_task(self.replays.run(), name="tidings-replays")
            self._overload_task = asyncio.create_task(self.overload.watch(), name="tidings-overload")
            if self.forwarding is not None:
                assert isinstance(self.store, ClusterStore)
                await self.forwarding.start(await self.store.peer_secret(secrets.token_bytes(32)))
            if self.cluster is not None:
                # Also the first reading of the database's clock: nothing is stamped by
                # this process's own before it.
                await self.cluster.beat()  # take this broadcaster's share before serving
                self._cluster_task = asyncio.create_task(self.cluster.run(), name="tidings-cluster")
            self._clock_task = asyncio.create_task(self._watch_clock(), name="tidings-clock")
            if self.settings.retention_interval_s > 0:
                self._retention_task = asyncio.create_task(
                    self.retention.run(self.settings.retention_interval_s), name="tidings-retention"
                )
            if self.settings.key_reclaim_interval_s > 0:
                self._reclaim_task = asyncio.create_task(
                    self.broadcaster.reclaim_keys(self.settings.key_reclaim_interval_s), name="tidings-key-reclaim"
                )
            self._started = True
        except BaseException:
            if self.forwarding is not None:
                await self.forwarding.close()
            await self.store.close()
            await self.outbound.__aexit__(None, None, None)
            raise

    @property
    def draining(self) -> bool:
        """Stopping: ``/readyz`` answers unready; set on SIGTERM, before anything stops."""
        return self._draining

    def begin_draining(self) -> None:
        self._draining = True

    async def readiness(self) -> list[str]:
        """Why this process should not be sent traffic now (empty: ready): stopping,
        not started, commits stalled, the store unreachable, or, with other broadcasters, its leases not
        renewed (its last heartbeats failed)."""
        problems = []
        if self._draining:
            problems.append("stopping")
        if not self._started:
            problems.append("starting: the registry is not loaded yet")
            return problems
        stalled = self.overload.problem()
        if stalled is not None:  # a read cannot see a writer stuck in fsync: the commits' age can
            problems.append(stalled)
        elif not self.overload.committed_within(1.0):
            # (Stalled, or committing now: the answer need not wait for a read that may hang
            # as well, or wait behind the backlog a stall leaves.)
            # Not wait_for: a read cancelled on a paused PostgreSQL waits out the driver's own
            # timeout (its cancel request gets no answer either); left to finish on its own.
            read = asyncio.ensure_future(self.store.head())
            done, _ = await asyncio.wait({read}, timeout=2.0)
            if not done:
                read.add_done_callback(_retrieved)
                problems.append("the store is unreachable: no answer to a read in 2 s")
            elif (e := read.exception()) is not None:
                problems.append(f"the store is unreachable: {e}")
        if self.cluster is not None and time.monotonic() > self.membership.valid_until:
            problems.append("its leases are not renewed: the last heartbeats failed")
        problems.extend(self.clock_watch.problems())
        return problems

    async def stop(self) -> None:
        """Stop gracefully: replays first (they push through the workers), then every
        worker finishes its push in flight and records it (within ``drain_s``), then the
        leases are released at once for the others to take, then the rest."""
        self._draining = True
        if self._replay_task is not None:
            self._replay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay_task
            self._replay_task = None
        if self._runner is not None:
            left = await self.delivery.drain(self.settings.drain_s)
            if left:
                log.warning("%d subscription(s) still pushing after %.1f s (TIDINGS_DRAIN_S): stopped; what they "
                            "pushed is sent again by whoever delivers them next", left, self.settings.drain_s)
        for task in (self._cluster_task, self._retention_task, self._reclaim_task, self._replay_task, self._clock_task,
                     self._overload_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._cluster_task = self._retention_task = self._reclaim_task = self._replay_task = self._clock_task = None
        self._overload_task = None
        await self.replays.close()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        if self.forwarding is not None:
            await self.forwarding.close()
        await self.store.close()
        await self.outbound.__aexit__(None, None, None)
        if self.tracing is not None:  # the spans still buffered go out now
            await asyncio.to_thread(self.tracing.close)

    async def ensure_admin(self, token_file: Path) -> str | None:
        """Create the first admin principal if there is none; its token goes to ``token_file``."""
        if any(p.admin for p in await self.store.list_principals()):
            return None
        token = await self.auth.create("admin", admin=True)
        if token is None:  # a non-admin took the name: give the admin another
            token = await self.auth.create("tidings-admin", admin=True)
        if token is None:
            return None
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token

    async def confirm(self, caller: PrincipalRecord, ids: Sequence[int]) -> ConfirmResult:
        return await self.delivery.confirm(caller, ids, self.orchestrator.subscriptions)

    def _schema_problem(self, ref: int | str) -> str | None:
        # The rule publish applies, asked at binding: a schema that would refuse every
        # event (unknown, deleted, Retracted, Deprecated past its window) is refused now.
        return self.binder.bind(ref, self.clock.now_ns()).refused

    async def _watch_clock(self) -> None:
        """Compare the wall clock with the cluster's at every heartbeat (``ClockWatch``)."""
        while True:
            w = self.clock_watch
            w.check()
            self.metrics.clock_offset_s, self.metrics.clock_uncertainty_s = w.offset_s, w.uncertainty_s
            await asyncio.sleep(self.settings.heartbeat_s)

    def _appended(self, events: list[StoredEvent]) -> None:
        self.metrics.events_published += len(events)
        self._logged(events)

    def _logged(self, events: list[StoredEvent]) -> None:
        """The control plane appended ``events``: delivered like any, not counted as published."""
        self.tail.extend(events)
        self.delivery.wake(events)
        if self.cluster is not None:
            self.cluster.appended_here(events)

    async def _look_up(self, namespaces: Sequence[str], principal: str | None) -> None:
        await self._sync.look_up(namespaces, principal)

    def _appended_elsewhere(self, events: list[StoredEvent]) -> None:
        """Another broadcaster appended ``events`` (read from the shared store)."""
        self.tail.extend(events)
        self.delivery.wake(events)

    async def _subscription_gone(self, sub_id: int, reason: str) -> None:
        """Delivery ended the subscription (410 Gone, or an error answer when not reliable).

        Its unconfirmed notifications are dead letters by now (``Delivery.ended``): they
        are kept after it, for its subscriber."""
        log.warning("subscription %s ended: %s", sub_id, reason)
        await self.orchestrator.end_subscription(sub_id)


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Its outcome is no longer awaited by anyone: read so it is not reported as lost."""
    if not fut.cancelled():
        fut.exception()


def _advertised(settings: Settings) -> str:
    """Where others reach this broadcaster: the setting, or the listen address (the host's
    name when it listens on every address)."""
    if settings.advertise_url:
        return settings.advertise_url.rstrip("/")
    host = settings.host
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def _cluster_settings(settings: Settings) -> Settings:
    if settings.heartbeat_s * 2 > settings.lease_s:
        raise ConfigError(
            f"TIDINGS_HEARTBEAT_S={settings.heartbeat_s} must be at most half of TIDINGS_LEASE_S={settings.lease_s}: "
            "a lease is renewed at every heartbeat"
        )
    if settings.broadcaster_id == Settings().broadcaster_id:
        where = settings.port or os.getpid()
        return settings.replace(broadcaster_id=f"{socket.gethostname()}:{where}")
    return settings


