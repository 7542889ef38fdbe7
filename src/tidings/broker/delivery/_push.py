"""One push of a batch to its subscription's endpoint, the same for every path that
pushes (live, retries, replays): its body (tidings' notifications, or CloudEvents when
the subscription asked), its headers (subscription, mode, lease epoch, signature), the
outbound policy, and what the answer means (``core.retry``).

With other broadcasters sharing the store, nothing is pushed unless this process surely
holds the subscription's lease (``Leases.may_act``, docs/scaling.md "Failure model")."""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import msgspec

from ...core import tracecontext
from ...core.config import SubscriptionConfig
from ...core.retry import Outcome, classify, retry_after_seconds
from ...core.undecodable import UNDECODABLE
from ...outbound import Answer, Outbound
from ...settings import Settings
from ...store import Fence, SubscriptionRecord
from ...tracing import Tracing
from ._notes import Note
from ._push_body import PushBodies, cloudevents_push, joined
from ._tail import Tail

__all__ = ["Leases", "Push", "Transport", "answer_of", "http_push"]

Transport = Callable[
    [SubscriptionRecord, Sequence[Note], SubscriptionConfig],
    Awaitable[tuple[Outcome, object, str, float | None]],
]
"""One push to a non-HTTP endpoint: outcome, decoded answer, reason for logs, Retry-After."""


class Leases(Protocol):
    """What delivery needs of the leases when other broadcasters share the store
    (``Membership``): whether it may push a subscription now, and the fence its writes
    carry."""

    def may_act(self, sub_id: int) -> bool: ...

    def acts_until(self, sub_id: int) -> float:
        """Until when (``time.monotonic``) this process surely holds ``sub_id``'s lease; 0: not now."""
        ...

    async def until_may_act(self, sub_id: int) -> None: ...

    def fence(self, sub_id: int) -> Fence | None: ...

    def lost(self, sub_id: int) -> None: ...


_decode_answer = msgspec.json.Decoder().decode


class Push:
    def __init__(
        self, settings: Settings, tail: Tail, outbound: Outbound, *,
        signer: Callable[[int, str, bytes], dict[str, str]] | None,
        leases: Leases | None, fence_of: Callable[[int], Fence | None], now_ns: Callable[[], int] = time.time_ns,
        tracing: Tracing | None = None,
    ) -> None:
        self._settings = settings
        self._tail = tail
        self.outbound = outbound
        """Every push to an http(s) endpoint goes through it (docs/security.md)."""
        self.signer = signer
        """Signs a push: (subscription id, message id, body) -> headers to add."""
        self._leases = leases
        self._fence_of = fence_of
        self._now_ns = now_ns
        self._bodies = PushBodies()
        self._tracing = tracing
        self.transports: dict[str, Transport] = {}
        """Pushes to endpoints of another scheme than http(s), by scheme (``xmpp``)."""

    async def _lease_gate(self, sub_id: int) -> None:
        """Looked at last, once the push is ready to go, so that as little as possible
        lies between this process's clock saying the lease is surely its own and the
        bytes leaving: the lease may have lapsed (this process was stopped, or cut off
        from the store). Push nothing until it is renewed; if it went to another
        broadcaster, this worker is stopped while it waits (docs/scaling.md, "Failure
        model")."""
        if self._leases is not None and not self._leases.may_act(sub_id):
            await self._leases.until_may_act(sub_id)

    def notifications(self, batch: Sequence[Note], conf: SubscriptionConfig) -> bytes:
        """The JSON array of EventNotifications a push carries, stamped as sent now."""
        return self._bodies.encode(batch, conf.filter, self._now_ns(), self._tail.floor)

    async def post(
        self, sub: SubscriptionRecord, batch: Sequence[Note], conf: SubscriptionConfig
    ) -> tuple[Outcome, object, str, float | None]:
        """One push: its outcome, the decoded answer, a reason for logs, a Retry-After."""
        if self._tracing is None:
            return await self._post(sub, batch, conf, None)
        events = [n.event for n in batch]
        span = self._tracing.push(sub.id, [e.id for e in events], [e.namespace for e in events],
                                  [e.headers for e in events])
        if span is None:
            return await self._post(sub, batch, conf, None)
        try:
            pushed = await self._post(sub, batch, conf, span.headers)
        except BaseException as e:
            span.end("error", type(e).__name__)
            raise
        span.end(pushed[0].value, pushed[2])
        return pushed

    async def _post(
        self, sub: SubscriptionRecord, batch: Sequence[Note], conf: SubscriptionConfig, trace: dict[str, str] | None
    ) -> tuple[Outcome, object, str, float | None]:
        if sub.endpoint is None:
            return Outcome.NO_ANSWER, None, "the subscription has no endpoint", None
        scheme, colon, _ = sub.endpoint.partition(":")
        transport = self.transports.get(scheme) if colon else None
        if transport is not None:  # another protocol's face (xmpp: docs/xmpp.md)
            await self._lease_gate(sub.id)
            return await transport(sub, batch, conf)
        fence = self._fence_of(sub.id) if self._leases is not None else None
        body, headers = http_push(
            self._bodies, batch, conf, sub_id=sub.id, mode=sub.mode, sent_ns=self._now_ns(),
            keep_above=self._tail.floor, epoch=None if fence is None else fence.epoch, signer=self.signer, trace=trace,
        )
        deadline = conf.ack_deadline_s if conf.ack_deadline_s is not None else self._settings.push_timeout_s
        await self._lease_gate(sub.id)
        # The gate's "surely held" is asked once more as the bytes leave: a process
        # stopped (or starved) between here and its socket's write would otherwise push
        # after another broadcaster has taken the subscription over. Alone (a lease nobody
        # else can take: infinity), there is nothing to ask.
        leases, until = self._leases, None
        if leases is not None and leases.acts_until(sub.id) < math.inf:
            until = functools.partial(leases.acts_until, sub.id)
        got = await self.outbound.post(
            sub.endpoint, body, headers, timeout_s=deadline, max_bytes=self._settings.answer_max_bytes, until=until
        )
        return answer_of(got, self._now_ns())


def http_push(
    bodies: PushBodies, batch: Sequence[Note], conf: SubscriptionConfig, *, sub_id: int, mode: str, sent_ns: int,
    keep_above: int, epoch: int | None, signer: Callable[[int, str, bytes], dict[str, str]] | None,
    trace: dict[str, str] | None = None, parts: Sequence[bytes] | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one push of ``batch`` over HTTP, in every process that
    pushes (the broker, a replay's pusher: ``replay._pusher``). ``parts``: the batch's
    ``PushBodies.parts`` for ``conf.filter``, made beforehand."""
    if conf.cloudevents is not None:  # the subscription asked for CloudEvents (docs/cloudevents.md)
        body, headers = cloudevents_push(batch, conf.cloudevents)
    elif parts is not None:
        body = joined(parts, sent_ns)
        headers = {"content-type": "application/json"}
    else:
        body = bodies.encode(batch, conf.filter, sent_ns, keep_above)
        headers = {"content-type": "application/json"}
    if trace is not None:  # the push span's own context: the receiver's spans are its children
        headers.update(trace)
    elif tracecontext.TRACEPARENT not in headers:
        # The HTTP header carries the first traced event's context (for the receiver's
        # HTTP tracing); each notification's headers keep its own (docs/wire-format.md).
        context = tracecontext.first_of(n.event.headers for n in batch)
        if context is not None:
            headers.update(context.pairs())
    headers["x-tidings-subscription"] = str(sub_id)
    headers["x-tidings-mode"] = mode
    if epoch is not None:
        # Rises each time the subscription passes to another broadcaster: a receiver
        # can refuse a push under an epoch lower than one it has seen (docs/scaling.md).
        headers["x-tidings-lease-epoch"] = str(epoch)
    if signer is not None:
        # A retry of the same batch keeps its message id, so receivers can dedupe.
        headers.update(signer(sub_id, f"{sub_id}-{batch[0].id}-{batch[-1].id}", body))
    return body, headers


def answer_of(got: Answer, now_ns: int) -> tuple[Outcome, object, str, float | None]:
    """What a push's answer means: its outcome, the decoded answer, a reason for logs, a
    Retry-After (``core.retry``)."""
    if got.status is None:
        return Outcome.NO_ANSWER, None, got.code, None
    retry_after = retry_after_seconds(got.status, got.retry_after, now_ns / 1e9)
    outcome = classify(got.status, retry_after)
    answer: object = None
    if outcome is Outcome.ACK and got.body and not got.truncated:
        with contextlib.suppress(*UNDECODABLE):
            answer = _decode_answer(got.body)
    return outcome, answer, got.code, retry_after
