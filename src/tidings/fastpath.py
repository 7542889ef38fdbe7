"""Starlette with its hottest routes served directly (the broker's and the fronts' apps).

Starlette walks its middleware and its route list for each request: for a one-event
``icrc72_publish`` that walk cost about as much as the publish's own checks
(BENCHMARKS.md, "One event per request"). An app made with ``fast`` routes serves a POST
to one of those exact paths straight to its endpoint, with the path parameters given,
and everything else as Starlette would. The endpoints given this way answer every
failure themselves; one that escapes is logged and answered as the app's 500 would be.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["Endpoint", "FastPathApp"]

log = logging.getLogger("tidings.api")

Endpoint = Callable[[Request], Awaitable[Response]]


class FastPathApp(Starlette):
    def __init__(self, *, fast: Mapping[str, tuple[Endpoint, dict[str, str]]],
                 internal_error: Callable[[], Response], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._fast = dict(fast)
        self._internal_error = internal_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            hit = self._fast.get(scope["path"])
            if hit is not None:
                scope["app"] = self
                scope["path_params"] = hit[1]
                try:
                    response = await hit[0](Request(scope, receive))
                except Exception:
                    log.exception("POST %s failed", scope["path"])
                    response = self._internal_error()
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
