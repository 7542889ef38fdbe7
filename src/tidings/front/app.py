"""A front process's ASGI app: ``icrc72_publish`` checked and stamped here, everything
else passed through to the broker's private socket unchanged (docs/scaling.md).

The front holds no state of the service: who may publish where, schemas and the store
stay with the broker. So every answer a client gets is the broker's, and a front can be
killed at any moment: what it had not yet handed over was not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import yarl
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from ..bodies import declared_length, read_body
from ..core import cloudevents, ingest, values
from ..core.admission import Admission
from ..core.undecodable import UNDECODABLE
from ..core.wire import Event, ItemResult
from ..errors import PayloadTooLarge
from ..fastpath import FastPathApp
from ._link import BrokerLink, LinkLost

__all__ = ["BROKER_KEEPALIVE_S", "POOL_KEEPALIVE_S", "FrontConfig", "front_app"]

log = logging.getLogger("tidings.front")

_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host",
    "x-tidings-front",  # a client's copy of the fronts' own header never passes
})  # fmt: skip
_FRONT_HEADER = "x-tidings-front"
_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"]
_PASSABLE = frozenset({1000, 1001, 1007, 1008, 1009, 1011})  # close codes a client may send on
_decode_events = msgspec.json.Decoder(list[Event]).decode
_encode_batch = msgspec.msgpack.Encoder().encode
_decode_results = msgspec.json.Decoder(list[ItemResult | None]).decode

BROKER_KEEPALIVE_S = 10.0
"""How long the broker's private server keeps an idle connection from a front open."""
POOL_KEEPALIVE_S = 4.0
"""How long a front keeps an idle pooled connection to the broker: well before the broker
would close it, so a request never races the broker's close of the connection it takes
(the usual 502/503 behind a proxy: REFERENCE.md §16)."""
_RETRY_LOG_S = 60.0
_REPORT_S = 1.0
"""How often a front tells its broker what it refused and holds (``/metrics``)."""
_UNREACHABLE = "broker_unreachable"
"""Refusal reason: the broker did not take the request (``api._front_reports``)."""
_encode_report = msgspec.json.Encoder().encode
"""A retried request is logged at most once in this long (once per episode, with a count)."""


@dataclass(frozen=True, slots=True)
class FrontConfig:
    uds: str
    """The broker's private socket."""
    secret: str = field(repr=False)
    """What the broker's private routes ask for (``api/internal.py``); never logged."""
    max_body_bytes: int
    max_batch_items: int
    max_frame_bytes: int
    """The stream face's largest WebSocket message (``TIDINGS_STREAM_MAX_FRAME_BYTES``)."""
    log_level: str = "info"
    log_format: str = "text"
    """The broker's ``TIDINGS_LOG_LEVEL`` and ``TIDINGS_LOG_FORMAT`` (``tidings.logs``)."""
    max_waiting_bytes: int = 32 * 1024 * 1024
    max_waiting_requests: int = 1000
    """``TIDINGS_MAX_WAITING_BYTES`` and ``_REQUESTS``: this front's own caps on the
    publishes it has taken and the broker has not yet answered."""
    link: str | None = None
    """The broker's link socket, which checked publishes are handed over (``_link``); None:
    they go to the private socket's ``/_internal/publish`` as HTTP requests."""


def _forwarded(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}


class _Retries:
    """Requests sent again after the broker's side closed their connection before any
    answer: said in the log once per episode, not once per request."""

    def __init__(self) -> None:
        self.count = 0
        self.logged_at: float | None = None

    def note(self, why: BaseException) -> None:
        self.count += 1
        now = time.monotonic()
        if self.logged_at is None or now - self.logged_at > _RETRY_LOG_S:
            log.warning("a request to the broker failed before any answer (%s: %s); sent once more on a new "
                        "connection (%d so far; said again at most once a minute)", type(why).__name__, why,
                        self.count)
            self.logged_at = now


class _Answer:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


def front_app(config: FrontConfig) -> Starlette:
    session: aiohttp.ClientSession | None = None
    admission = Admission(config.max_waiting_bytes, config.max_waiting_requests)
    retries = _Retries()
    link = BrokerLink(config.link, config.secret) if config.link else None

    def unreachable(message: str) -> Response:
        """503: the broker did not take the request (counted with this front's refusals)."""
        admission.count(_UNREACHABLE)
        return _error(503, "unavailable", message)

    async def report() -> None:
        """Tell the broker, every second, what this front refused and holds itself: its
        ``/metrics`` is where an operator looks (``api._front_reports``)."""
        me = os.getpid()
        while True:
            await asyncio.sleep(_REPORT_S)
            body = _encode_report({"pid": me, "refused": dict(admission.refused), "retried": retries.count,
                                   "waiting_requests": admission.waiting_requests,
                                   "waiting_bytes": admission.waiting_bytes})
            try:
                # Bounded: a broker stopped (SIGSTOP) holds the report, not the loop, for long.
                async with upstream().post("http://broker/_internal/front-stats", data=body,
                                           headers={_FRONT_HEADER: config.secret},
                                           timeout=aiohttp.ClientTimeout(total=_REPORT_S * 5)) as resp:
                    await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as e:  # the next report tells
                log.debug("reporting to the broker failed: %s", e)

    def upstream() -> aiohttp.ClientSession:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=config.uds, limit=0, keepalive_timeout=POOL_KEEPALIVE_S),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                auto_decompress=False,
            )
        return session

    async def post(url: str, data: bytes, headers: dict[str, str]) -> _Answer:
        """The broker's whole answer to a POST. A request that failed before any answer
        came, on a connection the broker closed as idle (or could not be made), is sent
        once more: the broker never read it (with idempotency keys a repeat is harmless
        in any case)."""
        for attempt in (0, 1):
            try:
                async with upstream().post(url, data=data, headers=headers) as resp:
                    return _Answer(resp.status, resp.headers, await resp.read())
            except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as e:
                if attempt:
                    raise
                retries.note(e)
        raise AssertionError("unreachable")  # pragma: no cover

    async def hand_over(request: Request, batch: ingest.PublishBatch) -> _Answer:
        """The broker's answer to a checked batch: over the link, or as an HTTP request.
        Raises ``LinkLost`` or ``aiohttp.ClientError`` when there is none."""
        authorization = request.headers.get("authorization", "")
        if link is not None:
            answer = await link.publish(authorization, batch)
            return _Answer(answer.status, dict(answer.headers), answer.body)
        return await post(
            "http://broker/_internal/publish", _encode_batch(batch),
            {"authorization": authorization, "content-type": "application/msgpack", _FRONT_HEADER: config.secret},
        )

    async def relay(resp: _Answer) -> Response:
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP | {"content-length"}}
        return Response(resp.body, status_code=resp.status, headers=headers)

    def admit(request: Request) -> tuple[int, Response | None]:
        """Take a publish under this front's caps before its body is read: its bytes, or
        the refusal (503 ``overloaded``, ``Retry-After``)."""
        declared = declared_length(request)
        reason = admission.take(declared)
        if reason is None:
            return declared, None
        cap = (f"{admission.max_bytes} bytes (TIDINGS_MAX_WAITING_BYTES)" if reason == "bytes"
               else f"{admission.max_requests} requests (TIDINGS_MAX_WAITING_REQUESTS)")
        return 0, _error(503, "overloaded", f"too much is waiting for the store ({cap}); nothing was stored, "
                         "retry later")

    class _Grown(Exception):
        pass

    def growing(taken: list[int]) -> Any:
        def on_size(n: int) -> None:
            if n > taken[0]:
                reason = admission.grow(taken[0], n)
                taken[0] = n
                if reason is not None:
                    raise _Grown(reason)
        return on_size

    async def refuse(request: Request, status: int, code: str, message: str) -> Response:
        # The broker says whether the caller is known first (a stranger hears 401).
        try:
            resp = await post(
                "http://broker/_internal/auth", b"",
                {"authorization": request.headers.get("authorization", ""), _FRONT_HEADER: config.secret},
            )
        except aiohttp.ClientError:
            return unreachable("the broker is not reachable; retry shortly")
        if resp.status != 200:
            return await relay(resp)
        return _error(status, code, message)

    async def publish(request: Request) -> Response:
        taken, refusal = admit(request)
        if refusal is not None:
            return refusal
        held = [taken]
        try:
            return await _publish(request, held)
        finally:
            admission.give_back(held[0])

    async def _publish(request: Request, held: list[int]) -> Response:
        try:
            body = await read_body(request, config.max_body_bytes, growing(held))
        except PayloadTooLarge as e:
            return await refuse(request, e.status, e.code, e.message)
        except _Grown:
            return _error(503, "overloaded", "too much is waiting for the store; nothing was stored, retry later")
        except ClientDisconnect:
            return Response(status_code=400)
        batch = _prepare(body, config.max_batch_items, request.headers.get("traceparent"),
                         request.headers.get("tracestate"), request.headers.get("idempotency-key"))
        try:
            if batch is None:  # not a plain good batch: the broker gives the answer it always gives
                return await relay(await post("http://broker/v1/icrc72_publish", body, _forwarded(request.headers)))
            return await relay(await hand_over(request, batch))
        except (aiohttp.ClientError, LinkLost):
            # Nothing was acknowledged: the events may or may not be stored (ids tell).
            return unreachable("the broker is not reachable; the events may have been stored: "
                          "retry with the same key")

    async def proxy(request: Request) -> Response:
        # The raw path, still percent-encoded: a Confluent subject may hold "/" sent as %2F.
        raw = request.scope.get("raw_path")
        path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
        url = yarl.URL("http://broker" + path + (f"?{request.url.query}" if request.url.query else ""), encoded=True)
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        try:
            resp = await upstream().request(
                request.method, url, data=request.stream() if has_body else None,
                headers=_forwarded(request.headers), allow_redirects=False,
            )
        except aiohttp.ClientError:
            return unreachable("the broker is not reachable; retry shortly")
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP}
        if resp.content_length is not None or request.method == "HEAD":
            try:
                body = await resp.read()
            finally:
                resp.release()
            headers.pop("Content-Length", None)
            return Response(body, status_code=resp.status, headers=headers)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.content.iter_any():  # server-sent events arrive as sent
                    yield chunk
            finally:
                resp.release()

        return StreamingResponse(chunks(), status_code=resp.status, headers=headers)

    async def websocket(ws: WebSocket) -> None:
        uri = "ws://broker" + ws.url.path + (f"?{ws.url.query}" if ws.url.query else "")
        headers = {k: v for k, v in _forwarded(ws.headers).items() if not k.lower().startswith("sec-websocket-")}
        protocols = ws.headers.get("sec-websocket-protocol")
        try:
            up = await unix_connect(
                config.uds, uri, additional_headers=headers, max_size=None, compression=None,
                subprotocols=[p.strip() for p in protocols.split(",")] if protocols else None,  # type: ignore[misc]
                open_timeout=10,
            )
        except InvalidStatus as e:  # the broker refused the handshake: its answer, as it gave it
            r = e.response
            await ws.send_denial_response(Response(
                bytes(r.body or b""), status_code=r.status_code,
                headers={k: v for k, v in r.headers.raw_items() if k.lower() not in _HOP_BY_HOP | {"content-length"}},
            ))
            return
        except (OSError, WebSocketException, TimeoutError):
            await ws.close(code=1011)
            return
        await ws.accept(subprotocol=up.subprotocol)
        await _pump(ws, up)

    async def publish_cloudevents(request: Request) -> Response:
        taken, refusal = admit(request)
        if refusal is not None:
            return refusal
        held = [taken]
        try:
            return await _publish_cloudevents(request, held)
        finally:
            admission.give_back(held[0])

    async def _publish_cloudevents(request: Request, held: list[int]) -> Response:
        # Taken here rather than passed through: the attributes' header bytes reach the
        # check as they came (a proxy would re-encode them), and parsing spreads over cores.
        content_type = request.headers.get("content-type")
        try:
            body = await read_body(request, config.max_body_bytes, growing(held))
            events = cloudevents.from_http(
                request.path_params["namespace"], content_type, request.headers.raw, body,
                max_events=config.max_batch_items, key=request.headers.get("idempotency-key"),
            )
            now = time.time_ns()
            rows, refused = ingest.prepare(events, now)
        except PayloadTooLarge as e:
            return await refuse(request, e.status, e.code, e.message)
        except cloudevents.CloudEventError as e:
            return await refuse(request, e.status, "invalid_cloudevent", str(e))
        except values.InvalidValue as e:
            return await refuse(request, 400, "invalid_value", str(e))
        except _Grown:
            return _error(503, "overloaded", "too much is waiting for the store; nothing was stored, retry later")
        except ClientDisconnect:
            return Response(status_code=400)
        batch = ingest.PublishBatch(len(events), now, rows, [(i, ns, r) for i, (ns, r) in refused.items()])
        try:
            resp = await hand_over(request, batch)
        except (aiohttp.ClientError, LinkLost):
            return unreachable("the broker is not reachable; the events may have been stored: "
                          "retry with the same key")
        if resp.status != 200:
            return await relay(resp)
        answer = resp.body
        warning = resp.headers.get("warning")
        try:
            results = _decode_results(answer)
        except (*UNDECODABLE, UnicodeDecodeError):  # not the broker's usual answer: relayed as it came
            results = []
        status = cloudevents.answer_status(results, cloudevents.media_type(content_type) == cloudevents.BATCH)
        headers = {"Warning": warning} if warning else {}
        if status in (429, 503):
            headers["Retry-After"] = "1"
        return Response(answer, status_code=status, media_type="application/json", headers=headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        reporting = asyncio.create_task(report(), name="tidings-front-report")
        try:
            yield
        finally:
            reporting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporting
            if session is not None:
                await session.close()
            if link is not None:
                await link.close()

    async def wrong_verb(request: Request, exc: Exception) -> Response:
        if request.method != "CONNECT":
            return await proxy(request)  # the broker answers it, in its own shape
        # CONNECT cannot be passed on as it came (a client library writes it in authority
        # form): answered here, as the broker answers it.
        if request.url.path.startswith("/v1/"):
            response = _error(405, "method_not_allowed", "API methods are called with POST")
            response.headers["Allow"] = "POST"
        else:
            response = _error(405, "method_not_allowed", f"CONNECT is not served at {request.url.path}")
            response.headers["Allow"] = ", ".join(_METHODS)  # what a path takes, it says to them
        return response

    async def unmatched(request: Request, exc: Exception) -> Response:
        # A path no route pattern takes (a control character such as %0A in it): the
        # broker answers it, in its own shape (Confluent's under the Confluent prefixes).
        return await proxy(request)

    return FastPathApp(
        fast={"/v1/icrc72_publish": (publish, {})},
        internal_error=lambda: _error(500, "internal", "internal error"),
        routes=[
            Route("/v1/icrc72_publish", publish, methods=["POST"]),
            Route("/v1/cloudevents/{namespace}", publish_cloudevents, methods=["POST"]),
            WebSocketRoute("/{path:path}", websocket),
            Route("/{path:path}", proxy, methods=_METHODS),
        ],
        # A verb no route takes (CONNECT, PROPFIND): the broker answers it in its shape too.
        exception_handlers={404: unmatched, 405: wrong_verb},
        lifespan=lifespan,
    )


def _prepare(
    body: bytes, max_items: int, traceparent: str | None = None, tracestate: str | None = None,
    key: str | None = None,
) -> ingest.PublishBatch | None:
    """The batch for the broker, or None when the body is anything but a good batch
    (malformed, too many events, a value that is not ICRC-16, an ``Idempotency-Key``
    header on several events). The request's trace context goes to the events without
    one (``ingest.add_trace_context``); its ``Idempotency-Key`` to its one event. Each
    event's idempotency key travels in its row (``ingest.Prepared.key``)."""
    try:
        events = _decode_events(body)
    except (*UNDECODABLE, UnicodeDecodeError):
        return None
    if not events or len(events) > max_items:
        return None
    if traceparent is not None:
        ingest.add_trace_context(events, traceparent, tracestate)
    if key is not None and ingest.key_from_header(events, key) is not None:
        return None
    now = time.time_ns()
    try:
        rows, refused = ingest.prepare(events, now)
    except values.InvalidValue:
        return None
    return ingest.PublishBatch(len(events), now, rows, [(i, ns, r) for i, (ns, r) in refused.items()])


def _error(status: int, code: str, message: str) -> Response:
    # Every 503 a front gives says when to try again (a load balancer or client backs off).
    return Response(msgspec.json.encode({"error": {"code": code, "message": message}}), status_code=status,
                    media_type="application/json", headers={"Retry-After": "1"} if status == 503 else None)


async def _pump(ws: WebSocket, up: ClientConnection) -> None:
    """Messages both ways until either side closes; the close code is passed on."""

    async def down() -> None:
        try:
            async for msg in up:
                if isinstance(msg, str):
                    await ws.send_text(msg)
                else:
                    await ws.send_bytes(msg)
        except (ConnectionClosed, WebSocketDisconnect):
            pass  # the broker's side closed, or the client left while a message was on its way to it
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # the client may be gone already
            await ws.close(code=up.close_code or 1000, reason=up.close_reason or "")

    async def upward() -> None:
        code = 1000
        with contextlib.suppress(WebSocketDisconnect, ConnectionClosed):
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    code = msg.get("code", 1000)
                    break
                if msg.get("text") is not None:
                    await up.send(msg["text"])
                elif msg.get("bytes") is not None:
                    await up.send(msg["bytes"])
        await up.close(code=code if code in _PASSABLE or 3000 <= code < 5000 else 1000)

    tasks = [asyncio.create_task(down()), asyncio.create_task(upward())]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, Exception):  # retrieved, and said once, not as an unretrieved task's
            log.warning("a stream connection through the front ended with %r", outcome)
    await up.close()
