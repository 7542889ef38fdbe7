"""The stream face: ``GET /v1/stream`` upgraded to a WebSocket (docs/streaming.md).

A publisher sends one event per message, as many in flight as the window allows; a
subscriber receives the pushes of its ``stream:`` subscriptions and answers each. The
messages are in :mod:`tidings.core.wire_stream`.

Per connection, a reader takes messages and a committer publishes what has arrived
since its last commit as one batch (one store transaction, shared further with other
connections' batches by the store's group commit), then answers every event under its
``ref``. One batch is being stored at a time, so a connection's events get ids in the
order they were sent. The reader stops reading while ``stream_window`` publishes are
unanswered: the client's sends then wait on TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..broker import Broker
from ..broker.publish import Overloaded, Ticket, check_event
from ..core import tracecontext
from ..core.config import SubscriptionConfig
from ..core.ingest import ERR_MAYBE_STORED
from ..core.int64 import out_of_range, range_message
from ..core.long_ints import long_integer, long_message
from ..core.retry import Outcome, classify
from ..core.undecodable import UNDECODABLE
from ..core.wire import ConfirmResult, GenericError, ItemResult, err, ok
from ..core.wire_stream import (
    CLOSE_AUTH,
    CLOSE_MALFORMED,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    STREAM_PREFIX,
    Ack,
    ClientMessage,
    Confirm,
    Confirmed,
    Listen,
    Listening,
    Nack,
    Publish,
    RefOnly,
    Results,
    StreamError,
)
from ..errors import ApiError, BadRequest, Unauthenticated, Unavailable
from ..store import PrincipalRecord, SubscriptionRecord

if TYPE_CHECKING:
    from ..broker.delivery import Note

__all__ = ["StreamFace"]

log = logging.getLogger("tidings.stream")

_decode = msgspec.json.Decoder(ClientMessage).decode
_decode_ref = msgspec.json.Decoder(RefOnly).decode
_encode = msgspec.json.Encoder().encode
_ROOM_POLL_S = 0.05
"""How often a stream held back by the waiting caps looks for room again."""
_REAUTH_S = 2.0
"""How often an open connection's token is checked again (a revoked one closes it)."""
_LEASE_TICK_S = 0.5
"""How often the leases of ``stream:`` subscriptions (``leaseMs``) are looked at."""

PushAnswer = tuple[Outcome, object, str, float | None]


class StreamFace:
    """The connections of one server, and the ``stream`` transport of its delivery."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.settings = broker.settings
        self.connections: Counter[str] = Counter()
        self.listeners: dict[int, _Connection] = {}
        broker.delivery.transports["stream"] = self.push
        self._leases: asyncio.Task[None] | None = None
        with contextlib.suppress(RuntimeError):  # no loop yet: started by the first connection
            self._watch_leases()

    def _watch_leases(self) -> None:
        if self._leases is None:
            self._leases = asyncio.get_running_loop().create_task(self._expire_leases(), name="tidings-stream-leases")

    async def _expire_leases(self) -> None:
        """End each ``stream:`` subscription with a ``leaseMs`` that no connection has
        listened to for that long: a ``tidings tail`` that was killed leaves nothing
        behind. The time counts from when this process last saw a listener, or from its
        start (a restart gives every such subscription its whole lease again)."""
        loop = asyncio.get_running_loop()
        unheard: dict[int, float] = {}
        while not self.broker.draining:
            await asyncio.sleep(_LEASE_TICK_S)
            now = loop.time()
            orch = self.broker.orchestrator
            for sub_id, conf in list(orch.sub_configs.items()):
                sub = orch.subscriptions.get(sub_id)
                if conf.lease_s is None or sub is None or not (sub.endpoint or "").startswith(STREAM_PREFIX):
                    continue
                if self.broker.cluster is not None and self.broker.delivery.worker(sub_id) is None:
                    continue  # another broadcaster delivers it: its listeners are there, and so is its lease
                conn = self.listeners.get(sub_id)
                if conn is not None and not conn.closed:
                    unheard.pop(sub_id, None)
                    continue
                since = unheard.setdefault(sub_id, now)
                if now - since < conf.lease_s:
                    continue
                unheard.pop(sub_id, None)
                log.info("subscription %s ended: no stream connection listened to it for %g s (its leaseMs)",
                         sub_id, conf.lease_s)
                try:
                    await orch.end_subscription(sub_id)
                except Exception:  # the store is down: the next tick tries again
                    log.exception("could not end subscription %s", sub_id)
            for sub_id in [k for k in unheard if k not in orch.sub_configs]:
                del unheard[sub_id]

    async def serve(self, ws: WebSocket) -> None:
        self._watch_leases()
        s = self.settings
        try:
            caller = await self.broker.auth.principal(ws.headers.get("authorization"))
        except ApiError as e:
            await _refuse(ws, error_response(e.status, e.code, e.message))
            return
        if self.connections[caller.name] >= s.stream_max_connections_per_principal:
            await _refuse(ws, error_response(
                429, "too_many_connections",
                f"{caller.name} has {self.connections[caller.name]} stream connections open; at most "
                f"{s.stream_max_connections_per_principal} (TIDINGS_STREAM_MAX_CONNECTIONS_PER_PRINCIPAL)",
            ))
            return
        self.connections[caller.name] += 1
        conn = _Connection(self, ws, caller)
        try:
            await ws.accept()
            await conn.run()
        finally:
            self.connections[caller.name] -= 1
            if not self.connections[caller.name]:
                del self.connections[caller.name]
            for sub_id in [k for k, c in self.listeners.items() if c is conn]:
                del self.listeners[sub_id]

    async def push(self, sub: SubscriptionRecord, batch: Sequence[Note], conf: SubscriptionConfig) -> PushAnswer:
        """The delivery transport for ``stream:`` endpoints."""
        conn = self.listeners.get(sub.id)
        if conn is None or conn.closed:
            return Outcome.NO_ANSWER, None, "not_connected", None
        deadline = conf.ack_deadline_s if conf.ack_deadline_s is not None else self.settings.push_timeout_s
        context = tracecontext.first_of(n.event.headers for n in batch)
        return await conn.push(sub, self.broker.delivery.notifications(batch, conf), deadline, context)


def error_response(status: int, code: str, message: str) -> Response:
    body = _encode({"error": {"code": code, "message": message}})
    return Response(body, status_code=status, media_type="application/json")


async def _refuse(ws: WebSocket, response: Response) -> None:
    """Refuse the handshake with an HTTP answer (401, 429) where the server can send one."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(response)
    else:  # pragma: no cover - uvicorn's WebSocket protocols all support it
        await ws.close(code=CLOSE_POLICY)


class _Closed(Exception):
    pass


class _Connection:
    def __init__(self, face: StreamFace, ws: WebSocket, caller: PrincipalRecord) -> None:
        self.face = face
        self.broker = face.broker
        self.ws = ws
        self.caller = caller
        self.closed = False
        s = face.settings
        self.window = s.stream_window
        self.max_frame = s.stream_max_frame_bytes
        self.max_items = s.max_batch_items
        self.queue: list[Publish] = []
        self.sizes: list[int] = []
        """Each queued publish's message length, beside ``queue`` (what waits, in bytes)."""
        self.arrived = asyncio.Event()
        self.room = asyncio.Event()
        self.room.set()
        self.inflight = 0
        self.pushes: dict[int, asyncio.Future[Ack | Nack]] = {}
        self.push_seq = 0
        self.checked_at = asyncio.get_running_loop().time()
        self.send_lock = asyncio.Lock()

    async def run(self) -> None:
        committer = asyncio.create_task(self._commit_loop())
        try:
            await self._read_loop()
        finally:
            self.closed = True
            for fut in self.pushes.values():
                if not fut.done():
                    fut.set_exception(_Closed())
            # What was read is still stored and answered if the socket is still there;
            # a client that went away learns nothing, and may publish those again.
            self.arrived.set()
            self.queue.append(_STOP)
            with contextlib.suppress(Exception):
                await committer

    # -- reading --------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        ws = self.ws
        overload = self.broker.overload
        while True:
            if self.inflight >= self.window:
                self.room.clear()
                await self.room.wait()
            while overload.admission.full and not self.closed:
                # No new credit while too much waits for the store: the client's sends wait
                # on TCP, as for a full window, rather than queueing here.
                await asyncio.sleep(_ROOM_POLL_S)
            try:
                msg = await ws.receive()
            except (WebSocketDisconnect, RuntimeError):
                return
            if msg["type"] == "websocket.disconnect":
                return
            text = msg.get("text")
            if text is None:
                await self._close(CLOSE_POLICY, "binary messages are not part of the protocol; send JSON text")
                return
            if len(text) > self.max_frame:
                await self._close(CLOSE_TOO_BIG, f"a message is at most {self.max_frame} bytes")
                return
            try:
                m = _decode(text)
            except msgspec.ValidationError as e:
                long = long_integer(text, e)
                code, message = ("out_of_range", long_message(*long)) if long else ("invalid_argument", str(e))
                if not await self._refuse_item(text, code, message):
                    return
                continue
            except msgspec.DecodeError as e:
                await self._close(CLOSE_MALFORMED, f"not a JSON message: {e}"[:120])
                return
            except RecursionError:  # its ref cannot be read either: the rule of a message without one
                await self._close(CLOSE_MALFORMED, "the message is nested too deeply")
                return
            if not isinstance(m, Ack | Nack):  # a push id past int64 is simply no push of this connection
                # As over HTTP; a publish's event is exempt as there (its integers are never stored as such).
                where = out_of_range(m.ref, "$.ref") if isinstance(m, Publish) else out_of_range(m)
                if where is not None:
                    await self._send(StreamError(ref=m.ref, code="out_of_range", message=range_message(where)))
                    continue
            if isinstance(m, Publish):
                problem = self._problem(m)
                if problem is not None:
                    await self._send(StreamError(ref=m.ref, code=problem.code, message=problem.message))
                    continue
                self.inflight += 1
                self.queue.append(m)
                self.sizes.append(len(text))
                self.arrived.set()
            elif isinstance(m, Ack | Nack):
                fut = self.pushes.get(m.push)
                if fut is not None and not fut.done():
                    fut.set_result(m)
            elif isinstance(m, Confirm):
                await self._confirm(m)
            else:
                await self._listen(m)

    def _problem(self, m: Publish) -> ApiError | None:
        e = m.event
        if e.namespace not in self.broker.orchestrator.publications:
            return ApiError(f"no publication is registered for namespace {e.namespace!r}; register it with "
                            "icrc72_register_publication first", code="namespace_not_found")
        try:
            check_event(e, "$.event")
        except BadRequest as x:
            return x
        return None

    async def _refuse_item(self, text: str, code: str, message: str) -> bool:
        """Answer a message that does not decode under its ref; without one, close."""
        try:
            ref = _decode_ref(text).ref
        except UNDECODABLE:
            ref = None
        if ref is None:
            await self._close(CLOSE_MALFORMED, f"a message this protocol does not know: {message}"[:120])
            return False
        await self._send(StreamError(ref=ref, code=code, message=message))
        return True

    async def _confirm(self, m: Confirm) -> None:
        if len(m.ids) > self.max_items:
            result = ConfirmResult(itemized=[err("GenericBatchError", f"a batch holds at most {self.max_items} items")]
                                   * len(m.ids))
        else:
            result = await self.broker.confirm(self.caller, m.ids)
        await self._send(Confirmed(ref=m.ref, result=result))

    async def _listen(self, m: Listen) -> None:
        if len(m.subscriptions) > self.max_items:
            refused = err("GenericBatchError", f"a batch holds at most {self.max_items} items")
            await self._send(Listening(ref=m.ref, results=[refused] * len(m.subscriptions)))
            return
        results: list[ItemResult | None] = []
        subs = self.broker.orchestrator.subscriptions
        for sub_id in m.subscriptions:
            sub = subs.get(sub_id)
            if sub is None or sub.subscriber != self.caller.name:
                # The same answer whether it exists or not: it tells nothing of others'.
                results.append(err("NotFound", f"{self.caller.name} has no subscription {sub_id}"))
            elif not (sub.endpoint or "").startswith(STREAM_PREFIX):
                results.append(err("ImproperConfig", f"subscription {sub_id}'s endpoint is not a "
                                   f"{STREAM_PREFIX} endpoint; its pushes go to {sub.endpoint!r}"))
            else:
                self.face.listeners[sub_id] = self  # the newest connection takes it over
                w = self.broker.delivery.worker(sub_id)
                if w is not None:
                    w.wakeup.set()
                results.append(ok(True))
        await self._send(Listening(ref=m.ref, results=results))

    # -- publishing -----------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        publish = self.broker.broadcaster.publish
        while True:
            await self.arrived.wait()
            self.arrived.clear()
            batch, self.queue = self.queue[: self.max_items], self.queue[self.max_items :]
            sizes, self.sizes = self.sizes[: len(batch)], self.sizes[len(batch) :]
            if self.queue:
                self.arrived.set()
            stop = bool(batch) and batch[-1] is _STOP
            if stop:
                batch.pop()
            if batch:
                await self._reauthenticate()
                ticket = await self._admitted(sum(sizes))
                try:
                    results = await publish(self.caller, [m.event for m in batch], checked=True)
                except Unavailable as e:
                    # The store is unavailable, or the commit outlived the store's timeout:
                    # whether the events were stored may be unknown. Over HTTP this is a 503;
                    # here each event gets the documented item error a publisher retries
                    # with the same key (docs/streaming.md).
                    results = [err("GenericError", GenericError(
                        ERR_MAYBE_STORED, f"{e.message}: it may have been stored: retry with the same key"
                    ))] * len(batch)
                except ApiError as e:  # a publication deleted since the message was read
                    results = [err("NotFound", e.message)] * len(batch)
                except Exception:
                    log.exception("stream publish failed")
                    results = [err("GenericBatchError", "internal error; the server log has the details")] * len(
                        batch
                    )
                finally:
                    self.broker.overload.release(ticket)
                self.inflight -= len(batch)
                self.room.set()
                await self._send(Results(refs=[m.ref for m in batch], results=results))
            if stop:
                return

    async def _admitted(self, nbytes: int) -> Ticket:
        """A ticket for a batch already read: waited for rather than refused (the reader
        gives no new credit meanwhile), so a stream's publisher is slowed, not failed."""
        overload = self.broker.overload
        while True:
            if not overload.admission.full:
                with contextlib.suppress(Overloaded):
                    return overload.admit(nbytes)
            await asyncio.sleep(_ROOM_POLL_S)

    async def _reauthenticate(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self.checked_at < _REAUTH_S:
            return
        self.checked_at = now
        try:
            await self.broker.auth.principal(self.ws.headers.get("authorization"))
        except Unauthenticated:
            await self._close(CLOSE_AUTH, "the connection's token was revoked")

    # -- pushing --------------------------------------------------------------------------

    async def push(
        self, sub: SubscriptionRecord, notifications: bytes, deadline: float,
        context: tracecontext.TraceContext | None = None,
    ) -> PushAnswer:
        self.push_seq += 1
        n = self.push_seq
        fut: asyncio.Future[Ack | Nack] = asyncio.get_running_loop().create_future()
        self.pushes[n] = fut
        trace = b""
        if context is not None:  # the first traced notification's, as an HTTP push's header
            trace = b"".join(b',"%b":%b' % (k.encode(), _encode(v)) for k, v in context.pairs().items())
        frame = b'{"op":"push","push":%d,"subscription":%d,"mode":"%s"%b,"notifications":%s}' % (
            n, sub.id, sub.mode.encode(), trace, notifications
        )
        try:
            if not await self._send_raw(frame):
                return Outcome.NO_ANSWER, None, "disconnected", None
            async with asyncio.timeout(deadline):
                answer = await fut
        except TimeoutError:
            return Outcome.NO_ANSWER, None, "timeout", None
        except _Closed:
            return Outcome.NO_ANSWER, None, "disconnected", None
        finally:
            self.pushes.pop(n, None)
        if isinstance(answer, Ack):
            return Outcome.ACK, answer.results, "ok", None
        status = answer.status if 400 <= answer.status <= 599 else 500
        retry = answer.retryAfter if answer.retryAfter is not None and answer.retryAfter >= 0 else None
        return classify(status, retry), None, f"nack_{status}", retry

    # -- sending --------------------------------------------------------------------------

    async def _send(self, message: Any) -> bool:
        return await self._send_raw(_encode(message))

    async def _send_raw(self, data: bytes) -> bool:
        try:
            await self.ws.send({"type": "websocket.send", "text": data.decode()})
        except Exception:  # the peer went away (or the socket closed under us)
            self.closed = True
            return False
        return True

    async def _close(self, code: int, reason: str) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            await self.ws.close(code=code, reason=reason)


_STOP: Any = object()
