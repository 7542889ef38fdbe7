"""What registrations are checked against before they reach the registry: config values,
endpoints, reserved namespaces, per-principal limits (the orchestrator's item errors)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...core import config as cfg
from ...core import ens, values, wire_stream
from ...core.replay import read_pricing
from ...core.wire import GenericError, ItemResult, err
from ...outbound import url_syntax_problem

__all__ = ["SYSTEM_REFUSAL", "check_values", "config_problem", "endpoint_error", "limit_reached", "url_problem"]


def config_problem(config: list[Any], schema_problem: Callable[[int | str], str | None] | None) -> str | None:
    """Why a publication's ``config`` is refused; its bound schema is judged by
    ``schema_problem`` when given (only a change that binds a schema is judged)."""
    try:
        conf = cfg.PublicationConfig.read(config)
        read_pricing(config)  # icrc77:pricing (docs/replay.md)
    except cfg.ImproperConfig as e:
        return str(e)
    if conf.schema is not None and schema_problem is not None:
        problem = schema_problem(conf.schema)
        if problem:
            return f"{cfg.SCHEMA}: {problem}"
    return None


async def url_problem(
    check: Callable[[str, str], Awaitable[str | None]] | None, url: str | None, what: str
) -> str | None:
    """The outbound policy's objection to an http(s) ``url`` given at registration."""
    if url is None or check is None or not url.startswith(("http://", "https://")):
        return None
    return await check(url, what)


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
