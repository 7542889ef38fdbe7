"""ICRC-77 replays: register, run, cancel, report, and the credit they spend.

Each replay runs as its own task, beside the subscriptions' live workers: it reads its
range (hot log or archive, :mod:`._source`), applies the filter and skip
(:mod:`._send`), and sends batches one at a time (:mod:`._flow`). A batch
to a trusted subscription, with no price, is pushed first and recorded as delivered,
with the new position, once confirmed; any other batch is recorded first (the
notifications, a copy of each event with the replay headers, the position, the credit
debit, in one store transaction) and then pushed through the subscription's own
delivery path (retries, confirmation, dead letters). The task yields between batches,
so live batches of the same subscription keep going out meanwhile.

After a restart, a ``running`` replay resumes after its stored position; what it had
recorded and not yet had confirmed is pending and is sent again by the subscription's
worker, like any pending notification. docs/replay.md has the rules.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import logging
from collections.abc import Callable, Sequence

from ...core import config as cfg
from ...core import replay as rules
from ...core import values
from ...core.wire import GenericError
from ...core.wire_replay import (
    CreditBalance,
    CreditFunding,
    ReplayQuery,
    ReplayRegistration,
    ReplayResult,
    ReplayStatus,
    ReplayStatusUpdate,
    replay_err,
    replay_ok,
)
from ...errors import Forbidden, LeaseLost, LimitReached, StoreError, StoreUnavailable, Unavailable
from ...settings import Settings
from ...store import InsufficientCredit, PrincipalRecord, ReplayRecord, Store, SubscriptionRecord
from ...tasks import stop_if_cancelled
from ..delivery import Delivery
from ..registry import Orchestrator
from ._flow import InFlight
from ._remote import RemotePusher
from ._report import status_of
from ._send import RangeSender
from ._source import ReplaySource

__all__ = ["TOO_MANY_CONCURRENT", "TOO_MANY_FOR_PRINCIPAL", "Replays"]

log = logging.getLogger("tidings.replay")

TOO_MANY_FOR_PRINCIPAL = 7701
"""GenericError code: the requester has ``replay_max_per_principal`` replays active."""
TOO_MANY_CONCURRENT = 7702
"""GenericError code: ``replay_max_concurrent`` replays are active."""
_SWEEP_S = 5.0
_SETTLE_WAIT_S = 1.0
"""How long a cancel waits for a replay's push in flight to be answered (``InFlight.direct_done``)."""
_SWEEP_CHUNK = 2_000


class Replays:
    def __init__(
        self, store: Store, orchestrator: Orchestrator, delivery: Delivery, settings: Settings,
        *, owns: Callable[[int], bool] | None = None, remote: RemotePusher | None = None,
        secrets: Callable[[int], list[str]] = lambda _sub_id: [],
    ) -> None:
        self._store = store
        self._owns = owns
        """Whether this process delivers a subscription: a replay runs where its
        subscription is delivered (``adopt``); all here if None."""
        self._orch = orchestrator
        self._delivery = delivery
        self._settings = settings
        self.source = ReplaySource(store, settings)
        self._stop: set[int] = set()
        """Replays canceled or ended from outside while their task runs."""
        self.remote = remote
        """The replay process (``_pusher``), or None: replays run in the broker."""
        self._sender = RangeSender(
            orchestrator, self.source, settings, self._stop, clock=delivery.now_ns, delivery=delivery, remote=remote,
            secrets=secrets,
        )
        self._active: dict[int, ReplayRecord] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._flights: dict[int, InFlight] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._lock = asyncio.Lock()
        self._ready = asyncio.Event()

    async def run(self) -> None:
        """Run (and resume) replays until cancelled."""
        await self._delivery.ready()
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            await self._sweep()
            for rec in await self._store.list_replays(states=sorted(rules.ACTIVE)):
                self._active[rec.id] = rec
                self._start(rec)
            self._ready.set()  # registrations wait for this: the limits count the loaded replays
            try:
                while True:
                    stop_if_cancelled()  # also when a store call returned from a cancel as if done
                    await asyncio.sleep(_SWEEP_S)
                    try:
                        await self._sweep()
                    except StoreError as e:
                        stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                        # The store stalls, restarts or fails over: the next round sweeps (its
                        # outage is logged once, by the store). Raised, it would end every
                        # replay's task with this loop's TaskGroup.
                        continue
            finally:
                self._tg = None
                for t in self._tasks.values():
                    t.cancel()

    async def ready(self) -> None:
        await self._ready.wait()

    async def _sweep(self) -> None:
        """Drop event copies no notification needs any more, a bounded chunk per write so
        live commits are never held up long."""
        while await self._store.sweep_replay_notes(_SWEEP_CHUNK) == _SWEEP_CHUNK:
            await asyncio.sleep(0.01)  # leave the writer to live commits in between

    def _start(self, rec: ReplayRecord) -> None:
        if self._tg is None or rec.id in self._tasks:
            return
        if self._owns is not None and not self._owns(rec.subscription_id):
            self._active.pop(rec.id, None)  # the broadcaster delivering it runs it (``adopt``)
            return
        task = self._tg.create_task(self._drive(rec.id), name=f"tidings-replay-{rec.id}")
        self._tasks[rec.id] = task
        task.add_done_callback(functools.partial(self._forget, rec.id))

    def _forget(self, rid: int, _task: object = None) -> None:
        self._tasks.pop(rid, None)

    async def adopt(self, held: set[int]) -> None:
        """With several broadcasters: run the active replays of the subscriptions this one
        delivers (``held``), wherever they were registered, and stop those that another
        broadcaster ended or that are no longer delivered here."""
        active = {r.id: r for r in await self._store.list_replays(states=sorted(rules.ACTIVE))}
        for rid, task in list(self._tasks.items()):
            rec = active.get(rid) or self._active.get(rid)
            if rid not in active:
                self._stop.add(rid)  # canceled or reported ended through another broadcaster
            elif rec is not None and rec.subscription_id not in held:
                task.cancel()  # its subscription moved: the new owner resumes it
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait([task])
                self._active.pop(rid, None)
        for rid, rec in active.items():
            if rec.subscription_id in held and rid not in self._tasks:
                self._active[rid] = rec
                self._start(rec)

    # -- registration -------------------------------------------------------------------

    def _subscriptions_of(self, principal: str, namespace: str) -> list[SubscriptionRecord]:
        return sorted(
            (s for s in self._orch.subscriptions.values()
             if s.subscriber == principal and namespace in self._orch.namespaces_for(s)),
            key=lambda s: s.id,
        )

    async def _all_active(self) -> list[ReplayRecord]:
        """The pending and running replays the limits and credit count: with several
        broadcasters (``owns``), those of the store, wherever they run or are about to
        (one whose subscription is not yet delivered anywhere is in no process's list);
        the ones running here carry their newer position."""
        if self._owns is None:
            return list(self._active.values())
        stored = {r.id: r for r in await self._store.list_replays(states=sorted(rules.ACTIVE))}
        return list((stored | {rid: r for rid, r in self._active.items() if rid in stored}).values())

    @staticmethod
    def _reserved(active: list[ReplayRecord], principal: str) -> int:
        """Credit the principal's active replays may still spend (their price times what is left)."""
        return sum(r.price * (r.to_id - 1 - r.position) for r in active if r.requester == principal)

    async def register(self, caller: PrincipalRecord, regs: Sequence[ReplayRegistration]) -> list[ReplayResult]:
        try:
            async with asyncio.timeout(30):
                await self._ready.wait()
        except TimeoutError:
            raise Unavailable("replays are not running yet; try again", code="unavailable") from None
        out = []
        async with self._lock:  # the limits and the credit are checked and taken together
            for reg in regs:
                out.append(await self._register(caller, reg))
        return out

    async def _register(self, caller: PrincipalRecord, reg: ReplayRegistration) -> ReplayResult:
        ns = reg.namespace
        pub = self._orch.publications.get(ns)
        if pub is None:
            return replay_err("PublicationNotFound", f"no publication is registered for {ns!r}")
        if not self._orch.subscriber_allowed(ns, caller.name):
            return replay_err("UnauthorizedSubscriber", {"namespace": ns})
        for key, value in reg.config:
            try:
                values.check(value, f"$.config.{key}")
            except values.InvalidValue as e:
                return replay_err("ImproperConfig", str(e))
        if reg.memo is not None:
            try:
                memo = base64.b64decode(reg.memo, validate=True)
            except (binascii.Error, ValueError):
                return replay_err("ImproperConfig", "memo must be base64")
            if len(memo) > 32:
                return replay_err("ImproperConfig", f"memo holds {len(memo)} bytes; at most 32")
        subs = self._subscriptions_of(caller.name, ns)
        try:
            wanted = rules.ReplayConfig.read(reg.config).subscription
            if wanted is not None:
                target = self._orch.subscriptions.get(wanted)
                if target is None:
                    return replay_err("SubscriptionNotFound", f"there is no subscription {wanted}")
                if target.subscriber != caller.name:
                    return replay_err("Unauthorized", f"subscription {wanted} is not {caller.name}'s")
                if target not in subs:
                    return replay_err("SubscriptionNotFound", f"subscription {wanted} does not cover {ns!r}")
            elif not subs:
                return replay_err(
                    "SubscriptionNotFound", f"{caller.name} has no subscription covering {ns!r} to replay to"
                )
            else:
                target = subs[0]
            if target.endpoint is None:
                return replay_err("ImproperConfig", f"subscription {target.id} has no endpoint")
            rules.ReplayConfig.read(reg.config, target.config)  # refuse a bad filter or skip now
            start, end = reg.range
            lo, hi = rules.resolve_range(
                start, end, await self._store.last_event_id(ns), self._settings.replay_max_range
            )
        except rules.ReplayRuleError as e:
            return replay_err(e.code, e.message)
        try:
            pricing = rules.read_pricing(pub.config)
        except cfg.ImproperConfig as e:
            return replay_err("GenericError", GenericError(500, f"the publication's pricing is invalid: {e}"))
        active = await self._all_active()
        mine = sum(1 for r in active if r.requester == caller.name)
        if mine >= self._settings.replay_max_per_principal:
            return replay_err("GenericError", GenericError(TOO_MANY_FOR_PRINCIPAL, (
                f"busy: {caller.name} has {mine} replays pending or running; at most "
                f"{self._settings.replay_max_per_principal} (cancel one or wait)"
            )))
        if len(active) >= self._settings.replay_max_concurrent:
            return replay_err("GenericError", GenericError(TOO_MANY_CONCURRENT, (
                f"busy: {len(active)} replays are pending or running; at most "
                f"{self._settings.replay_max_concurrent}; try again later"
            )))
        price = 0 if pricing is None else pricing.per_event
        cost = rules.cost(pricing, hi - lo)
        if cost:
            balance = await self._store.credit_balance(caller.name)
            reserved = self._reserved(active, caller.name)
            if balance - reserved < cost:
                unit = f" {pricing.currency}" if pricing is not None and pricing.currency else ""
                return replay_err("PaymentRequired", (
                    f"replaying [{lo}, {hi}) of {ns!r} costs up to {cost}{unit} ({hi - lo} events at {price} each); "
                    f"{caller.name}'s credit is {balance}, of which {reserved} is held by active replays"
                ))
        now = self._delivery.now_ns()
        try:
            # The count above is this moment's; the store's, taken with the insert, is the
            # one that holds when replays are registered at once through several members.
            rec = await self._store.create_replay(ReplayRecord(
                requester=caller.name, namespace=ns, subscription_id=target.id, from_id=lo, to_id=hi,
                open_end=end is None, config=[list(p) for p in reg.config], memo=reg.memo, state="pending",
                position=lo - 1, expected=hi - lo, price=price, created_at=now, updated_at=now,
            ), limit=self._settings.replay_max_per_principal, total=self._settings.replay_max_concurrent)
        except LimitReached as e:
            if e.everyone:
                return replay_err("GenericError", GenericError(TOO_MANY_CONCURRENT, (
                    f"busy: {self._settings.replay_max_concurrent} replays are pending or running (registered "
                    "meanwhile); try again later"
                )))
            return replay_err("GenericError", GenericError(TOO_MANY_FOR_PRINCIPAL, (
                f"busy: {caller.name} has {self._settings.replay_max_per_principal} replays pending or running "
                "(registered meanwhile); cancel one or wait"
            )))
        self._active[rec.id] = rec
        self._start(rec)
        return replay_ok(rec.id)

    # -- running ------------------------------------------------------------------------

    async def _drive(self, rid: int) -> None:
        try:
            await self._run_one(rid)
        except asyncio.CancelledError:
            raise
        except InsufficientCredit as e:
            await self._finish(rid, "errored", f"PaymentRequired: {e}")
        except (LeaseLost, StoreUnavailable) as e:
            stop_if_cancelled(e)  # a shutdown's cancel turned into a store's error: left as it is
            # Not this replay's fault: it stays active, where it got to is stored, and it
            # goes on from there (here at the next heartbeat's adoption, or on the
            # broadcaster that delivers its subscription now).
            log.warning("replay %s paused: %s", rid, e)
            self._active.pop(rid, None)
        except Exception as e:
            stop_if_cancelled(e)  # not a failure of the replay: it goes on after the restart
            log.exception("replay %s failed", rid)
            await self._finish(rid, "errored", f"{type(e).__name__}: {e}")

    async def _finish(self, rid: int, state: str, detail: str = "") -> None:
        await self._store.move_replay(rid, state, detail=detail, from_states=rules.ACTIVE, now=self._delivery.now_ns())
        self._active.pop(rid, None)
        self._stop.discard(rid)

    async def _run_one(self, rid: int) -> None:
        rec = await self._store.move_replay(
            rid, "running", from_states=["pending", "running"], now=self._delivery.now_ns()
        )
        if rec is None:  # canceled before it started
            self._active.pop(rid, None)
            return
        self._active[rid] = rec
        inflight = self._flights[rid] = InFlight(self._delivery, self._store, rec, lambda: rid in self._stop)
        try:
            problem = await self._send(rec, inflight)
        finally:
            self._flights.pop(rid, None)
        if problem is not None:
            return await self._finish(rid, "errored", problem)
        if rid in self._stop or rec.position < rec.to_id - 1:
            # Stopped from outside (cancel or a status update): the state is already set.
            self._active.pop(rid, None)
            self._stop.discard(rid)
            return
        await self._finish(rid, "completed")

    # -- cancel, status, queries --------------------------------------------------------

    async def _get(self, ids: Sequence[int]) -> dict[int, ReplayRecord]:
        return {r.id: r for r in await self._store.get_replays(list(set(ids)))}

    async def cancel(self, caller: PrincipalRecord, ids: Sequence[int]) -> list[ReplayResult]:
        found = await self._get(ids)
        out = []
        for rid in ids:
            rec = found.get(rid)
            if rec is None:
                out.append(replay_err("NotFound", f"there is no replay {rid}"))
            elif not (caller.admin or caller.name == rec.requester):
                out.append(replay_err("Unauthorized", f"replay {rid} is {rec.requester}'s"))
            elif await self._move_from_outside(rid, "canceled") is None:
                state = (await self._get([rid]))[rid].state
                out.append(replay_err("CannotCancel", f"replay {rid} is already {state}"))
            else:
                out.append(replay_ok(rid))
        return out

    async def _send(self, rec: ReplayRecord, inflight: InFlight) -> str | None:
        """Send the range; why it had to stop, or None (once what is in flight is answered)."""
        try:
            problem = await self._sender.send(rec, inflight)
        except asyncio.CancelledError:
            inflight.cancel()  # shutdown: the subscription's worker resends it after the restart
            raise
        except Exception:
            await inflight.drain()  # what was recorded is pushed
            raise
        if not await inflight.drain() and problem is None:
            problem = f"subscription {rec.subscription_id} ended"
        return problem

    async def _move_from_outside(self, rid: int, state: str, detail: str = "") -> ReplayRecord | None:
        moved = await self._store.move_replay(
            rid, state, detail=detail, from_states=rules.ACTIVE, now=self._delivery.now_ns()
        )
        if moved is not None:
            if rid in self._tasks:
                self._stop.add(rid)
            self._active.pop(rid, None)
            flight = self._flights.get(rid)
            if flight is not None:
                # A batch pushed before being recorded counts once answered: wait a little
                # for it, so that the count this answer leads to (canceled(n)) is usually
                # the final one, without holding the caller up for a slow endpoint.
                await flight.direct_done(min(_SETTLE_WAIT_S, self._settings.push_timeout_s))
        return moved

    async def status_updates(
        self, caller: PrincipalRecord, updates: Sequence[ReplayStatusUpdate]
    ) -> list[ReplayResult]:
        """``icrc77_replay_status``: a publisher of the namespace (or an admin) reports that a
        replay ended: ``completed``, ``canceled`` or ``errored``; tidings stops sending it.
        ``pending``/``running`` are tidings' own to set and are refused."""
        found = await self._get([u.replayId for u in updates])
        out = []
        for u in updates:
            rec = found.get(u.replayId)
            state = u.status.name
            if rec is None:
                out.append(replay_err("NotFound", f"there is no replay {u.replayId}"))
                continue
            pub = self._orch.publications.get(rec.namespace)
            allowed = caller.admin or caller.name in self._orch.publishers.get(rec.namespace, ()) or (
                pub is not None and self._orch.controls_publication(caller, pub)
            )
            if not allowed:
                out.append(replay_err("Unauthorized", f"{caller.name} is not a publisher of {rec.namespace!r}"))
            elif state not in rules.TERMINAL:
                out.append(replay_err("ImproperConfig", f"{state} is set by tidings itself"))
            elif not rules.can_move(rec.state, state) or await self._move_from_outside(
                u.replayId, state, _detail(u)
            ) is None:
                out.append(replay_err("CannotCancel", f"replay {u.replayId} is already {rec.state}"))
            else:
                out.append(replay_ok(True))
        return out

    async def query(self, caller: PrincipalRecord, q: ReplayQuery) -> list[ReplayStatus]:
        f = q.filter
        namespace = f.namespace if f is not None else None
        requester = f.requester if f is not None else None
        state = f.state if f is not None else None
        if state is not None and state not in rules.STATES:
            return []
        if not caller.admin:
            pub = self._orch.publications.get(namespace) if namespace is not None else None
            if pub is None or not self._orch.controls_publication(caller, pub):
                if requester not in (None, caller.name):
                    return []
                requester = caller.name
        take = 100 if q.take is None else max(0, min(q.take, self._settings.max_batch_items))
        recs = await self._store.list_replays(
            q.prev, take, namespace=namespace, states=None if state is None else [state], requester=requester
        )
        counts = await self._store.replay_counts([r.id for r in recs])
        return [status_of(r, counts[r.id].pending, counts[r.id].dead_lettered) for r in recs]

    # -- credit -------------------------------------------------------------------------

    async def fund(self, caller: PrincipalRecord, items: Sequence[CreditFunding]) -> list[ReplayResult]:
        if not caller.admin:  # admin-only: the whole call is refused, as every admin-only method (docs/rights.md)
            raise Forbidden("only an admin funds replay credit")
        out = []
        for item in items:
            try:
                out.append(replay_ok(await self._store.fund_credit(item.principal, item.amount)))
            except InsufficientCredit as e:
                out.append(replay_err("ImproperConfig", str(e)))
        return out

    async def balances(self, caller: PrincipalRecord, principals: Sequence[str]) -> list[ReplayResult]:
        out = []
        active: list[ReplayRecord] | None = None  # read once for the whole call
        for p in principals:
            if not (caller.admin or caller.name == p):
                out.append(replay_err("Unauthorized", f"only {p} and admins see {p}'s credit"))
                continue
            balance = await self._store.credit_balance(p)
            if active is None:
                active = await self._all_active()
            reserved = self._reserved(active, p)
            out.append(replay_ok(CreditBalance(principal=p, balance=balance, reserved=reserved)))
        return out

    async def close(self) -> None:
        if self.remote is not None:
            await self.remote.close()
        self.source.close()


def _detail(u: ReplayStatusUpdate) -> str:
    text = u.status.errored
    return text if isinstance(text, str) else ""
