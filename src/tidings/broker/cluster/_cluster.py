"""Several broadcasters on one shared store: membership, leases, and keeping up with the
others (docs/scaling.md, "Several broadcasters").

Every ``heartbeat_s`` each broadcaster records itself as alive and reads who else is.
Subscriptions are assigned over the live broadcasters by rendezvous hashing
(``core.assignment``); a broadcaster delivers a subscription only while it holds that
subscription's lease, which it renews at every heartbeat for ``lease_s``. So:

* when a broadcaster joins, the ones that held its share stop those workers and release
  their leases, and it takes them at its next heartbeat;
* when one dies, its leases lapse after ``lease_s`` and the others take its share: what
  it had recorded as pending is sent again by the new owner (duplicates only as
  ``(namespace, eventId)`` repeats), in event order, from the stored cursor;
* a broadcaster that cannot renew (its store is unreachable or slow, or it was itself
  stopped) stops pushing before its leases can lapse, by its own monotonic clock counted
  from when it asked for them (``Membership.valid_until``; the watchdog below stops its
  workers then, and a worker pushes nothing while the lease is not surely held); and
  what it writes for that work carries the lease's epoch, which the store checks, so a
  write it makes as it resumes from a pause is refused once another holds the lease.
  Two never push one subscription at once.

Changes made through another broadcaster reach this one as store signals (events
appended: read the log after the tail; registry changed: reload it) and, in case a
signal is lost, on the heartbeat timer too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from ...core.assignment import owner, subscription_key
from ...errors import StoreError
from ...store import CHANGE_LOG, CHANGE_LOST, CHANGE_REGISTRY, ClusterStore, Store, StoredEvent, SubscriptionRecord
from ...tasks import stop_if_cancelled
from ..delivery import Delivery, Signing, Tail
from ..replay import Replays
from ._control_log import ControlLog
from ._membership import Membership
from ._outage import Outage
from ._registry_sync import RegistrySync

__all__ = ["Cluster"]

log = logging.getLogger("tidings.cluster")

_READ = 1_000
_FULL_RELOADS = 2
_FULL_RELOAD_MIN_S = 2.0
"""The whole registry (and the schema registry's version) is compared with the store
every ``_FULL_RELOADS`` heartbeats (at most every ``_FULL_RELOAD_MIN_S``: the compare
reads every publication and subscription, and a very short heartbeat must not turn it
into a load), whatever the signals said: the bound within which a change made through
another broadcaster holds here even if its signal was lost (docs/scaling.md,
"Shared state")."""


class _ClusterStore(ClusterStore, Store):
    """A store several broadcasters share."""


class Cluster:
    def __init__(
        self, store: _ClusterStore, membership: Membership, delivery: Delivery, replays: Replays,
        signing: Signing, sync: RegistrySync, tail: Tail, control: ControlLog, *,
        on_events: Callable[[list[StoredEvent]], None], heartbeat_s: float = 1.0, lease_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic, outage: Outage | None = None,
    ) -> None:
        self.outage = outage if outage is not None else Outage(log, monotonic)
        self._store = store
        self.membership = membership
        self._delivery = delivery
        self._replays = replays
        self._signing = signing
        self._sync = sync
        self._tail = tail
        self._control = control
        self._opened = False
        self._lost = False
        self._full = False
        self._added: list[SubscriptionRecord] = []
        self._removed: list[SubscriptionRecord] = []
        self._on_events = on_events
        self.heartbeat_s = heartbeat_s
        self.full_reload_s = max(_FULL_RELOADS * heartbeat_s, _FULL_RELOAD_MIN_S)
        self.lease_s = lease_s
        self._monotonic = monotonic
        self.margin_s = max(0.1 * lease_s, 0.2)
        """Taken off each lease's term on this process's clock: room for the store's clock
        running faster than this one, and for the claim's reply in flight."""
        self._renewed = asyncio.Event()
        self._catch_up = asyncio.Event()
        self._reload = asyncio.Event()
        self._adopt = membership.reassess
        self._secrets: set[int] = set()
        self._stop_listening: Callable[[], Awaitable[None]] | None = None
        self._changing = asyncio.Lock()
        """Held while the leases held change together with the workers they start or stop:
        the watchdog lets go while a heartbeat takes, and a take must never find the
        worker of a lease being let go (it would keep it, then see it stopped, and the
        subscription would stay held by nobody's worker). No store call is made under it."""

    # -- signals from the others --------------------------------------------------------

    def _heard(self, kind: str, arg: str) -> None:
        if kind == CHANGE_LOST:
            self._lost = True
            self._adopt.set()  # the heartbeat loop listens again, then reads everything
        elif kind == CHANGE_LOG:
            self._catch_up.set()
        elif kind == CHANGE_REGISTRY:
            what, _, key = arg.partition(":")
            if what == "secret" and key.isdigit():
                self._secrets.add(int(key))
                self._reload.set()
            elif what == "replay":
                self._adopt.set()
            elif self._sync.changed(arg):
                self._reload.set()

    def appended_here(self, events: list[StoredEvent]) -> None:
        """This process appended ``events``: another's commits may lie before them."""
        if events and events[0].seq > self._tail.head + 1:
            self._catch_up.set()

    async def _follow_log(self) -> None:
        """Read into the tail what other broadcasters appended, and wake delivery for it."""
        while True:
            stop_if_cancelled()  # also when a store call returned from a cancel as if done
            await self._catch_up.wait()
            self._catch_up.clear()
            try:
                while True:
                    events = await self._store.read_after(self._tail.head, None, _READ)
                    if events:
                        self._on_events(events)
                        if [i for i in self._control.items_named(events) if self._sync.changed(i)]:
                            self._reload.set()
                    if len(events) < _READ:
                        break
            except StoreError as e:
                stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                self.outage.failed(f"reading the log after {self._tail.head}", e)
            except Exception as e:  # this loop outlives whatever one round met
                stop_if_cancelled(e)
                log.exception("reading the log after %s failed", self._tail.head)

    async def _follow_registry(self) -> None:
        last_full = self._monotonic()
        while True:
            stop_if_cancelled()  # also when a store call returned from a cancel as if done
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reload.wait(), self.full_reload_s)
            self._reload.clear()
            await asyncio.sleep(0.02)  # a burst of changes: one reload
            self._reload.clear()
            known = set(self._sync.subscription_ids())
            try:
                relistened = self._full
                if self._full or self._monotonic() - last_full >= self.full_reload_s:
                    self._full = False
                    last_full = self._monotonic()
                    await self._sync.reload_all()
                else:
                    await self._sync.reload()
                secrets, self._secrets = self._secrets, set()
                if relistened:  # signals may have been lost: a secret rotated meanwhile among them
                    secrets |= set(self.membership.held)
                for sub_id in secrets & self.membership.held:
                    await self._signing.reload(sub_id)
                if set(self._sync.subscription_ids()) - known:
                    self._adopt.set()  # new subscriptions: take this one's share now
            except StoreError as e:
                stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                self.outage.failed("reloading the registry", e)
            except Exception as e:  # this loop outlives whatever one round met
                stop_if_cancelled(e)
                log.exception("reloading the registry failed")

    # -- heartbeat and leases -----------------------------------------------------------

    async def _listen(self) -> None:
        """(Again) hear the others' signals, then read everything once: what changed
        before listening began was not signalled to this process."""
        if self._stop_listening is not None:
            await self._stop_listening()
            self._stop_listening = None
        try:
            self._stop_listening = await self._store.listen(self._heard)
        except StoreError as e:
            self.outage.failed("listening for the others' changes (following them on the timer only)", e)
            self._lost = True  # try again at the next heartbeat
        self._full = True
        self._reload.set()

    async def run(self) -> None:
        """Take part until cancelled; then leave, so the others take over at once. Whatever
        a round meets (a store that fails in a way nobody foresaw), the broadcaster goes on
        taking part: a cluster member that stops renewing without stopping its workers
        is the one failure the leases cannot cover."""
        try:
            while True:
                try:
                    await self._take_part()
                except Exception as e:
                    stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                    log.exception("taking part in the cluster failed; starting again")
                    await asyncio.sleep(self.heartbeat_s)
        finally:
            if self._stop_listening is not None:
                await self._stop_listening()
            with contextlib.suppress(StoreError, OSError):
                await self._let_go(set(self.membership.held))
            with contextlib.suppress(StoreError, OSError):
                await self._record()
                await asyncio.shield(self._store.leave(self.membership.me))

    async def _take_part(self) -> None:
        await self._listen()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._follow_log(), name="tidings-cluster-log")
            tg.create_task(self._follow_registry(), name="tidings-cluster-registry")
            tg.create_task(self._control.run(), name="tidings-cluster-commands")
            tg.create_task(self._watch(), name="tidings-cluster-watchdog")
            while True:
                stop_if_cancelled()  # ``beat`` takes a store's error, which may be a cancel, as an outage
                if self._lost:
                    self._lost = False
                    await self._listen()
                try:
                    # A beat that hangs (the store cut off) is given up on; the
                    # watchdog has stopped the workers by the time it is.
                    async with asyncio.timeout(self.lease_s):
                        await self.beat()
                except TimeoutError as e:  # the lease term's, or a cancel turned into one
                    stop_if_cancelled(e)
                    self.outage.failed(f"a heartbeat, which took longer than the lease term ({self.lease_s:.1f} s),", e)
                except Exception as e:  # a broadcaster keeps taking part whatever one beat met
                    stop_if_cancelled(e)
                    log.exception("heartbeat failed")
                self._catch_up.set()  # in case a signal was lost
                self._adopt.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._adopt.wait(), self.heartbeat_s)

    async def _watch(self) -> None:
        """Stop every worker once the leases may have lapsed, whatever the heartbeat is
        doing: it may hang on a store that is cut off. The next beat that gets its claim
        through takes back what is still this broadcaster's."""
        m = self.membership
        while True:
            left = m.valid_until - self._monotonic()
            if left > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._renewed.wait(), left)
                self._renewed.clear()
                continue
            if m.held:
                log.warning("the leases of %d subscription(s) were not renewed in time; stopping their delivery",
                            len(m.held))
                try:
                    await self._let_go(set(m.held), release=False)
                except Exception as e:  # the workers are stopped first; what failed after is logged
                    stop_if_cancelled(e)
                    log.exception("stopping the delivery of lapsed leases failed")
                stop_if_cancelled()  # letting go may have returned from a cancel as if done
            await self._renewed.wait()
            self._renewed.clear()

    async def beat(self) -> None:
        """One heartbeat: who is alive, which subscriptions are ours, take and give leases."""
        m = self.membership
        try:
            if not self._opened:
                await self._control.open()
                self._opened = True
            m.nodes = [
                n for n in await self._store.heartbeat(m.me, m.url, forget_after_s=3 * self.lease_s)
                if n.seen_ms_ago <= self.lease_s * 1000 or n.id == m.me
            ]
            m.nodes_read_at = self._monotonic()
            live = [n.id for n in m.nodes]
            mine = {i for i in self._sync.subscription_ids() if owner(subscription_key(i), live) == m.me}
            # First give back what is no longer ours (stopped before released), then renew
            # and take: a broadcaster never holds a lease it does not deliver under.
            await self._let_go(m.held - mine)
            asked = self._monotonic()  # the store times the leases from later than this
            claimed = await self._store.claim_leases(m.me, [subscription_key(i) for i in sorted(mine)], self.lease_s)
        except StoreError as e:
            self.outage.failed("a heartbeat", e)
            return
        self.outage.back()
        held = {int(k.partition(":")[2]): epoch for k, epoch in claimed.items()}
        # Taken by another meanwhile, or lost and taken again under a new epoch: the
        # worker of the old epoch stops (its writes would be refused).
        await self._let_go({i for i in m.held if held.get(i) != m.epochs.get(i)}, release=False)
        m.valid_until = asked + self.lease_s - self.margin_s
        m.epochs.update(held)
        self._renewed.set()
        try:
            for sub_id in sorted(held.keys() - m.held):
                await self._take(sub_id)
            await self._replays.adopt(m.held)
        except StoreError as e:  # what was not taken yet is taken at the next heartbeat
            self.outage.failed("taking subscriptions", e)
        await self._record()

    async def _record(self) -> None:
        """Write this heartbeat's changes to the control-plane namespace (``_control_log``)."""
        added, removed, self._added, self._removed = self._added, self._removed, [], []
        try:
            await self._control.record(added, removed)
        except StoreError as e:
            self.outage.failed(f"recording {len(added) + len(removed)} assignment change(s)", e)

    async def _take(self, sub_id: int) -> None:
        m = self.membership
        sub = await self._sync.fresh(sub_id)  # its cursor as the last owner left it
        if sub is None:
            m.epochs.pop(sub_id, None)
            await self._store.release_leases(m.me, [subscription_key(sub_id)])
            return
        await self._signing.reload(sub_id)
        async with self._changing:
            if sub_id not in m.epochs or sub_id in m.held:
                return  # let go meanwhile (the watchdog), or taken already: the next beat decides
            # A worker of an earlier lease may still be stopping: it goes first, so the one
            # started here is the one that delivers, under this lease's epoch.
            await self._delivery.stop_worker(sub_id)
            m.held.add(sub_id)
            self._delivery.add(sub)
        self._added.append(sub)
        log.info("delivering subscription %s here", sub_id)

    async def _let_go(self, sub_ids: set[int], *, release: bool = True) -> None:
        if not sub_ids:
            return
        m = self.membership
        async with self._changing:
            sub_ids = sub_ids & m.held  # what another let go meanwhile is stopped already
            if not sub_ids:
                return
            m.held -= sub_ids
            for i in sub_ids:
                m.epochs.pop(i, None)
            # A subscription deleted meanwhile is recorded by its id alone.
            self._removed += [
                self._sync.known(i) or SubscriptionRecord(id=i, subscriber="", namespace="", endpoint=None)
                for i in sorted(sub_ids)
            ]
            if release:
                # Handed over while the lease is still ours: the push in flight finishes and
                # is recorded first, within a share of the term the others' heartbeats allow.
                await self._delivery.hand_off(sub_ids, 0.4 * self.lease_s)
            else:  # the lease may be another's already: at once
                for sub_id in sorted(sub_ids):
                    await self._delivery.stop_worker(sub_id)
        try:
            await self._replays.adopt(m.held)
        except StoreError as e:  # adopted again at the next heartbeat
            log.warning("stopping the replays of subscriptions delivered elsewhere now failed: %s", e)
        if release:
            # Recorded on the control-plane log before the lease is free: the next holder's
            # record of taking it then comes after this one's of giving it up.
            await self._record()
            with contextlib.suppress(StoreError):
                await self._store.release_leases(m.me, [subscription_key(i) for i in sorted(sub_ids)])
        log.info("subscriptions %s are delivered elsewhere now", sorted(sub_ids))

