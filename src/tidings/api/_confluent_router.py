"""Routing of the Confluent-compatible face: raw path matching, authentication, errors.

Paths are matched segment by segment on the raw (still percent-encoded) path, so a
subject holding ``/`` sent as ``%2F`` stays one segment. A path under one of the face's
prefixes that matches nothing is answered in Confluent's shape (404 or 405), not tidings'.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import msgspec
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..broker import Broker
from ..errors import ApiError, Forbidden, PayloadTooLarge, StoreError, Unauthenticated
from ..store import PrincipalRecord
from ._confluent_wire import MEDIA_TYPE, REQUEST_TYPES, ConfluentError, ErrorOut, as_bearer, integer

__all__ = ["Call", "Handler", "Raw", "Router", "page"]

log = logging.getLogger("tidings.api.confluent")
_encode = msgspec.json.Encoder().encode
_VERBS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


class Raw(str):
    """A schema text answered as it is (the ``.../schema`` endpoints), not JSON-encoded."""


@dataclass(slots=True)
class Call:
    """One authenticated request: the caller and the wildcard segments of its path."""

    request: Request
    caller: PrincipalRecord
    args: list[str]
    limit: int

    @property
    def query(self) -> QueryParams:
        return self.request.query_params

    async def body(self) -> bytes:
        ctype = self.request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype not in REQUEST_TYPES:
            raise ConfluentError(415, 415, f"HTTP 415 Unsupported Media Type: {ctype}")
        chunks, size = [], 0
        async for chunk in self.request.stream():
            size += len(chunk)
            if size > self.limit:
                raise PayloadTooLarge(f"the body exceeds the limit of {self.limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


Handler = Callable[[Call], Awaitable[Any]]


def page(items: list[Any], query: QueryParams) -> list[Any]:
    """``offset``/``limit`` paging as Confluent does it (a limit of 0 or less: everything)."""
    offset, limit = max(0, integer(query, "offset", 0)), integer(query, "limit", -1)
    return items[offset:] if limit <= 0 else items[offset:offset + limit]


def error_response(status: int, error_code: int, message: str) -> Response:
    headers = {"WWW-Authenticate": 'Basic realm="tidings"'} if status == 401 else None
    return Response(_encode(ErrorOut(error_code, message)), status, headers, media_type=MEDIA_TYPE)


def _segments(request: Request) -> list[str]:
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes):
        return [unquote(s) for s in raw.decode("latin-1").split("?", 1)[0].strip("/").split("/")]
    return str(request.scope["path"]).strip("/").split("/")


def _match(pattern: tuple[str, ...], segments: list[str]) -> list[str] | None:
    if len(pattern) != len(segments):
        return None
    args = []
    for p, s in zip(pattern, segments, strict=True):
        if p == "*":
            args.append(s)
        elif p != s:
            return None
    return args


class Router:
    """Dispatches ``(verb, pattern)`` to handlers; ``*`` in a pattern matches one segment."""

    def __init__(self, broker: Broker, table: Sequence[tuple[str, tuple[str, ...], Handler]]) -> None:
        self.broker = broker
        self.table = table

    def routes(self) -> list[BaseRoute]:
        """Starlette routes for every prefix of the table, the prefix alone and below it."""
        prefixes = dict.fromkeys(pattern[0] for _, pattern, _ in self.table)
        out: list[BaseRoute] = []
        for p in prefixes:
            out += [Route(f"/{p}", self.dispatch, methods=_VERBS, include_in_schema=False),
                    Route(f"/{p}/{{rest:path}}", self.dispatch, methods=_VERBS, include_in_schema=False)]
        return out

    async def dispatch(self, request: Request) -> Response:
        segments, allowed = _segments(request), []
        for verb, pattern, handler in self.table:
            args = _match(pattern, segments)
            if args is None:
                continue
            if verb == request.method:
                return await self._run(request, handler, args)
            allowed.append(verb)
        if allowed:
            response = error_response(405, 405, f"HTTP 405 Method Not Allowed; use {', '.join(allowed)}")
            response.headers["Allow"] = ", ".join(dict.fromkeys(allowed))
            return response
        return error_response(404, 404, "HTTP 404 Not Found")

    async def _run(self, request: Request, handler: Handler, args: list[str]) -> Response:
        try:
            caller = await self.broker.auth.principal(as_bearer(request.headers.get("authorization")))
            await self.broker.schemas.refresh()  # another broadcaster may have changed the registry
            result = await handler(Call(request, caller, args, self.broker.settings.max_body_bytes))
        except ConfluentError as e:
            return error_response(e.status, e.error_code, e.message)
        except Unauthenticated as e:
            return error_response(401, 40101, f"{e.message} (or HTTP Basic with a tidings token as the password; "
                                              "Confluent clients: basic.auth.user.info=<any user>:<token>)")
        except Forbidden as e:
            return error_response(403, 40301, e.message)
        except ApiError as e:  # PayloadTooLarge 413, BadRequest 400, Unavailable 503, ...
            return error_response(e.status, e.status, e.message)
        except StoreError:
            log.exception("%s %s: store error", request.method, request.url.path)
            return error_response(500, 50001, "Error in the backend data store")
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(500, 500, "internal error; the server log has the details")
        body = result.encode() if isinstance(result, Raw) else _encode(result)
        return Response(body, media_type=MEDIA_TYPE)
