"""``POST /v1/icrc72_publish_relay``: events another broadcaster of this store forwards
to this one, the owner of their publication (``broker.cluster.Forwarding``).

Only broadcasters sharing this store may call it: the body is signed with their shared
secret (header ``x-tidings-relay``). Anyone else, and every caller of a broadcaster
that has no peers, gets 403. The body is msgpack ``RelayBatch``; the answer, msgpack
``Relayed``, holds what ``icrc72_publish`` would have answered the publisher.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from ..bodies import read_body
from ..broker import Broker
from ..broker.cluster import RELAY_HEADER, RelayBatch, Relayed, verify
from ..core.undecodable import UNDECODABLE
from ..errors import ApiError, BadRequest, Forbidden, StoreUnavailable
from ..store import PrincipalRecord

__all__ = ["relay_route"]

_decode = msgspec.msgpack.Decoder(RelayBatch).decode
_encode = msgspec.msgpack.Encoder().encode


def relay_route(broker: Broker, error_response: Callable[[int, str, str], Response]) -> Route:
    """The route; ``error_response`` answers an ``ApiError`` as the rest of the API does."""
    limit = broker.settings.max_body_bytes

    async def relay(request: Request) -> Response:
        try:
            secret = broker.forwarding.secret if broker.forwarding is not None else b""
            if not secret:
                raise Forbidden("icrc72_publish_relay is for broadcasters sharing this one's store, and it has none")
            body = await read_body(request, limit)
            if not verify(secret, request.headers.get(RELAY_HEADER), body, broker.clock.now_ns() // 1_000_000):
                raise Forbidden("icrc72_publish_relay takes only relays signed by a broadcaster of this store")
            try:
                relayed = _decode(body)
            except UNDECODABLE as e:
                raise BadRequest(f"icrc72_publish_relay: {e}", code="invalid_argument") from None
            batch = relayed.batch
            seen = {r.index for r in batch.rows}
            if not 0 <= batch.n <= broker.settings.max_batch_items or len(seen) != len(batch.rows) or any(
                not 0 <= i < batch.n for i in seen
            ):
                raise BadRequest("icrc72_publish_relay: event positions out of range", code="invalid_argument")
            warnings: list[str] = []
            publisher = PrincipalRecord(name=relayed.source, admin=relayed.admin)
            if len(relayed.token) > 64:
                raise BadRequest("icrc72_publish_relay: the relay token is too long", code="invalid_argument")
            results = await broker.broadcaster.commit(
                publisher, batch.n, batch.rows, {}, batch.now, warnings, relayed=True,
                relay_token=relayed.token or None,
            )
        except (ApiError, StoreUnavailable) as e:
            if isinstance(e, StoreUnavailable):
                return error_response(503, "unavailable", f"the store is unavailable: {e}")
            return error_response(e.status, e.code, e.message)
        except ClientDisconnect:
            return Response(status_code=400)
        return Response(_encode(Relayed(results, warnings)), media_type="application/msgpack")

    return Route("/v1/icrc72_publish_relay", relay, methods=["POST"])
