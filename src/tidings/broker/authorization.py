"""Publisher authorisation of subscriptions (XEP-0021 §4.3-4.4).

When a publication's config names ``tidings:publication:authorization:url``, every
subscription request to exactly its namespace is first sent there as
``POST {"namespace", "subscriber", "authInfo", "endpoint"}``. The publisher answers:

* 2xx: approved; the subscription is registered;
* any other status with a body: denied; the subscriber gets that status and body
  untouched, as ``GenericError {error_code: <status>, message: <body>}``;
* any other status with an empty body: denied without a reason, ``error_code`` 503;
* no answer within ``tidings:publication:authorization:timeoutMs`` (or no connection):
  ``error_code`` 504.

Requests waiting for an answer are listed by ``tidings_get_pending_authorizations``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgspec

from ..core.config import PublicationConfig
from ..core.wire import GenericError, ItemResult, PendingAuthorization, err
from .delivery import Delivery

__all__ = ["Authorizer", "RemoteAuthorizer"]

_encode = msgspec.json.Encoder().encode

RemoteAuthorizer = Callable[[PublicationConfig, str, str, Any, "str | None"], Awaitable["ItemResult | None"]]
"""Asks a publisher over another protocol: None when it approves, else the item's error."""


class Authorizer:
    def __init__(self, delivery: Delivery) -> None:
        self._delivery = delivery  # for its HTTP session
        self._pending: dict[int, PendingAuthorization] = {}
        self._ids = itertools.count(1)
        self.remote: dict[str, RemoteAuthorizer] = {}
        """Authorisers of another protocol than HTTP, by URL scheme (``xmpp``: docs/xmpp.md)."""

    def pending(self) -> list[PendingAuthorization]:
        return sorted(self._pending.values(), key=lambda p: (p.since, p.namespace, p.subscriber))

    async def authorize(
        self, conf: PublicationConfig, namespace: str, subscriber: str, auth_info: Any, endpoint: str | None
    ) -> ItemResult | None:
        """None when the publisher approves, else the item's error."""
        if conf.authorization_url is None:
            return None
        key = next(self._ids)
        self._pending[key] = PendingAuthorization(namespace=namespace, subscriber=subscriber, since=time.time_ns())
        scheme, colon, _ = conf.authorization_url.partition(":")
        remote = self.remote.get(scheme) if colon else None
        if remote is not None:
            try:
                return await remote(conf, namespace, subscriber, auth_info, endpoint)
            finally:
                self._pending.pop(key, None)
        body = _encode({"namespace": namespace, "subscriber": subscriber, "authInfo": auth_info, "endpoint": endpoint})
        try:
            async with self._delivery.session.post(
                conf.authorization_url, data=body, allow_redirects=False,
                headers={"content-type": "application/json", "x-tidings-authorization": "request"},
                timeout=aiohttp.ClientTimeout(total=conf.authorization_timeout_s),
            ) as resp:
                status, reason = resp.status, (await resp.read()).decode(errors="replace")
        except (aiohttp.ClientError, TimeoutError, OSError):
            return err("GenericError", GenericError(
                504, f"the publisher of {namespace!r} did not answer the authorisation request in time"
            ))
        finally:
            self._pending.pop(key, None)
        if 200 <= status < 300:
            return None
        if not reason.strip():
            return err("GenericError", GenericError(
                503, f"the publisher of {namespace!r} denied the subscription without a reason"
            ))
        return err("GenericError", GenericError(status, reason))
