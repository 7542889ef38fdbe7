"""``GET /asyncapi.json``: the AsyncAPI 3.0 document of what the caller may publish to
and receive (docs/asyncapi.md). The caller's view is gathered here, by the console's
isolation rules; ``core.asyncapi`` writes it as AsyncAPI.

Who sees what: every principal sees the publications (as in ``icrc72_get_publications``
and the console), but a channel here only for a namespace the caller may publish to or
subscribe to (the publication's lists); pattern channels and CloudEvents modes only of
its own subscriptions. System namespaces (``icrc72:*:sys:``) only an admin sees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..broker import Broker
from ..core import asyncapi
from ..core.namespaces import is_pattern, is_system
from ..errors import ApiError, StoreUnavailable
from ..store import PrincipalRecord

__all__ = ["asyncapi_document", "asyncapi_route"]

_encode = msgspec.json.Encoder().encode


def _bound(b: Broker, namespace: str, now: int) -> asyncapi.BoundSchema | None:
    conf = b.orchestrator.pub_configs.get(namespace)
    if conf is None or conf.schema is None:
        return None
    binding = b.binder.bind(conf.schema, now)
    if binding.schema_id is None:
        return None
    record = b.schemas.live(binding.schema_id)
    if record is None:
        return None
    return asyncapi.BoundSchema(record.id, record.format, record.model)


def asyncapi_document(b: Broker, caller: PrincipalRecord, base_url: str) -> dict[str, Any]:
    """The document for ``caller``, with servers at ``base_url``."""
    o = b.orchestrator
    now = b.clock.now_ns()  # a Deprecated schema expires by the cluster's clock
    own = [s for s in o.subscriptions.values() if s.subscriber == caller.name]
    modes: dict[str, set[str]] = {}
    for s in own:
        mode = o.sub_configs[s.id].cloudevents if s.id in o.sub_configs else None
        if mode is not None:
            modes.setdefault(s.namespace, set()).add(mode)
    channels: list[asyncapi.ChannelView] = []
    seen: set[str] = set()
    for ns in o.publications:
        if is_system(ns) and not caller.admin:
            continue
        send = o.publish_refusal(caller.name, ns) is None
        receive = o.subscriber_allowed(ns, caller.name)
        if not (send or receive):
            continue
        seen.add(ns)
        channels.append(asyncapi.ChannelView(
            ns, send=send, receive=receive, schema=_bound(b, ns, now),
            cloudevents=frozenset(modes.get(ns, ())),
        ))
    for pattern in sorted({s.namespace for s in own if is_pattern(s.namespace)}):
        match = o.matcher(pattern)
        covers = tuple(sorted(ns for ns in seen if match(ns)))
        channels.append(asyncapi.ChannelView(
            pattern, pattern=True, receive=True, cloudevents=frozenset(modes.get(pattern, ())), covers=covers,
        ))
    xmpp = b.settings.xmpp_component or None
    return asyncapi.document(channels, asyncapi.Servers(base_url, xmpp), version=__version__, caller=caller.name)


def asyncapi_route(broker: Broker, refuse: Callable[[ApiError | StoreUnavailable], Response]) -> Route:
    """The route; ``refuse`` answers a refused request as the rest of the API does."""

    async def serve(request: Request) -> Response:
        try:
            caller = await broker.auth.principal(request.headers.get("authorization"))
        except (ApiError, StoreUnavailable) as e:
            return refuse(e)
        # The servers are the broadcaster's advertised URL (TIDINGS_ADVERTISE_URL, or its
        # listen address): the same through every front process, and no Host header
        # of the request is echoed.
        return Response(_encode(asyncapi_document(broker, caller, broker.membership.url)),
                        media_type="application/json")

    return Route("/asyncapi.json", serve, methods=["GET"])
