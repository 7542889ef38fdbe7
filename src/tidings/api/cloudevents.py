"""``POST /v1/cloudevents/<namespace>``: publishing CloudEvents (docs/cloudevents.md).

The request's CloudEvents (binary, structured or batched mode) become events of the
namespace (``core.cloudevents``) and go through ``icrc72_publish``'s own path: the same
rights, schemas, limits and statistics. The answer is ``icrc72_publish``'s itemized
result, with the status ``core.cloudevents.answer_status`` gives. A front process takes
the same route itself (``front/app.py``), as it takes ``icrc72_publish``.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from ..broker import Broker
from ..core import cloudevents
from ..errors import ApiError, BadRequest, Forbidden, StoreUnavailable
from ._admit import admitted_body, declared_length
from ._method import warning_header

__all__ = ["cloudevents_routes"]

_encode = msgspec.json.Encoder().encode


def cloudevents_routes(broker: Broker, refuse: Callable[[ApiError | StoreUnavailable], Response]) -> list[Route]:
    """The routes; ``refuse`` answers an ``ApiError`` (or a store that cannot be reached:
    503) as the rest of the API does."""
    limit = broker.settings.max_body_bytes

    async def publish(request: Request) -> Response:
        namespace = request.path_params["namespace"]
        content_type = request.headers.get("content-type")
        ticket = None
        try:
            ticket = broker.overload.admit(declared_length(request))  # before the token's look-up waits
            with broker.overload.waiting():
                caller = await broker.auth.principal(request.headers.get("authorization"))
            body = await admitted_body(request, limit, broker.overload, ticket)
            events = cloudevents.from_http(
                namespace, content_type, request.headers.raw, body, max_events=broker.settings.max_batch_items,
                key=request.headers.get("idempotency-key"),
            )
            warnings: list[str] = []
            results = await broker.broadcaster.publish(caller, events, warnings)
        except cloudevents.CloudEventError as e:
            return refuse(_Refused(str(e), e.status, "invalid_cloudevent"))
        except (ApiError, StoreUnavailable) as e:
            return refuse(e)
        except ClientDisconnect:
            return Response(status_code=400)
        finally:
            if ticket is not None:
                broker.overload.release(ticket)
        status = cloudevents.answer_status(results, cloudevents.media_type(content_type) == cloudevents.BATCH)
        headers = warning_header(warnings) if warnings else {}
        if status in (429, 503):
            headers["Retry-After"] = "1"
        return Response(_encode(results), status_code=status, media_type="application/json", headers=headers)

    async def handshake(request: Request) -> Response:
        # CloudEvents Web Hooks §4.2: a sender (Azure Event Grid, a Knative sink binding
        # that validates...) asks with OPTIONS whether it may post here. Allowed: a
        # caller that may publish to the namespace; its origin is echoed back.
        namespace = request.path_params["namespace"]
        try:
            caller = await broker.auth.principal(request.headers.get("authorization"))
            origin = request.headers.get("webhook-request-origin")
            if origin is not None and not cloudevents.valid_origin(origin):
                raise BadRequest("WebHook-Request-Origin is not a host name (printable ASCII, at most 255 "
                                 "characters)", code="invalid_argument")
            await broker.orchestrator.known([namespace])
            refusal = broker.orchestrator.publish_refusal(caller.name, namespace)
            if refusal is not None:
                raise Forbidden(refusal)
        except (ApiError, StoreUnavailable) as e:
            return refuse(e)
        headers = {"Allow": "POST, OPTIONS"}
        if origin is not None:
            headers["WebHook-Allowed-Origin"] = origin
        return Response(status_code=200, headers=headers)

    async def not_allowed(request: Request) -> Response:
        answer = refuse(_Refused(
            "CloudEvents are published with POST (OPTIONS: the webhook handshake)", 405, "method_not_allowed"
        ))
        answer.headers["Allow"] = "POST, OPTIONS"
        return answer

    path = "/v1/cloudevents/{namespace}"
    return [
        Route(path, publish, methods=["POST"]),
        Route(path, handshake, methods=["OPTIONS"]),
        Route(path, not_allowed, methods=["GET", "HEAD", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT"]),
    ]


class _Refused(ApiError):
    """A refusal whose status is known only when it happens (400, 415, 431; 405)."""

    def __init__(self, message: str, status: int, code: str) -> None:
        super().__init__(message, code=code)
        self.status = status
