"""The DLT Adapter API, spoken by the distributor (REFERENCE §4), plus the push endpoints
of the adapters and a health view.

* ``POST /api/v1/publishEvent``: the publish body; answers ``201`` with
  ``{"globalId": ..., "networks": [...]}`` once the event is queued, durably, for every
  network (it reaches them in the background, in order, also those that are down now).
* ``POST /api/v1/subscribe``: the subscribe body; answers ``201`` with ``{"id": ...}``.
  The same body again answers the same id (``200``) and does not notify twice.
* ``GET /api/v1/events``: every event of every reachable network, one per global id,
  ``network`` stripped, oldest first; ``?eventType=`` narrows it.
* ``GET /health``: per network, whether it is followed, whether its outbox is failing,
  and how many events wait in it.

Errors: ``{"error": {"code", "message"}}`` with ``400 malformed_json``,
``400 invalid_argument``, ``400 missing_global_id``, ``400 invalid_global_id``.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.interchain import DltPublish, DltSubscribe, EventNotification, InvalidEvent, global_id, strip_network
from ..core.interchain import validate_subscribe as _check_subscribe
from .distributor import Distributor, Subscription

__all__ = ["make_app"]

log = logging.getLogger("tidings.interchain.api")

_encode = msgspec.json.Encoder().encode
_decode_publish = msgspec.json.Decoder(DltPublish).decode
_decode_subscribe = msgspec.json.Decoder(DltSubscribe).decode


def _json(body: Any, status: int = 200) -> Response:
    return Response(_encode(body), status, media_type="application/json")


def _error(status: int, code: str, message: str) -> Response:
    return _json({"error": {"code": code, "message": message}}, status)


def _decode(decoder: Any, raw: bytes) -> Any:
    try:
        return decoder(raw)
    except msgspec.ValidationError as e:
        raise InvalidEvent(str(e)) from e
    except msgspec.DecodeError as e:
        raise InvalidEvent(f"the body is not JSON: {e}", code="malformed_json") from e
    except RecursionError as e:  # (core.undecodable)
        raise InvalidEvent("the body is nested too deeply") from e


def make_app(distributor: Distributor, *, lifespan: Any = None) -> Starlette:
    async def publish_event(request: Request) -> Response:
        try:
            body: DltPublish = _decode(_decode_publish, await request.body())
            gid = await distributor.publish(body)
        except InvalidEvent as e:
            return _error(400, e.code, str(e))
        return _json({"globalId": gid, "networks": list(distributor.networks)}, 201)

    async def subscribe(request: Request) -> Response:
        try:
            body: DltSubscribe = _decode(_decode_subscribe, await request.body())
            _check_subscribe(body)
        except InvalidEvent as e:
            return _error(400, e.code, str(e))
        problem = await distributor.outbound.registration_problem(body.notificationEndpoint, "notificationEndpoint")
        if problem:
            return _error(400, "endpoint_refused", problem)
        known = Subscription.id_of(body) in distributor.subscriptions
        sub = await distributor.subscribe(body)
        return _json({"id": sub.id}, 200 if known else 201)

    async def events(request: Request) -> Response:
        wanted = request.query_params.get("eventType")
        merged: dict[str, EventNotification] = {}
        for network in distributor.networks.values():
            try:
                found = await network.events()
            except Exception as e:  # a network that is down or cannot list is left out
                log.info("events of %s not listed: %r", network.name, e)
                continue
            for n in found:
                if wanted is not None and n.eventType != wanted:
                    continue
                try:
                    merged.setdefault(global_id(n.dataLocation), strip_network(n))
                except InvalidEvent:
                    continue
        out = sorted(merged.values(), key=lambda n: n.timestamp or 0)
        return _json(out)

    async def health(request: Request) -> Response:
        return _json(await distributor.health())

    routes: list[Any] = [
        Route("/api/v1/publishEvent", publish_event, methods=["POST"]),
        Route("/api/v1/subscribe", subscribe, methods=["POST"]),
        Route("/api/v1/events", events, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    for network in distributor.networks.values():
        routes += network.routes()
    return Starlette(routes=routes, lifespan=lifespan)
