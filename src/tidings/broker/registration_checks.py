"""What registrations are checked against before they reach the registry: config values,
endpoints, reserved namespaces, per-principal limits (the orchestrator's item errors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import ens, values, wire_stream
from ..core.wire import GenericError, ItemResult, err
from ..outbound import url_syntax_problem

__all__ = ["SYSTEM_REFUSAL", "check_values", "endpoint_error", "limit_reached"]


def check_values(pairs: Sequence[Sequence[Any]]) -> str | None:
    for key, value in pairs:
        if value is None:
            continue
        try:
            values.check(value, f"$.config.{key}")
        except values.InvalidValue as e:
            return str(e)
    return None


def endpoint_error(endpoint: str | None, principal: str) -> str | None:
    if not endpoint:
        return "a subscription needs an endpoint: the http(s) URL notifications are POSTed to"
    if endpoint.startswith(ens.ENTITY_PREFIX):  # an XMPP subscriber's own address (docs/xmpp.md)
        return ens.endpoint_error(endpoint, principal)
    if endpoint.startswith(wire_stream.STREAM_PREFIX):  # pushed over a stream connection (docs/streaming.md)
        return wire_stream.endpoint_error(endpoint)
    return url_syntax_problem(endpoint, "endpoint")


SYSTEM_REFUSAL = (
    "{!r} is a reserved control-plane namespace (icrc72:broadcaster:sys:..., docs/scaling.md): the service's own"
)


def limit_reached(what: str, n: int, setting: str) -> ItemResult:
    return err("GenericError", GenericError(
        429, f"limit reached: a principal holds at most {n} {what} ({setting}); delete some first"
    ))
