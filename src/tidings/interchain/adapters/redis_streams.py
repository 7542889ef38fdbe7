"""A network that is a Redis stream.

Config: ``kind = "redis"``, optional ``url`` (default ``redis://127.0.0.1:6379/0``) and
``stream`` (default ``dlt:events``). Each entry has one field, ``event``: the publish
body as JSON. Reading it back, this adapter plays the DLT adapter's part: the
notification's ``id`` is the entry id, ``timestamp`` the entry's milliseconds, and
``network`` this network's name. How far the stream has been read is a cursor in the
distributor's state, so a restarted distributor goes on where it stopped.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...core.addresses import unreachable
from ...core.interchain import DltPublish, NetworkNotification, notification_of
from ...core.undecodable import UNDECODABLE
from ..errors import InterchainError, NetworkUnavailable
from ._base import Deliver, Network

__all__ = ["RedisStreamNetwork"]

_decode = msgspec.json.Decoder(DltPublish).decode
_encode = msgspec.json.Encoder().encode
_BATCH = 500


class RedisStreamNetwork(Network):
    kind = "redis"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.url = str(self.param("url", "redis://127.0.0.1:6379/0"))
        self.stream = str(self.param("stream", "dlt:events"))
        self._r: Any = None

    async def open(self) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as e:  # pragma: no cover - depends on the install
            raise InterchainError("Redis networks need the 'interchain' extra", code="missing_dependency") from e
        self._r = aioredis.Redis.from_url(self.url, socket_connect_timeout=self.context.connect_timeout_s)

    async def close(self) -> None:
        if self._r is not None:
            await self._r.aclose()

    def _unreachable(self, command: str, e: BaseException) -> str:
        return f"{self.name}: {command} {self.stream}: " + unreachable(
            "Redis", self.url, self.context.connect_timeout_s, str(e) or type(e).__name__)

    def _notification(self, entry_id: bytes, fields: dict[bytes, bytes]) -> NetworkNotification | None:
        raw = fields.get(b"event")
        if raw is None:
            return None
        try:
            body = _decode(raw)
        except UNDECODABLE:
            return None
        eid = entry_id.decode()
        return notification_of(body, id=eid, timestamp=int(eid.split("-")[0]), network=self.name)

    async def publish(self, event: DltPublish) -> None:
        import redis.exceptions

        try:
            await self._r.xadd(self.stream, {"event": _encode(event)})
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
            raise NetworkUnavailable(self._unreachable("XADD", e)) from e

    async def publish_many(self, events: list[DltPublish]) -> int:
        """One pipelined round trip of XADDs (applied in order, all or, on a lost
        connection, an unknown prefix: then the whole batch is tried again)."""
        import redis.exceptions

        pipe = self._r.pipeline(transaction=False)
        for e in events:
            pipe.xadd(self.stream, {"event": _encode(e)})
        try:
            await pipe.execute()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
            raise NetworkUnavailable(self._unreachable("XADD", e)) from e
        return len(events)

    async def follow(self, deliver: Deliver) -> None:
        import redis.exceptions

        cursor_key = f"redis:{self.name}"
        cursor = await self.context.state.get_cursor(cursor_key) or "0"
        while True:
            try:
                got = await self._r.xread({self.stream: cursor}, count=_BATCH, block=1000)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
                raise NetworkUnavailable(self._unreachable("XREAD", e)) from e
            for _stream, entries in got or ():
                found = [n for n in (self._notification(i, f) for i, f in entries) if n is not None]
                if found:
                    await deliver(found)
                cursor = entries[-1][0].decode()
                await self.context.state.set_cursor(cursor_key, cursor)

    async def events(self) -> list[NetworkNotification]:
        out: list[NetworkNotification] = []
        start = "-"
        while True:
            entries = await self._r.xrange(self.stream, min=start, count=_BATCH)
            for entry_id, fields in entries:
                n = self._notification(entry_id, fields)
                if n is not None:
                    out.append(n)
            if len(entries) < _BATCH:
                return out
            start = "(" + entries[-1][0].decode()
