"""A network that is a NATS JetStream stream.

Config: ``kind = "jetstream"``, optional ``url`` (default ``nats://127.0.0.1:4222``),
``stream`` (default ``DLT_EVENTS``), ``subject`` (default ``dlt.events``),
``durable`` (the consumer name, default ``tidings-ied-<network>``) and ``ack_wait`` (s,
default 30: how long a message the distributor fetched but never acknowledged, because
it died, waits before JetStream delivers it again). The stream is created on first use
if it does not exist. Messages carry the publish body as JSON; on
reading, ``id`` is the stream sequence, ``timestamp`` the stream's time in
milliseconds, ``network`` this network's name. Each publish carries ``Nats-Msg-Id``, the
escaped global id, so JetStream's duplicate window absorbs resends. Following uses a
durable pull consumer, acknowledging each message once the distributor has recorded it,
so a restarted distributor goes on where it stopped.

A publish counts only when the stream holds the event: a ``PubAck`` that is not a
duplicate, or, for a duplicate, the message it names read back. A duplicate whose
message is gone (deleted, or discarded from the stream, while its id is still in the
window) is published again under ``<id>:<sequence of the gone message>``: ``:`` never
occurs in an escaped id, so that id is new to the window and names no other event.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec

from ...core.addresses import unreachable
from ...core.global_id import escape_global_id
from ...core.interchain import DltPublish, InvalidEvent, NetworkNotification, global_id, notification_of
from ...core.undecodable import UNDECODABLE
from ..errors import InterchainError, NetworkUnavailable, NotStored
from ._base import Deliver, Network

__all__ = ["JetStreamNetwork"]

log = logging.getLogger("tidings.interchain.jetstream")

_decode = msgspec.json.Decoder(DltPublish).decode
_encode = msgspec.json.Encoder().encode
_BATCH = 200
_MSG_ID = "Nats-Msg-Id"
_REPUBLISH = 8
"""Republishes of one event under a new id before it counts as not stored (each one
follows a duplicate whose message is gone)."""


def _msg_id(event: DltPublish) -> str | None:
    """``Nats-Msg-Id`` is the event's global id, escaped (a header holds no CR, LF or
    non-ASCII): JetStream drops a second publish of it within the stream's duplicate
    window, so a resend after a crash between sending and removing from the outbox does
    not land twice."""
    try:
        return escape_global_id(global_id(event.dataLocation))
    except InvalidEvent:
        return None


def _headers(msg_id: str | None) -> dict[str, str] | None:
    return None if msg_id is None else {_MSG_ID: msg_id}


class JetStreamNetwork(Network):
    kind = "jetstream"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.url = str(self.param("url", "nats://127.0.0.1:4222"))
        self.stream = str(self.param("stream", "DLT_EVENTS"))
        self.subject = str(self.param("subject", "dlt.events"))
        self.durable = str(self.param("durable", f"tidings-ied-{self.name}"))
        self.ack_wait = float(self.param("ack_wait", 30.0, (int, float)))
        self._nc: Any = None
        self._js: Any = None
        self._ready = False

    async def open(self) -> None:
        try:
            import nats
        except ImportError as e:  # pragma: no cover - depends on the install
            raise InterchainError("JetStream networks need the 'interchain' extra", code="missing_dependency") from e
        self._nats = nats

    async def _jetstream(self) -> Any:
        if self._js is None or self._nc is None or self._nc.is_closed:
            try:
                wait = self.context.connect_timeout_s
                # nats-py's first connect retries as often as its reconnects may, and with
                # no limit (-1) it never returns when nothing listens: the first connect gets
                # one try (the follower restarts with back-off, the outbox retries), and a
                # connection once made reconnects for ever.
                async with asyncio.timeout(wait * 2 + 1):
                    nc = await self._nats.connect(self.url, connect_timeout=wait, max_reconnect_attempts=1,
                                                  allow_reconnect=True, reconnect_time_wait=0.2, error_cb=_quiet)
                nc.options["max_reconnect_attempts"] = -1
                self._nc = nc
            except Exception as e:  # nats-py raises a variety of errors on connect
                raise NetworkUnavailable(f"{self.name}: " + unreachable(
                    "NATS", self.url, self.context.connect_timeout_s, _why(e))) from e
            self._js = self._nc.jetstream()
            self._ready = False
        if not self._ready:
            from nats.js.errors import NotFoundError

            try:
                await self._js.stream_info(self.stream)
            except NotFoundError:
                await self._js.add_stream(name=self.stream, subjects=[self.subject])
            self._ready = True
        return self._js

    async def close(self) -> None:
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()

    def _notification(self, msg: Any) -> NetworkNotification | None:
        try:
            body = _decode(msg.data)
        except UNDECODABLE:
            return None
        meta = msg.metadata
        ts = meta.timestamp
        return notification_of(body, id=meta.sequence.stream,
                               timestamp=int(ts.timestamp() * 1000) if ts is not None else None, network=self.name)

    async def publish(self, event: DltPublish) -> None:
        js = await self._jetstream()
        msg_id = _msg_id(event)
        try:
            ack = await js.publish(self.subject, _encode(event), stream=self.stream, timeout=5,
                                   headers=_headers(msg_id))
        except Exception as e:  # timeouts, no responders, connection errors
            raise NetworkUnavailable(f"{self.name}: publish {self.subject}: {e!r}") from e
        await self._settle(js, event, msg_id, ack)

    async def publish_many(self, events: list[DltPublish]) -> int:
        """Publish without waiting for each ack, then wait for all: one round trip's
        latency per batch instead of per event. Acks come back in order, so the count of
        leading successes (each one stored, see :meth:`_settle`) is the published prefix."""
        js = await self._jetstream()
        futures = []
        ids = [_msg_id(e) for e in events]
        try:
            for e, msg_id in zip(events, ids, strict=True):
                futures.append(await js.publish_async(self.subject, _encode(e), stream=self.stream,
                                                      headers=_headers(msg_id)))
        except Exception as e:
            if not futures:
                raise NetworkUnavailable(f"{self.name}: publish {self.subject}: {e!r}") from e
        results = await asyncio.gather(*futures, return_exceptions=True)
        done = 0
        for event, msg_id, r in zip(events, ids, results, strict=False):
            if isinstance(r, BaseException):
                if done == 0:
                    raise NetworkUnavailable(f"{self.name}: publish {self.subject}: {r!r}")
                break
            try:
                await self._settle(js, event, msg_id, r)
            except NetworkUnavailable:
                if done == 0:
                    raise
                break
            done += 1
        return done

    async def _settle(self, js: Any, event: DltPublish, msg_id: str | None, ack: Any) -> None:
        """Return once the stream holds ``event``; raise :class:`NotStored` if it will not.

        A ``PubAck`` with ``duplicate`` set stored nothing: it names the sequence of the
        message first published under the id. That message is read back; while it is
        gone, the event goes out again under an id made from that sequence."""
        base = msg_id
        for _ in range(_REPUBLISH):
            if not ack.duplicate or msg_id is None:
                return
            if await self._holds(js, ack.seq, msg_id):
                return
            msg_id = f"{base}:{ack.seq}"
            try:
                ack = await js.publish(self.subject, _encode(event), stream=self.stream, timeout=5,
                                       headers=_headers(msg_id))
            except Exception as e:
                raise NetworkUnavailable(f"{self.name}: publish {self.subject}: {e!r}") from e
        raise NotStored(f"{self.name}: stream {self.stream} acknowledged {base!r} {_REPUBLISH} times "
                        "as a duplicate of messages it no longer holds")

    async def _holds(self, js: Any, seq: int, msg_id: str) -> bool:
        from nats.js.errors import NotFoundError

        try:
            msg = await js.get_msg(self.stream, seq)
        except NotFoundError:
            return False
        except Exception as e:
            raise NetworkUnavailable(f"{self.name}: read back message {seq} of {self.stream}: {e!r}") from e
        return (msg.headers or {}).get(_MSG_ID) == msg_id

    async def follow(self, deliver: Deliver) -> None:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import ConsumerConfig

        js = await self._jetstream()
        psub = await js.pull_subscribe(self.subject, durable=self.durable, stream=self.stream,
                                       config=ConsumerConfig(ack_wait=self.ack_wait))
        try:
            while True:
                try:
                    msgs = await _cancellable(psub.fetch(_BATCH, timeout=1))
                except (TimeoutError, NatsTimeout):
                    continue
                found = [n for n in map(self._notification, msgs) if n is not None]
                if found:
                    await deliver(found)
                for msg in msgs:
                    await msg.ack()
        finally:
            await psub.unsubscribe()

    async def events(self) -> list[NetworkNotification]:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        js = await self._jetstream()
        total = (await js.stream_info(self.stream)).state.messages
        out: list[NetworkNotification] = []
        psub = await js.pull_subscribe(
            self.subject, stream=self.stream,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE),
        )
        try:
            seen = 0
            while seen < total:
                try:
                    msgs = await psub.fetch(min(_BATCH, total - seen), timeout=2)
                except (TimeoutError, NatsTimeout):
                    break
                for msg in msgs:
                    seen += 1
                    n = self._notification(msg)
                    if n is not None:
                        out.append(n)
        finally:
            await psub.unsubscribe()
        return out


async def _quiet(e: Exception) -> None:
    """nats-py logs every failed try through this callback at ERROR; the follower's
    back-off tells a network that is away once, so these go to DEBUG."""
    log.debug("nats: %r", e)


def _why(e: BaseException) -> str:
    """A connect failure in words: nats-py's NoServersError says nothing of the cause."""
    cause = e.__cause__ or e.__context__
    text = str(e) or type(e).__name__
    if cause is not None and str(cause):
        text += f" ({cause})"
    return text


async def _cancellable(fetch: Any) -> Any:
    """Await a nats-py fetch so that cancelling the caller always ends it.

    A pull fetch cancelled at the wrong moment can be left waiting on its inner
    ``next_msg`` task, and its caller with it, so a distributor following JetStream
    would never stop. The fetch runs as its own task; on cancellation it is cancelled
    and given a moment, and the cancellation goes on either way."""
    task = asyncio.ensure_future(fetch)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task}, timeout=2)
        raise
