"""A network reached through a service speaking the DLT Adapter API (REFERENCE §4).

Config: ``kind = "dlt"``, ``url`` (the adapter's base URL), optional ``timeout`` (s,
default 10), ``health_interval`` (s, default 2) and ``health_path`` (default ``/health``).

Following: subscribe to every event type (``"*"``) with a push endpoint on the
distributor, then read ``GET /api/v1/events`` to catch up with what was published while
the distributor was not subscribed. The adapter then probes the network every
``health_interval``; once it stops answering, ``follow`` raises and is started again
(subscribing and catching up anew) when the network is back. The catch-up may repeat
events: the published sets make repeats harmless.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...core.addresses import unreachable
from ...core.interchain import DltPublish, DltSubscribe, NetworkNotification
from ...core.undecodable import UNDECODABLE
from ..errors import NetworkUnavailable
from ._base import FOLLOW_WAIT_S, Deliver, Network

__all__ = ["DltNetwork"]

log = logging.getLogger("tidings.interchain.dlt")

_decode_one = msgspec.json.Decoder(NetworkNotification).decode
_decode_many = msgspec.json.Decoder(list[NetworkNotification]).decode
_encode = msgspec.json.Encoder().encode


class DltNetwork(Network):
    kind = "dlt"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.url = str(self.param("url")).rstrip("/")
        self.timeout = float(self.param("timeout", 10.0, (int, float)))
        self.health_interval = float(self.param("health_interval", 2.0, (int, float)))
        self.health_path = str(self.param("health_path", "/health"))
        self._http: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
            total=self.timeout, sock_connect=min(self.timeout, self.context.connect_timeout_s)))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            raise RuntimeError(f"network {self.name!r} used before open()")
        return self._http

    async def _call(self, method: str, path: str, body: bytes | None = None) -> bytes:
        try:
            async with self._session().request(
                method, self.url + path, data=body, headers={"content-type": "application/json"}
            ) as resp:
                raw = await resp.read()
                if resp.status >= 300:
                    raise NetworkUnavailable(
                        f"{self.name}: {method} {path} answered {resp.status}: {raw[:200]!r}",
                        code="network_refused" if 400 <= resp.status < 500 else None,
                    )
                return raw
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
            why = "no answer in time" if isinstance(e, aiohttp.ConnectionTimeoutError) else str(e.os_error)
            raise NetworkUnavailable(f"{self.name}: {method} {path}: " + unreachable(
                "the DLT adapter", self.url, min(self.timeout, self.context.connect_timeout_s), why)) from e
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise NetworkUnavailable(f"{self.name}: {method} {path}: {e!r}") from e

    async def publish(self, event: DltPublish) -> None:
        await self._call("POST", "/api/v1/publishEvent", _encode(event))

    async def events(self) -> list[NetworkNotification]:
        found = _decode_many(await self._call("GET", "/api/v1/events"))
        for n in found:
            n.network = n.network or self.name
        return found

    async def follow(self, deliver: Deliver) -> None:
        sub = DltSubscribe(eventTypes=["*"], notificationEndpoint=self.context.public_url + self.push_path)
        self._following(deliver)  # before subscribing: the first push may come at once
        try:
            await self._call("POST", "/api/v1/subscribe", _encode(sub))
            found = await self.events()
            for lo in range(0, len(found), 500):
                await deliver(found[lo:lo + 500])
            while True:
                await asyncio.sleep(self.health_interval)
                await self._call("GET", self.health_path)
        finally:
            self._following(None)

    def routes(self) -> list[Any]:
        return [Route(self.push_path, self._push, methods=["POST"])]

    async def _push(self, request: Request) -> Response:
        deliver = await self._deliverer(min(FOLLOW_WAIT_S, self.timeout))
        if deliver is None:  # still not followed: the network retries, the catch-up reads it anyway
            return Response(b'{"error":{"code":"unavailable","message":"not following yet"}}', 503,
                            media_type="application/json")
        try:
            n = _decode_one(await request.body())
        except UNDECODABLE as e:
            return Response(_encode({"error": {"code": "invalid_argument", "message": str(e)}}), 400,
                            media_type="application/json")
        n.network = n.network or self.name
        await deliver([n])
        return Response(status_code=200)
