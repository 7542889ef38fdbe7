"""Publisher authorisation of subscriptions (XEP-0021 §4.3-4.4).

When a publication's config names ``tidings:publication:authorization:url``, every
subscription request to exactly its namespace is first sent there as
``POST {"namespace", "subscriber", "authInfo", "endpoint"}``. The publisher answers:

* 2xx: approved; the subscription is registered;
* any other status with a body marked ``x-tidings-authorization: response``: denied; the
  subscriber gets that status and body (UTF-8, at most 1 KiB) untouched, as
  ``GenericError {error_code: <status>, message: <body>}``;
* any other status without such a body: denied without a reason, ``error_code`` 503
  (an unmarked body is never passed on: docs/security.md);
* no answer within ``tidings:publication:authorization:timeoutMs`` (or no connection):
  ``error_code`` 504.

Requests waiting for an answer are listed by ``tidings_get_pending_authorizations``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ...core.config import PublicationConfig
from ...core.wire import GenericError, ItemResult, PendingAuthorization, err
from ...outbound import Outbound

__all__ = ["Authorizer", "RemoteAuthorizer"]

_encode = msgspec.json.Encoder().encode
_REASON_MAX = 1024

RemoteAuthorizer = Callable[[PublicationConfig, str, str, Any, "str | None"], Awaitable["ItemResult | None"]]
"""Asks a publisher over another protocol: None when it approves, else the item's error."""


class Authorizer:
    def __init__(self, outbound: Outbound, now_ns: Callable[[], int] = time.time_ns) -> None:
        self._outbound = outbound
        self._now_ns = now_ns
        """The cluster's clock (``Broker.clock``): what a request's ``since`` is read by."""
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
        self._pending[key] = PendingAuthorization(namespace=namespace, subscriber=subscriber, since=self._now_ns())
        scheme, colon, _ = conf.authorization_url.partition(":")
        remote = self.remote.get(scheme) if colon else None
        if remote is not None:
            try:
                return await remote(conf, namespace, subscriber, auth_info, endpoint)
            finally:
                self._pending.pop(key, None)
        body = _encode({"namespace": namespace, "subscriber": subscriber, "authInfo": auth_info, "endpoint": endpoint})
        try:
            got = await self._outbound.post(
                conf.authorization_url, body,
                {"content-type": "application/json", "x-tidings-authorization": "request"},
                timeout_s=conf.authorization_timeout_s, max_bytes=_REASON_MAX,
            )
        finally:
            self._pending.pop(key, None)
        if got.status is None:
            return err("GenericError", GenericError(
                504, f"the publisher of {namespace!r} did not answer the authorisation request in time ({got.code})"
            ))
        if 200 <= got.status < 300:
            return None
        reason = _reason(got.body, got.headers)
        if reason is None:
            return err("GenericError", GenericError(
                503, f"the publisher of {namespace!r} denied the subscription without a reason ({got.code})"
            ))
        return err("GenericError", GenericError(got.status, reason))


def _reason(body: bytes, headers: object) -> str | None:
    """The publisher's reason, passed on only when the answer says it is one.

    XEP-0021 §3.2 passes a publisher's denial to the subscriber untouched; an HTTP body
    could be anything the URL's server says, though (an internal page), so only a body
    marked ``x-tidings-authorization: response`` by a publisher that speaks this protocol
    is passed on, as UTF-8 text of at most ``_REASON_MAX`` bytes."""
    marked = getattr(headers, "get", lambda _k: None)("x-tidings-authorization")
    if marked != "response" or not body.strip():
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None
