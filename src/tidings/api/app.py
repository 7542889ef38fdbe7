"""The HTTP API: every method at ``POST /v1/<name>``, JSON in, JSON out.

Bodies are read with a size limit and decoded by one typed msgspec Decoder per method;
errors are answered as ``{"error": {"code": ..., "message": ...}}`` with a 4xx status
(docs/wire-format.md lists the codes). An unexpected failure is logged and answered 500
``internal`` without detail; it never takes the process down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route, WebSocketRoute

from ..bodies import declared_length, read_body
from ..broker import Broker
from ..broker.metrics import ClusterView
from ..broker.publish import Ticket
from ..console import console_routes
from ..core import ingest
from ..core.long_ints import long_integer, long_message
from ..errors import ApiError, BadRequest, NotFound, StoreError, StoreUnavailable
from ..fastpath import FastPathApp
from ._admit import admitted_body
from ._confluent_router import error_response as confluent_error
from ._front_reports import FrontReports
from ._method import Reply, warning_header
from .asyncapi import asyncapi_route
from .cloudevents import cloudevents_routes
from .confluent import ENDPOINTS, confluent_routes
from .methods import METHODS
from .openapi import openapi_document
from .relay import relay_route
from .stream import StreamFace

__all__ = ["create_app", "error_response", "publish_reply"]

log = logging.getLogger("tidings.api")
_encode = msgspec.json.Encoder().encode
_JSON = "application/json"
_METRICS_READ_S = 0.25
"""How long ``/metrics`` waits for the store's gauges before answering with the last ones read."""
_CONFLUENT_PREFIXES = frozenset(pattern[0] for _, pattern, _ in ENDPOINTS)


class _ErrorBody(msgspec.Struct):
    code: str
    message: str


class _Error(msgspec.Struct):
    error: _ErrorBody


def error_response(status: int, code: str, message: str, retry_after_s: int | None = None) -> Response:
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    return Response(_encode(_Error(_ErrorBody(code, message))), status_code=status, media_type=_JSON, headers=headers)


class _Outage:
    """A store that cannot be reached is told once per episode: when it starts, with the
    reason, and when a request is served again, with how long it lasted and how many
    requests were answered 503; not once per request (thousands a second)."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.refused = 0

    def refused_now(self, why: BaseException) -> None:
        self.refused += 1
        if self.since is None:
            self.since = time.monotonic()
            log.warning("the store is unavailable; requests that need it are answered 503 until it is back: %s", why)

    def served(self) -> None:
        if self.since is not None:
            log.warning("the store is available again after %.1f s; %d request(s) were answered 503 meanwhile",
                        time.monotonic() - self.since, self.refused)
            self.since, self.refused = None, 0


_OUTAGE = _Outage()


def api_error(e: ApiError | StoreUnavailable) -> Response:
    """The answer to a refused request: its documented JSON error, with ``Retry-After``
    when trying again later makes sense (a store that is unavailable: 503)."""
    if isinstance(e, StoreUnavailable):
        _OUTAGE.refused_now(e)
        return error_response(503, "unavailable", f"the store is unavailable; retry shortly ({e})", 1)
    if isinstance(e.__cause__, StoreUnavailable):
        _OUTAGE.refused_now(e.__cause__)
    return error_response(e.status, e.code, e.message, getattr(e, "retry_after_s", None))


def served() -> None:
    """A request was answered by the store's work: an outage, if one was told, is over."""
    if _OUTAGE.since is not None:
        _OUTAGE.served()


def publish_reply(results: Any, warnings: list[str]) -> Response:
    """``icrc72_publish``'s answer, with the Warning header when there are warnings."""
    return Response(_encode(results), media_type=_JSON, headers=warning_header(warnings) if warnings else None)


def _well_formed(body: bytes) -> bool:
    """Whether ``body`` is syntactically valid JSON (only asked on the error path)."""
    try:
        msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError):  # a string that is not UTF-8
        return False
    except RecursionError:
        return True  # too deep to tell; the typed decoder's answer stands
    return True


class _StoredGauges:
    """The stored gauges of ``/metrics``: one read of the store at a time, waited for at
    most ``_METRICS_READ_S``; one that takes longer goes on, and its figures serve the
    scrapes after it (a read cancelled on a paused PostgreSQL would wait out the driver's
    own timeout: never cancelled)."""

    def __init__(self) -> None:
        self.last: dict[int, int] = {}
        self._reading: asyncio.Future[dict[int, int]] | None = None

    async def read(self, fetch: Callable[[], Awaitable[dict[int, int]]]) -> dict[int, int]:
        if self._reading is None:
            reading = self._reading = asyncio.ensure_future(fetch())
            reading.add_done_callback(self._done)
        await asyncio.wait({self._reading}, timeout=_METRICS_READ_S)
        return self.last

    def _done(self, f: asyncio.Future[dict[int, int]]) -> None:
        self._reading = None
        if not f.cancelled() and f.exception() is None:
            self.last = f.result()
        elif not f.cancelled() and not isinstance(f.exception(), StoreError):
            log.warning("reading the stored gauges failed: %r", f.exception())


def create_app(broker: Broker, *, manage_broker: bool = True) -> Starlette:
    """The ASGI app over ``broker``; with ``manage_broker`` it starts and stops the broker."""
    limit = broker.settings.max_body_bytes
    stream = StreamFace(broker)

    async def call(request: Request) -> Response:
        name = request.path_params["method"]
        ticket: Ticket | None = None
        try:
            method = METHODS.get(name)
            if method is None:
                raise NotFound(f"there is no method {name!r}; see /openapi.json", code="unknown_method")
            if name == "icrc72_publish":
                # What waits for the store is capped (docs/operations.md), before anything
                # else waits on it: the token's look-up is a read that a stalled store holds too.
                ticket = broker.overload.admit(declared_length(request))
            if ticket is not None:
                with broker.overload.waiting():
                    caller = await broker.auth.principal(request.headers.get("authorization"))
            else:
                caller = await broker.auth.principal(request.headers.get("authorization"))
            if ticket is not None:
                body = await admitted_body(request, limit, broker.overload, ticket)
            else:
                body = await read_body(request, limit)
            try:
                arg = method.decode(body)
            except msgspec.ValidationError as e:
                long = long_integer(body, e)
                if long is not None:
                    raise BadRequest(f"{name}: {long_message(*long)}", code="out_of_range") from None
                # The typed decoder checks types while it parses, so a type error can come
                # before broken JSON further on: tell the two apart.
                if not _well_formed(body):
                    raise BadRequest("the body is not valid JSON", code="malformed_json") from None
                raise BadRequest(f"{name}: {e}", code="invalid_argument") from None
            except msgspec.DecodeError as e:
                raise BadRequest(f"the body is not valid JSON: {e}", code="malformed_json") from None
            except UnicodeDecodeError:
                raise BadRequest("the body is not valid UTF-8", code="malformed_json") from None
            except RecursionError:
                raise BadRequest("the body is nested too deeply", code="invalid_argument") from None
            if name == "icrc72_publish" and "traceparent" in request.headers:
                # The request's trace context is each event's that has none of its own.
                ingest.add_trace_context(arg, request.headers["traceparent"], request.headers.get("tracestate"))
            if name == "icrc72_publish" and "idempotency-key" in request.headers:
                bad = ingest.key_from_header(arg, request.headers["idempotency-key"])
                if bad is not None:
                    raise BadRequest(bad, code="invalid_argument")
            result = await method.handler(broker, caller, arg)
            served()
        except (ApiError, StoreUnavailable) as e:
            # StoreUnavailable: the database restarts, fails over or is cut off: retryable.
            return api_error(e)
        except ClientDisconnect:
            # The client went away mid-request: nothing to answer, nothing wrong here.
            log.debug("%s: the client disconnected before its body was read", name)
            return Response(status_code=400)
        except OverflowError:
            # A number too large for the store where no check caught it first: the input's
            # fault, so a 400; logged, since a check should have caught it.
            log.warning("%s: a number out of range reached the store", name)
            return error_response(400, "out_of_range", "a number in the request is out of range")
        except Exception:
            log.exception("%s failed", name)
            return error_response(500, "internal", "internal error; the server log has the details")
        finally:
            if ticket is not None:
                broker.overload.release(ticket)
        if isinstance(result, Reply):
            return Response(_encode(result.body), media_type=_JSON, headers=result.headers)
        return Response(_encode(result), media_type=_JSON)

    async def method_not_allowed(request: Request) -> Response:
        response = error_response(405, "method_not_allowed", "API methods are called with POST")
        response.headers["Allow"] = "POST"
        return response

    async def openapi(request: Request) -> Response:
        return Response(_encode(openapi_document()), media_type=_JSON)

    async def docs(request: Request) -> Response:
        return HTMLResponse(_DOCS_PAGE)

    stored = _StoredGauges()
    fronts = FrontReports()

    async def metrics(request: Request) -> Response:
        # The figures of a stall are wanted most when the store does not answer: a scrape
        # never waits for it past a moment, and the stored gauges (pending notifications)
        # are then the last ones read.
        pending = await stored.read(broker.store.pending_counts)
        m = broker.membership
        cluster = ClusterView(m.me, len(m.held) if m.shared else 0, len(m.live_ids()))
        text = (broker.metrics.render(pending, broker.delivery.workers_running, cluster) + broker.overload.render()
                + fronts.render())
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def health(request: Request) -> Response:
        # Alive: the process answers. Whether to send it traffic is /readyz.
        return Response(b'{"status":"ok"}', media_type=_JSON)

    async def ready(request: Request) -> Response:
        problems = await broker.readiness()
        if problems:
            return Response(_encode({"status": "unready", "problems": problems}), status_code=503,
                            media_type=_JSON, headers={"Retry-After": "1"})
        return Response(b'{"status":"ready"}', media_type=_JSON)

    async def not_found(request: Request, exc: Exception) -> Response:
        first = request.url.path.strip("/").split("/", 1)[0]
        if first in _CONFLUENT_PREFIXES:  # a path no route could take (a control character in it)
            return confluent_error(404, 404, "HTTP 404 Not Found")
        return error_response(404, "not_found", f"nothing at {request.url.path}; methods are at /v1/<name>")

    async def wrong_verb(request: Request, exc: Exception) -> Response:
        # A verb no route of the path takes (PROPFIND, CONNECT, POST /openapi.json):
        # Starlette's own answer is plain text; the API's methods say POST.
        if request.url.path.startswith("/v1/"):
            return await method_not_allowed(request)
        allow = getattr(exc, "headers", None) or {}
        response = error_response(405, "method_not_allowed", f"{request.method} is not served at {request.url.path}")
        if "Allow" in allow:
            response.headers["Allow"] = allow["Allow"]
        return response

    async def server_error(request: Request, exc: Exception) -> Response:
        return error_response(500, "internal", "internal error")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_broker:
            async with broker:
                yield
        else:
            yield

    app = FastPathApp(
        # The hot path: a publish is served without the walk through the routes below.
        fast={"/v1/icrc72_publish": (call, {"method": "icrc72_publish"})},
        internal_error=lambda: error_response(500, "internal", "internal error"),
        routes=[
            WebSocketRoute("/v1/stream", stream.serve),
            relay_route(broker, error_response),
            *cloudevents_routes(broker, api_error),
            asyncapi_route(broker, api_error),
            Route("/v1/{method}", call, methods=["POST"]),
            Route("/v1/{method}", method_not_allowed,
                  methods=["GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/docs", docs, methods=["GET"]),
            Route("/healthz", health, methods=["GET"]),
            Route("/readyz", ready, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            *confluent_routes(broker),
            *console_routes(broker),
        ],
        exception_handlers={404: not_found, 405: wrong_verb, 500: server_error},
        lifespan=lifespan,
    )
    app.state.front_reports = fronts  # filled by the broker's private routes (``api.internal``)
    return app


_DOCS_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>tidings API</title></head>
<body><h1>tidings API</h1>
<p>Every method is <code>POST /v1/&lt;name&gt;</code> with a JSON body and
<code>Authorization: Bearer &lt;token&gt;</code>. The OpenAPI document is at
<a href="/openapi.json">/openapi.json</a>.</p></body></html>
"""
