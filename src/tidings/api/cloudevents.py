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

from ..bodies import read_body
from ..broker import Broker
from ..core import cloudevents
from ..errors import ApiError, StoreUnavailable
from ._method import warning_header

__all__ = ["cloudevents_route"]

_encode = msgspec.json.Encoder().encode


def cloudevents_route(broker: Broker, refuse: Callable[[ApiError | StoreUnavailable], Response]) -> Route:
    """The route; ``refuse`` answers an ``ApiError`` (or a store that cannot be reached:
    503) as the rest of the API does."""
    limit = broker.settings.max_body_bytes

    async def publish(request: Request) -> Response:
        namespace = request.path_params["namespace"]
        content_type = request.headers.get("content-type")
        try:
            caller = await broker.auth.principal(request.headers.get("authorization"))
            body = await read_body(request, limit)
            events = cloudevents.from_http(
                namespace, content_type, request.headers.raw, body, max_events=broker.settings.max_batch_items
            )
            warnings: list[str] = []
            results = await broker.broadcaster.publish(caller, events, warnings)
        except cloudevents.CloudEventError as e:
            refusal = ApiError(str(e), code="invalid_cloudevent")
            refusal.status = e.status
            return refuse(refusal)
        except (ApiError, StoreUnavailable) as e:
            return refuse(e)
        except ClientDisconnect:
            return Response(status_code=400)
        status = cloudevents.answer_status(results, cloudevents.media_type(content_type) == cloudevents.BATCH)
        headers = warning_header(warnings) if warnings else {}
        if status == 429:
            headers["Retry-After"] = "1"
        return Response(_encode(results), status_code=status, media_type="application/json", headers=headers)

    return Route("/v1/cloudevents/{namespace}", publish, methods=["POST"])
