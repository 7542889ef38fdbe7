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
- ``POST /_internal/front-stats``: a front's own refusals and waiting publishes
  (``_front_reports``), every second, for ``/metrics``.
"""

from __future__ import annotations

import contextlib
import hmac

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..broker import Broker
from ..core.ingest import PublishBatch
from ..core.undecodable import UNDECODABLE
from ..errors import ApiError, StoreUnavailable
from ..store import PrincipalRecord
from ._admit import admitted_body, declared_length
from ._front_reports import FrontReports, decode_report
from .app import api_error, publish_reply, served

__all__ = ["FRONT_HEADER", "commit_batch", "internal_app"]


_decode_batch = msgspec.msgpack.Decoder(PublishBatch).decode


FRONT_HEADER = "x-tidings-front"


async def commit_batch(broker: Broker, caller: PrincipalRecord, batch: PublishBatch) -> Response:
    """``icrc72_publish``'s answer to ``batch``, checked and stamped by a front, from
    ``caller``: whichever way it came (this app's route or the link, ``api.link``).
    Raises what the commit raises (``ApiError``, ``StoreUnavailable``)."""
    warnings: list[str] = []
    refused = {i: (ns, why) for i, ns, why in batch.refused}
    results = await broker.broadcaster.commit(caller, batch.n, batch.rows, refused, batch.now, warnings)
    served()
    return publish_reply(results, warnings)


def internal_app(broker: Broker, public: Starlette, secret: str) -> ASGIApp:
    async def publish(request: Request) -> Response:
        ticket = None
        try:
            ticket = broker.overload.admit(declared_length(request))  # before the token's look-up waits
            with broker.overload.waiting():
                caller = await broker.auth.principal(request.headers.get("authorization"))
            # The front checked the size against the same limit; this one is its own
            # broker's, so a batch re-encoded a little larger still fits.
            body = await admitted_body(request, 2 * broker.settings.max_body_bytes + 4096, broker.overload, ticket)
            return await commit_batch(broker, caller, _decode_batch(body))
        except (ApiError, StoreUnavailable) as e:
            return api_error(e)
        finally:
            if ticket is not None:
                broker.overload.release(ticket)

    async def auth(request: Request) -> Response:
        try:
            await broker.auth.principal(request.headers.get("authorization"))
        except (ApiError, StoreUnavailable) as e:
            return api_error(e)
        return Response(status_code=200)

    async def front_stats(request: Request) -> Response:
        # Only the broker's own fronts reach this (the secret): a report that does not
        # decode is a bug of ours, dropped.
        with contextlib.suppress(*UNDECODABLE):
            reports.update(decode_report(await request.body()))
        return Response(status_code=204)

    reports: FrontReports = public.state.front_reports
    private = Starlette(routes=[
        Route("/_internal/publish", publish, methods=["POST"]),
        Route("/_internal/auth", auth, methods=["POST"]),
        Route("/_internal/front-stats", front_stats, methods=["POST"]),
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
