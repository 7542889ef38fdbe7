"""The CloudEvents webhook handshake (CloudEvents Web Hooks §4, abuse protection): a
subscription in CloudEvents mode that asks for it (``tidings:subscription:cloudevents:
handshake``) is registered, or moved to a new endpoint, only once the endpoint has
allowed this broadcaster's origin (docs/cloudevents.md). The call goes through the
outbound policy like every call to a principal's URL."""

from __future__ import annotations

from typing import Final

from ...core.cloudevents_push import ORIGIN_HEADER, handshake_refusal
from ...outbound import Outbound

__all__ = ["Handshake"]

_ANSWER_MAX: Final = 4096


class Handshake:
    def __init__(self, outbound: Outbound, origin: str, *, timeout_s: float) -> None:
        self._outbound = outbound
        self.origin = origin
        """What tidings says it is (the advertised URL's host)."""
        self._timeout_s = timeout_s

    async def refusal(self, endpoint: str) -> str | None:
        """Why ``endpoint`` may not be pushed CloudEvents from here, or None."""
        got = await self._outbound.request(
            "OPTIONS", endpoint, b"", {ORIGIN_HEADER: self.origin}, timeout_s=self._timeout_s, max_bytes=_ANSWER_MAX
        )
        allowed = got.headers.get("WebHook-Allowed-Origin") if got.headers is not None else None
        return handshake_refusal(got.status, got.code, allowed, self.origin)
