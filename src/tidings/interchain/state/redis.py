"""The distributor's state in Redis: sets, lists, hashes under one key prefix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InterchainError
from ._base import Mark, State

__all__ = ["RedisState"]

# SADD, and RPUSH only when SADD added: one atomic step, so of two deliveries of the
# same id exactly one enqueues (the check-then-mark of the reference implementation
# lets both through).
_MARK = """
local added = redis.call('SADD', KEYS[1], ARGV[1])
if added == 1 and #KEYS > 1 then redis.call('RPUSH', KEYS[2], ARGV[2]) end
return added
"""


class RedisState(State):
    """``url`` a redis:// URL; every key starts with ``prefix`` (several distributors or
    tests can share one Redis). Keys: ``<prefix>publishedEvents:<network>`` and
    ``<prefix>notifiedEvents:<sub>`` (sets), ``<prefix>outbox:<target>`` (lists),
    ``<prefix>subscriptions`` and ``<prefix>cursors`` (hashes). The mark script touches
    two keys, so on Redis Cluster give the prefix a hash tag (``{ied}:``)."""

    def __init__(self, url: str, prefix: str = "tidings:ied:") -> None:
        self.url = url
        self.prefix = prefix
        self._r: Any = None
        self._sha = ""

    async def open(self) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as e:  # pragma: no cover - depends on the install
            raise InterchainError("the Redis state needs the 'interchain' extra (pip install 'tidings[interchain]')",
                                  code="missing_dependency") from e
        # Many deliveries at once wait for a connection instead of failing for want of one.
        pool = aioredis.BlockingConnectionPool.from_url(self.url, max_connections=64, timeout=30)
        self._r = aioredis.Redis(connection_pool=pool)
        self._sha = await self._r.script_load(_MARK)

    async def close(self) -> None:
        if self._r is not None:
            await self._r.aclose(close_connection_pool=True)
            self._r = None

    def key(self, name: str) -> str:
        return self.prefix + name

    async def mark(self, marks: Sequence[Mark]) -> list[bool]:
        from redis.exceptions import NoScriptError

        try:
            return await self._mark(marks)
        except NoScriptError:  # Redis restarted or flushed its scripts: load it again
            self._sha = await self._r.script_load(_MARK)
            return await self._mark(marks)

    async def _mark(self, marks: Sequence[Mark]) -> list[bool]:
        # The script is loaded once in open(): a pipeline that loads scripts itself takes
        # a second connection from the pool, and many at once would starve it.
        pipe = self._r.pipeline(transaction=False)
        for m in marks:
            if m.outbox is None:
                pipe.sadd(self.key(m.set_name), m.gid)
            else:
                pipe.evalsha(self._sha, 2, self.key(m.set_name), self.key("outbox:" + m.outbox), m.gid, m.payload)
        return [int(x) == 1 for x in await pipe.execute()]

    async def members(self, set_name: str) -> set[str]:
        return {m.decode() for m in await self._r.smembers(self.key(set_name))}

    async def peek(self, outbox: str, n: int) -> list[bytes]:
        return list(await self._r.lrange(self.key("outbox:" + outbox), 0, n - 1))

    async def pop(self, outbox: str, n: int) -> None:
        await self._r.ltrim(self.key("outbox:" + outbox), n, -1)

    async def outbox_size(self, outbox: str) -> int:
        return int(await self._r.llen(self.key("outbox:" + outbox)))

    async def save_subscription(self, sub_id: str, body: bytes) -> bool:
        return bool(await self._r.hsetnx(self.key("subscriptions"), sub_id, body))

    async def subscriptions(self) -> list[tuple[str, bytes]]:
        got = await self._r.hgetall(self.key("subscriptions"))
        return sorted((k.decode(), v) for k, v in got.items())

    async def get_cursor(self, name: str) -> str | None:
        v = await self._r.hget(self.key("cursors"), name)
        return None if v is None else v.decode()

    async def set_cursor(self, name: str, value: str) -> None:
        await self._r.hset(self.key("cursors"), name, value)
