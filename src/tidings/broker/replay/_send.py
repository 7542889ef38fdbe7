"""The loop of one replay's task: read the range, apply the filter and skip, and hand
the batches to :class:`~._flow.InFlight` (:mod:`._replays`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ...core import config as cfg
from ...core import replay as rules
from ...settings import Settings
from ...store import ReplayRecord, SubscriptionRecord
from ..delivery import Delivery
from ..registry import Orchestrator
from ._flow import InFlight
from ._remote import RemotePusher
from ._source import ReadAhead, ReplaySource, passing

__all__ = ["RangeSender"]

_STOPPED_POLL_S = 0.2
_START_WAIT_S = 5.0
"""How long a replay waits for the replay process to start before going on in the broker."""


class RangeSender:
    def __init__(
        self, orchestrator: Orchestrator, source: ReplaySource, settings: Settings, stop: set[int], *,
        clock: Callable[[], int], delivery: Delivery, remote: RemotePusher | None = None,
        secrets: Callable[[int], list[str]] = lambda _sub_id: [],
    ) -> None:
        self._delivery = delivery
        self._remote = remote
        """The replay process, when replays may run there (``_pusher``)."""
        self._secrets = secrets
        """The signing secrets of a subscription's pushes now (``Signing.live_secrets``)."""
        self._clock = clock
        """The broker's clock (``core.clock``): what a recorded notification's age counts from."""
        self._orch = orchestrator
        self._source = source
        self._settings = settings
        self._stop = stop
        """Replays canceled or ended from outside (shared with :class:`~.replay.Replays`)."""

    async def send(self, rec: ReplayRecord, inflight: InFlight) -> str | None:
        """Record and push the rest of the range; why it had to stop, or None."""
        pairs = rules.replay_pairs(rec.id, rec.to_id - 1 if rec.open_end else None)
        ahead = ReadAhead(self._source, rec.namespace, rec.to_id, pairs)  # events come with the replay's headers
        try:
            return await self._send_reads(rec, inflight, ahead, pairs)
        finally:
            ahead.cancel()
            if self._remote is not None:
                self._remote.forget(rec.id)

    def _remote_step(
        self, rec: ReplayRecord, sub: SubscriptionRecord, conf: rules.ReplayConfig, at: int, pairs: bytes,
        inflight: InFlight,
    ) -> dict[str, Any] | None:
        """The step the replay process is asked to make next, or None when this batch is
        the broker's to push: another kind of endpoint (xmpp), a lease not surely held
        now, a drain, or the process failing."""
        d, remote = self._delivery, self._remote
        if remote is None or inflight.remote_failed or d.draining:
            return None
        if not remote.ready():
            return None
        if sub.endpoint is None or not sub.endpoint.startswith(("http://", "https://")):
            return None
        act_until = d.acts_until(sub.id)
        if act_until is not None and act_until <= time.monotonic():
            return None  # the broker's own push waits for the lease (``Push``)
        push = self._orch.sub_configs.get(sub.id) or cfg.SubscriptionConfig()
        fence = d.fence_of(sub.id) if act_until is not None else None
        now = self._clock()
        return {
            "replay": rec.id, "namespace": rec.namespace, "after": at, "before": rec.to_id, "from_id": rec.from_id,
            "pairs": pairs, "filter": conf.filter, "skip": conf.rules.skip, "batch": self._settings.replay_batch_size,
            "sub": sub.id, "endpoint": sub.endpoint, "mode": sub.mode, "echo_filter": push.filter,
            "cloudevents": push.cloudevents,
            "deadline_s": push.ack_deadline_s if push.ack_deadline_s is not None else self._settings.push_timeout_s,
            "epoch": None if fence is None else fence.epoch, "secrets": self._secrets(sub.id),
            "act_until": None if act_until is None or act_until == float("inf") else act_until,
            "clock_offset_ns": now - time.time_ns(), "now": now,
        }

    async def _send_reads(self, rec: ReplayRecord, inflight: InFlight, ahead: ReadAhead, pairs: bytes) -> str | None:
        rid, ns, size = rec.id, rec.namespace, self._settings.replay_batch_size
        at = rec.position  # read this far; ``rec.position`` moves as batches are recorded
        while at < rec.to_id - 1 and rid not in self._stop:
            sub = self._orch.subscriptions.get(rec.subscription_id)
            if sub is None:
                return f"subscription {rec.subscription_id} ended"
            if ns not in self._orch.publications:
                return f"publication {ns!r} was deleted"
            if not self._orch.subscriber_allowed(ns, rec.requester):
                return f"{rec.requester} may no longer receive {ns!r}"
            sub_conf = self._orch.sub_configs.get(sub.id)
            if sub_conf is not None and sub_conf.stopped:
                await asyncio.sleep(_STOPPED_POLL_S)  # a stopped subscription is sent nothing
                continue
            try:
                conf = rules.ReplayConfig.read(rec.config, sub.config)
            except rules.ReplayRuleError as e:
                return e.message
            step = None
            if sub.mode == "trusted" and rec.price == 0 and self._remote is not None:
                # A process that is starting is waited for (under a second), not raced: a
                # first read pushed from here would be work on the live path's interpreter.
                await self._remote.up(_START_WAIT_S)
                step = self._remote_step(rec, sub, conf, at, pairs, inflight)
            if step is not None:  # read, filtered and pushed by the replay process; recorded here
                moved = await inflight.send_remote(self._remote, sub, step)  # type: ignore[arg-type]
                if moved is None:
                    return f"subscription {sub.id} ended"
                at = moved
                if rid in self._stop:
                    return None
                continue
            events, upto = await ahead.read(at, conf.filter)
            if upto < rec.to_id - 1:
                ahead.start(upto, conf.filter)  # the next read runs while this one is recorded and pushed
            events = passing(conf.rules, events)
            batches = [events[i : i + size] for i in range(0, len(events), size)] or [[]]
            direct = sub.mode == "trusted" and rec.price == 0  # nothing to charge before the push
            for k, batch in enumerate(batches):
                at = upto if k == len(batches) - 1 else batch[-1].id
                now = self._clock()
                # The next batch is read and recorded (or its ids computed) while this one is pushed.
                sent = await (inflight.send_direct if direct else inflight.send)(sub, batch, at, now)
                if sent is None:  # canceled (then nothing changes), or the subscription went
                    return None if rid in self._stop else f"subscription {sub.id} ended"
                if not sent:
                    return f"subscription {sub.id} ended"
                if rid in self._stop:
                    return None  # cancel stops enqueuing; what was recorded is pushed
            inflight.remote_failed = False  # one read in the broker after a failed step, then the process again
            await asyncio.sleep(0)  # let live batches and requests in between reads
        return None

