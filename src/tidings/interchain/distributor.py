"""The Interchain Event Distributor: replication between networks, and notification.

On an event seen on network N (the "subscription to all events" of the spec):

1. ``publishedEvents:N`` gets its global id (it is on N);
2. for every other network M, the id is added to ``publishedEvents:M`` and, *only when
   SADD says it was missing*, the body (``network`` stripped) is queued in M's outbox;
3. for every subscription of interest it matches, the id is added to
   ``notifiedEvents:<sub>`` and, only when it was missing, the notification (``network``
   stripped) is queued in the subscription's outbox.

Each of these is one atomic :meth:`State.mark`, so however many networks deliver the
same id at once, each missing network gets one republish and each subscription one
notification. Direct publication (``publishEvent``) marks every network the same way.

One worker per outbox sends its payloads in order, one at a time, retrying the head
with back-off while the target is down: events wait for a network that is away and
reach it in order once it is back. A payload is removed only after the target took it
(compare-and-pop: only if it is still the head), so a crash between the two sends it
again: at least once to networks, whose published sets absorb the repeat.

Consumers: each notification carries an ``Idempotency-Key`` (one per subscription and
global id, the same on every redelivery); the consumer's 2xx is recorded by removing the
item from the outbox and adding its id to ``deliveredEvents:<sub>`` in one atomic step.
A SIGKILL before that step sends the same notification, same key, again; after it,
never. So a consumer that keeps the keys it has acted on (before answering 2xx) acts on
each event exactly once (docs/interchain.md, "Exactly once to consumers").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import random
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from ..core.interchain import (
    IDEMPOTENCY_HEADER,
    DltPublish,
    DltSubscribe,
    EventNotification,
    InvalidEvent,
    NetworkNotification,
    global_id,
    idempotency_key,
    matches,
    publish_body_of,
    strip_network,
    validate_publish,
)
from ..core.netpolicy import AddressPolicy
from ..core.retry import Backoff
from ..outbound import Outbound
from ..tasks import stop_if_cancelled
from .adapters import Network
from .errors import NetworkUnavailable
from .state import Mark, State, delivered_set, notified_set, published_set

__all__ = ["Distributor", "Subscription"]

log = logging.getLogger("tidings.interchain")

_encode = msgspec.json.Encoder().encode
_decode_publish = msgspec.json.Decoder(DltPublish).decode
_decode_sub = msgspec.json.Decoder(DltSubscribe).decode
_decode_note = msgspec.json.Decoder(EventNotification).decode
_BATCH = 100
_SEND_BACKOFF = Backoff(initial_s=0.05, maximum_s=5.0)
_FOLLOW_BACKOFF = Backoff(initial_s=0.2, maximum_s=5.0)
CRASH_ENV = "TIDINGS_IED_CRASH_AT"
"""Test hook: ``acked`` makes the process SIGKILL itself once a consumer has answered
2xx and before that answer is recorded: the one window docs/interchain.md describes."""


def _crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class Subscription:
    id: str
    body: DltSubscribe

    @staticmethod
    def id_of(body: DltSubscribe) -> str:
        """The same body gives the same id: subscribing twice does not notify twice."""
        return hashlib.sha256(_encode(body)).hexdigest()[:16]


@dataclass
class _Outbox:
    target: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    failing: bool = False
    sent: int = 0


class Distributor:
    def __init__(
        self,
        networks: Sequence[Network],
        state: State,
        *,
        backoff: Backoff = _SEND_BACKOFF,
        restart_backoff: Backoff = _FOLLOW_BACKOFF,
        notify_timeout_s: float = 10.0,
        outbound: Outbound | None = None,
    ) -> None:
        self.networks = {n.name: n for n in networks}
        self.state = state
        self.backoff = backoff
        self.restart_backoff = restart_backoff
        self.subscriptions: dict[str, Subscription] = {}
        self._outboxes: dict[str, _Outbox] = {}
        self._tg: asyncio.TaskGroup | None = None
        self.outbound = outbound or Outbound(AddressPolicy(restricted=False))
        """Consumers' endpoints are called through it (docs/security.md)."""
        self._notify_timeout = notify_timeout_s
        self.following: dict[str, bool] = dict.fromkeys(self.networks, False)
        self._state_told = False

    # -- lifecycle --------------------------------------------------------------------

    async def load(self) -> None:
        """Read the kept subscriptions (call before serving requests)."""
        for sub_id, raw in await self.state.subscriptions():
            self.subscriptions[sub_id] = Subscription(sub_id, _decode_sub(raw))

    async def run(self, *, follow: bool = True) -> None:
        """Follow every network and drain every outbox until cancelled; with ``follow``
        False, only drain the outboxes (a sending-only instance)."""
        await self.outbound.__aenter__()
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for name in self.networks:
                    if follow:
                        tg.create_task(self._supervise(name), name=f"follow:{name}")
                    self._start_outbox(f"net:{name}")
                for sub_id in self.subscriptions:
                    self._start_outbox(f"sub:{sub_id}")
        finally:
            self._tg = None
            await self.outbound.__aexit__(None, None, None)

    def _start_outbox(self, target: str) -> None:
        if target in self._outboxes or self._tg is None:
            return
        box = self._outboxes[target] = _Outbox(target)
        self._tg.create_task(self._drain(box), name=f"outbox:{target}")

    def _wake(self, target: str) -> None:
        box = self._outboxes.get(target)
        if box is not None:
            box.wake.set()

    async def _supervise(self, name: str) -> None:
        network = self.networks[name]
        attempt = 0
        while True:
            stop_if_cancelled()  # also when a library returned from a cancel as if done
            try:
                self.following[name] = True
                await network.follow(lambda found, origin=name: self.on_events(origin, found))  # type: ignore[misc]
                attempt = 0
            except Exception as e:
                stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                attempt += 1
                level = logging.WARNING if attempt == 1 else logging.DEBUG
                log.log(level, "following %s failed (try %d): %r", name, attempt, e)
            self.following[name] = False
            await asyncio.sleep(self.restart_backoff.delay(max(attempt, 1), random.random()))

    # -- the flows --------------------------------------------------------------------

    async def on_event(self, origin: str, n: NetworkNotification) -> None:
        """An event seen on network ``origin``: replicate it where it is missing, notify
        the subscriptions that want it and have not had it."""
        await self.on_events(origin, [n])

    async def on_events(self, origin: str, found: list[NetworkNotification]) -> None:
        """Events seen on ``origin``, in its order: their marks go in one round trip."""
        marks: list[Mark] = []
        for n in found:
            try:
                body = publish_body_of(n)
                gid = validate_publish(body)
            except InvalidEvent as e:
                log.warning("%s: event %s ignored: %s", origin, n.id, e)
                continue
            payload = _encode(body)
            marks.append(Mark(published_set(origin), gid))
            marks += [Mark(published_set(m), gid, f"net:{m}", payload) for m in self.networks if m != origin]
            subs = [s for s in self.subscriptions.values() if matches(s.body, n.eventType, n.relevantMetadata)]
            if subs:
                note = _encode(strip_network(n))
                marks += [Mark(notified_set(s.id), gid, f"sub:{s.id}", note) for s in subs]
        if not marks:
            return
        added = await self.state.mark(marks)
        for m, new in zip(marks, added, strict=True):
            if new and m.outbox is not None:
                self._wake(m.outbox)

    async def publish(self, body: DltPublish) -> str:
        """Direct publication: queue ``body`` for every network that does not have it yet.

        Returns the global id. Marking the networks now means that when they deliver the
        event back, nothing is republished."""
        gid = validate_publish(body)
        payload = _encode(body)
        marks = [Mark(published_set(m), gid, f"net:{m}", payload) for m in self.networks]
        for m, new in zip(marks, await self.state.mark(marks), strict=True):
            if new and m.outbox is not None:
                self._wake(m.outbox)
        return gid

    async def subscribe(self, body: DltSubscribe) -> Subscription:
        """Keep a subscription of interest (durably) and start notifying it."""
        sub = Subscription(Subscription.id_of(body), body)
        await self.state.save_subscription(sub.id, _encode(body))
        self.subscriptions.setdefault(sub.id, sub)
        self._start_outbox(f"sub:{sub.id}")
        return sub

    # -- sending ----------------------------------------------------------------------

    async def _send(self, target: str, payloads: list[bytes]) -> tuple[int, list[str]]:
        """Send the head of an outbox: how many of ``payloads`` (a prefix) were taken, and,
        for a subscription, the global ids of those its consumer acknowledged."""
        kind, _, name = target.partition(":")
        if kind == "net":
            return await self.networks[name].publish_many([_decode_publish(p) for p in payloads]), []
        gid = global_id(_decode_note(payloads[0]).dataLocation)
        sent = await self._notify(name, gid, payloads[0])
        return 1, [gid] if sent else []

    async def _notify(self, name: str, gid: str, payload: bytes) -> bool:
        """Push one notification; False when the subscription is unknown (nothing sent)."""
        sub = self.subscriptions.get(name)
        if sub is None:
            return False  # unknown after a restart with a different state: nothing to send to
        headers = {"content-type": "application/json", IDEMPOTENCY_HEADER: idempotency_key(name, gid)}
        got = await self.outbound.post(sub.body.notificationEndpoint, payload, headers,
                                       timeout_s=self._notify_timeout, max_bytes=4096)
        if got.code != "ok":  # a short code only: the endpoint's words never travel on
            raise NetworkUnavailable(f"subscription {name}: {got.code}")
        return True

    async def _drain(self, box: _Outbox) -> None:
        attempt = 0
        while True:
            stop_if_cancelled()  # also when a library returned from a cancel as if done
            box.wake.clear()
            try:
                batch = await self.state.peek(box.target, _BATCH)
            except Exception as e:  # the state (Redis) is away: wait for it, keep the task
                stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                attempt += 1
                self._state_away(e)
                await asyncio.sleep(self.backoff.delay(attempt, random.random()))
                continue
            self._state_back()
            if not batch:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):  # a safety net; wakes come from marks
                        await box.wake.wait()
                continue
            try:
                done, acked = await self._send(box.target, batch)
            except Exception as e:  # NetworkUnavailable, or a fault: never lose the outbox's task
                stop_if_cancelled(e)
                attempt += 1
                if not isinstance(e, NetworkUnavailable):
                    log.exception("sending to %s failed unexpectedly", box.target)
                elif not box.failing:
                    log.warning("%s is unavailable, holding its events: %s", box.target, e)
                box.failing = True
                await asyncio.sleep(self.backoff.delay(attempt, random.random()))
                continue
            if box.failing:
                log.warning("%s is back", box.target)
            box.failing, attempt = False, 0
            record = None
            if acked:
                _crash_point("acked")
                record = delivered_set(box.target[4:])
            while True:
                try:
                    # The delivery record: removed from the outbox and, for a consumer,
                    # marked delivered, in one atomic step (State.pop).
                    await self.state.pop(box.target, batch[:done], record=record, gids=acked)
                    break
                except Exception as e:  # sent but not removed: retry, or it would be sent again
                    stop_if_cancelled(e)
                    log.warning("removing sent items of %s failed; retrying", box.target, exc_info=True)
                    await asyncio.sleep(1.0)
            box.sent += done

    def _state_away(self, e: BaseException) -> None:
        """Every outbox waits while the state is away: told once for all, not per try."""
        if not self._state_told:
            self._state_told = True
            log.warning("the distributor's state cannot be read (%r); every outbox waits for it", e)

    def _state_back(self) -> None:
        if self._state_told:
            self._state_told = False
            log.warning("the distributor's state answers again; the outboxes go on")

    # -- reading ----------------------------------------------------------------------

    async def health(self) -> dict[str, object]:
        nets = {}
        for name in self.networks:
            box = self._outboxes.get(f"net:{name}")
            nets[name] = {
                "following": self.following[name],
                "failing": bool(box and box.failing),
                "outbox": await self.state.outbox_size(f"net:{name}"),
            }
        return {"networks": nets, "subscriptions": len(self.subscriptions)}
