"""The distributor's state in Redis: sets, lists, hashes under one key prefix."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import msgspec

from ...core.addresses import DEFAULT_CONNECT_TIMEOUT_S, redact_address, unreachable
from ..errors import InterchainError
from ._base import Mark, State

__all__ = ["RedisState"]

_pack = msgspec.msgpack.Encoder().encode

# SADD, and RPUSH only when SADD added: one atomic step, so of two deliveries of the
# same id exactly one enqueues (the check-then-mark of the reference implementation
# lets both through). A whole batch is one call: KEYS are the batch's distinct sets and
# outboxes, ARGV[2..] its distinct payloads, ARGV[1] the marks as one MessagePack array
# of four columns: set index, outbox index (0: none), gid, payload index (Redis'
# cmsgpack reads no binary type, hence payloads beside it). Per set, one SMISMEMBER says
# which ids are new (the first of repeats within the batch counts) and one SADD adds
# them all; per outbox one RPUSH, in the marks' order. The answer is one string, '1'
# (added) or '0' per mark. One command per batch instead of one per mark: redis-py's
# packing and parsing of each command was most of the cost, then Lua's per-call
# overhead (docs/benchmarks/history/2026-11-25-distributor-dedup.md).
_MARK = """
local cols = cmsgpack.unpack(ARGV[1])
local sets, outs, gids, pays = cols[1], cols[2], cols[3], cols[4]
local n = #gids
local groups, order = {}, {}
for i = 1, n do
  local g = groups[sets[i]]
  if g == nil then g = {}; groups[sets[i]] = g; order[#order + 1] = sets[i] end
  g[#g + 1] = i
end
local added = {}
for _, s in ipairs(order) do
  local idx = groups[s]
  local members = {}
  for j = 1, #idx do members[j] = gids[idx[j]] end
  local present = redis.call('SMISMEMBER', KEYS[s], unpack(members))
  local seen = {}
  for j = 1, #idx do
    local gid = members[j]
    if present[j] == 0 and not seen[gid] then added[idx[j]] = true end
    seen[gid] = true
  end
  redis.call('SADD', KEYS[s], unpack(members))
end
local out, pushes, porder = {}, {}, {}
for i = 1, n do
  if added[i] then
    out[i] = '1'
    local o = outs[i]
    if o > 0 then
      local p = pushes[o]
      if p == nil then p = {}; pushes[o] = p; porder[#porder + 1] = o end
      p[#p + 1] = ARGV[pays[i]]
    end
  else
    out[i] = '0'
  end
end
for _, o in ipairs(porder) do redis.call('RPUSH', KEYS[o], unpack(pushes[o])) end
return table.concat(out)
"""
_COMMAND_TIMEOUT_S = 30.0
"""A command with no answer for this long fails (the state is then "away" and every
outbox waits, told once): a Redis that stopped or a network that drops packets without
a reset would otherwise hold a read, and the outbox with it, forever."""
_CHUNK = 2000
"""Marks per script call: a call blocks Redis while it runs, so very large batches are
split (each mark stays atomic; the calls of one batch share one round trip)."""

# Compare-and-pop: remove the leading items that are the ones sent (ARGV[2..k+1]), and
# record their ids (ARGV[k+2..]) in the delivered set, in one step.
_POP = """
local k = tonumber(ARGV[1])
local head = redis.call('LRANGE', KEYS[1], 0, k - 1)
local n = 0
for i = 1, #head do
  if head[i] ~= ARGV[1 + i] then break end
  n = i
end
if n > 0 then
  redis.call('LTRIM', KEYS[1], n, -1)
  if #KEYS > 1 then
    for i = 1, n do
      local gid = ARGV[1 + k + i]
      if gid then redis.call('SADD', KEYS[2], gid) end
    end
  end
end
return n
"""


class RedisState(State):
    """``url`` a redis:// URL; every key starts with ``prefix`` (several distributors or
    tests can share one Redis). Keys: ``<prefix>publishedEvents:<network>`` and
    ``<prefix>notifiedEvents:<sub>`` (sets), ``<prefix>outbox:<target>`` (lists),
    ``<prefix>subscriptions`` and ``<prefix>cursors`` (hashes). The mark script touches
    two keys, so on Redis Cluster give the prefix a hash tag (``{ied}:``)."""

    def __init__(self, url: str, prefix: str = "tidings:ied:", *,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 command_timeout_s: float = _COMMAND_TIMEOUT_S) -> None:
        self.url = url
        self.prefix = prefix
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self._r: Any = None
        self._sha = ""
        self._pop_sha = ""

    async def open(self) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as e:  # pragma: no cover - depends on the install
            raise InterchainError("the Redis state needs the 'interchain' extra (pip install 'tidings[interchain]')",
                                  code="missing_dependency") from e
        import redis.exceptions

        # Many deliveries at once wait for a connection instead of failing for want of one.
        pool = aioredis.BlockingConnectionPool.from_url(self.url, max_connections=64, timeout=30,
                                                        socket_connect_timeout=self.connect_timeout_s,
                                                        socket_timeout=self.command_timeout_s)
        self._r = aioredis.Redis(connection_pool=pool)
        wait = self.connect_timeout_s
        try:
            async with asyncio.timeout(wait):  # a server that takes the connection and is silent
                await self._load()
        except redis.exceptions.AuthenticationError as e:
            await self.close()
            raise InterchainError(f"Redis at {redact_address(self.url)} (the distributor's state) refused "
                                  f"the credentials: {e}", code="state_refused") from None
        except (TimeoutError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
            await self.close()
            why = "no answer in time" if isinstance(e, TimeoutError) and not str(e) else str(e)
            raise InterchainError(unreachable("Redis (the distributor's state)", self.url, wait, why),
                                  code="state_unreachable") from None

    async def _load(self) -> None:
        self._sha = await self._r.script_load(_MARK)
        self._pop_sha = await self._r.script_load(_POP)

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
            await self._load()
            return await self._mark(marks)

    async def _mark(self, marks: Sequence[Mark]) -> list[bool]:
        # The script is loaded once in open(): a pipeline that loads scripts itself takes
        # a second connection from the pool, and many at once would starve it.
        if not marks:
            return []
        pipe = self._r.pipeline(transaction=False)
        for lo in range(0, len(marks), _CHUNK):
            keys: dict[str, int] = {}
            payloads: dict[bytes, int] = {}
            sets: list[int] = []
            outs: list[int] = []
            gids: list[str] = []
            pays: list[int] = []
            for m in marks[lo:lo + _CHUNK]:
                sets.append(keys.setdefault(m.set_name, len(keys) + 1))
                gids.append(m.gid)
                if m.outbox is None:
                    outs.append(0)
                    pays.append(0)
                else:
                    outs.append(keys.setdefault("outbox:" + m.outbox, len(keys) + 1))
                    pays.append(payloads.setdefault(m.payload, len(payloads) + 2))
            pipe.evalsha(self._sha, len(keys), *map(self.key, keys), _pack((sets, outs, gids, pays)), *payloads)
        out: list[bool] = []
        for answer in await pipe.execute():
            out += [c == 49 for c in answer]  # b"1"
        return out

    async def members(self, set_name: str) -> set[str]:
        return {m.decode() for m in await self._r.smembers(self.key(set_name))}

    async def peek(self, outbox: str, n: int) -> list[bytes]:
        return list(await self._r.lrange(self.key("outbox:" + outbox), 0, n - 1))

    async def pop(self, outbox: str, sent: Sequence[bytes], *, record: str | None = None,
                  gids: Sequence[str] = ()) -> int:
        from redis.exceptions import NoScriptError

        keys = [self.key("outbox:" + outbox)] + ([self.key(record)] if record is not None else [])
        args = [len(sent), *sent, *gids]
        try:
            return int(await self._r.evalsha(self._pop_sha, len(keys), *keys, *args))
        except NoScriptError:
            await self._load()
            return int(await self._r.evalsha(self._pop_sha, len(keys), *keys, *args))

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
