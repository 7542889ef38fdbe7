"""The console's routes, mounted by the API app: the page and its assets (public: they
hold no data), and the authenticated read-only JSON and event-stream routes.

Security (docs/console.md): the page keeps the principal's token in ``sessionStorage`` and
sends it as ``Authorization: Bearer`` on every request; no cookie is set or read, so a
cross-site request carries no credential and needs no CSRF token. Every response carries a
strict Content-Security-Policy (no inline script or style, everything from this origin).
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ..broker import Broker
from ..core.int64 import INT64_MAX
from ..errors import ApiError, BadRequest, Forbidden, NotFound
from ..store import PrincipalRecord
from .queries import may_tail, principals_page, publications_page, subscriptions_page
from .streams import MAX_WATCHED, stats_feed, tail_feed

__all__ = ["CSP", "console_routes"]

log = logging.getLogger("tidings.console")
_encode = msgspec.json.Encoder().encode

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8"}


def _asset(name: str) -> bytes | None:
    """A file of the package's ``static`` folder, or None (no path leaves the folder)."""
    if not name or name.startswith(".") or "/" in name or "\\" in name:
        return None
    f = resources.files(__package__).joinpath("static", name)
    return f.read_bytes() if f.is_file() else None


def _json(body: Any, status: int = 200) -> Response:
    return Response(_encode(body), status_code=status, media_type="application/json", headers=_HEADERS)


def _error(e: ApiError) -> Response:
    return _json({"error": {"code": e.code, "message": e.message}}, e.status)


def _int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {raw[:40]!r}", code="invalid_argument") from None
    if not 0 <= value <= INT64_MAX:
        raise BadRequest(f"{name} is out of range", code="out_of_range")
    return value


def _text(request: Request, name: str, limit: int = 256) -> str:
    raw = request.query_params.get(name, "")
    if len(raw) > limit:
        raise BadRequest(f"{name} is longer than {limit} characters", code="invalid_argument")
    return raw


def _never() -> bool:
    return False


def console_routes(broker: Broker) -> list[BaseRoute]:
    """The console's routes. The app that mounts them may set ``app.state.stopping``, a
    callable saying whether the server is shutting down, to end the event streams then."""
    async def caller(request: Request) -> PrincipalRecord:
        return await broker.auth.principal(request.headers.get("authorization"))

    def guarded(fn: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request, await caller(request))  # type: ignore[no-any-return]
            except ApiError as e:
                return _error(e)
            except Exception:
                log.exception("console %s failed", request.url.path)
                return _json({"error": {"code": "internal", "message": "internal error"}}, 500)

        return endpoint

    async def page(request: Request) -> Response:
        body = _asset("index.html")
        if body is None:  # the package was installed without its data
            return Response("the console's files are missing from this installation", 500, headers=_HEADERS)
        return Response(body, media_type=_TYPES[".html"], headers=_HEADERS)

    async def slash(request: Request) -> Response:
        return RedirectResponse("/console", 308)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        body = _asset(name)
        if body is None:
            return _error(NotFound(f"no console file {name!r}", code="not_found"))
        kind = _TYPES.get(name[name.rfind("."):], "application/octet-stream")
        return Response(body, media_type=kind, headers={**_HEADERS, "Cache-Control": "no-cache"})

    async def subscriptions(request: Request, who: PrincipalRecord) -> Response:
        return _json(await subscriptions_page(
            broker, who, _text(request, "q"), _int(request, "after"), _int(request, "take")))

    async def publications(request: Request, who: PrincipalRecord) -> Response:
        after = _text(request, "after") or None
        return _json(await publications_page(broker, who, _text(request, "q"), after, _int(request, "take")))

    async def principals(request: Request, who: PrincipalRecord) -> Response:
        if not who.admin:
            raise Forbidden("only an admin may list principals")
        after = _text(request, "after") or None
        return _json(await principals_page(broker, _text(request, "q"), after, _int(request, "take")))

    def recheck(request: Request) -> Any:
        return lambda: caller(request)

    def stopping(request: Request) -> Any:
        # Set by server.py: whether the server is shutting down (streams end, pages reconnect).
        return lambda: bool(getattr(request.app.state, "stopping", _never)())

    def stream(body: Any) -> Response:
        headers = {**_HEADERS, "X-Accel-Buffering": "no"}
        return StreamingResponse(body, media_type="text/event-stream", headers=headers)

    async def stats(request: Request, who: PrincipalRecord) -> Response:
        raw = _text(request, "ids", 400)
        try:
            ids = [int(x) for x in raw.split(",") if x.strip()]
        except ValueError:
            raise BadRequest("ids must be integers separated by commas", code="invalid_argument") from None
        if len(ids) > MAX_WATCHED:
            raise BadRequest(f"a stats feed follows at most {MAX_WATCHED} subscriptions", code="invalid_argument")
        return stream(stats_feed(broker, who, ids, recheck(request), stopping(request)))

    async def tail(request: Request, who: PrincipalRecord) -> Response:
        namespace = _text(request, "namespace")
        refused = may_tail(broker, who, namespace)
        if refused is not None:
            if namespace not in broker.orchestrator.publications:
                raise NotFound(refused, code="namespace_not_found")
            raise Forbidden(refused)
        return stream(tail_feed(broker, who, namespace, recheck(request), stopping(request), _int(request, "after")))

    return [
        Route("/console", page, methods=["GET"]),
        Route("/console/", slash, methods=["GET"]),
        Route("/console/static/{name}", static, methods=["GET"]),
        Route("/console/api/subscriptions", guarded(subscriptions), methods=["GET"]),
        Route("/console/api/publications", guarded(publications), methods=["GET"]),
        Route("/console/api/principals", guarded(principals), methods=["GET"]),
        Route("/console/api/stats", guarded(stats), methods=["GET"]),
        Route("/console/api/tail", guarded(tail), methods=["GET"]),
    ]
