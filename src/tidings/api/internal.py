"""The broker's private face for its front processes (docs/scaling.md).

Served only on a Unix socket in the private data folder, never on the network. It is
the public app, plus two routes a front uses for ``icrc72_publish``, taken only with the
header ``x-tidings-front`` carrying the secret the broker gave its fronts at start (a
front passes every other request through, and strips that header from what clients
send, so a client reaching ``/_internal/...`` gets the public app's 404):

- ``POST /_internal/publish``: events the front has already checked and stamped
  (``core.ingest``), as one msgpack ``PublishBatch``, with the caller's own
  ``Authorization`` header; answered exactly as ``POST /v1/icrc72_publish`` would be.
- ``POST /_internal/auth``: 200 or the 401 the caller's token deserves, for a front that
  must refuse a request it cannot parse (413) without telling a stranger first.
"""

from __future__ import annotations

import hmac

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..broker import Broker
from ..core.ingest import PublishBatch
from ..errors import ApiError, StoreUnavailable
from .app import api_error, publish_reply, served

__all__ = ["FRONT_HEADER", "internal_app"]


_decode_batch = msgspec.msgpack.Decoder(PublishBatch).decode


FRONT_HEADER = "x-tidings-front"


def internal_app(broker: Broker, public: Starlette, secret: str) -> ASGIApp:
    async def publish(request: Request) -> Response:
        try:
            caller = await broker.auth.principal(request.headers.get("authorization"))
            batch = _decode_batch(await request.body())
            warnings: list[str] = []
            refused = {i: (ns, why) for i, ns, why in batch.refused}
            results = await broker.broadcaster.commit(caller, batch.n, batch.rows, refused, batch.now, warnings)
        except (ApiError, StoreUnavailable) as e:
            return api_error(e)
        served()
        return publish_reply(results, warnings)

    async def auth(request: Request) -> Response:
        try:
            await broker.auth.principal(request.headers.get("authorization"))
        except (ApiError, StoreUnavailable) as e:
            return api_error(e)
        return Response(status_code=200)

    private = Starlette(routes=[
        Route("/_internal/publish", publish, methods=["POST"]),
        Route("/_internal/auth", auth, methods=["POST"]),
    ])
    expected = secret.encode()
    header = FRONT_HEADER.encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/_internal/"):
            given = next((v for k, v in scope["headers"] if k == header), b"")
            if hmac.compare_digest(given, expected):
                await private(scope, receive, send)
                return
        await public(scope, receive, send)

    return app
