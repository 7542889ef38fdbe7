"""A distributor stops when asked, even when a library it waits in turns the cancellation
into an error of its own.

A client library that is cancelled while it reads may close its connection and raise
its own error (a ConnectionError, a TimeoutError) instead of the CancelledError. The
outbox and follower loops catch errors to retry; without a check of the task's pending
cancel they went on forever, and ``Distributor.run`` never returned once cancelled (CI
met it as a test that hung for its 600 s: the outbox task "cancelling", back at its
wait)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from tidings.core.interchain import DltPublish
from tidings.interchain import Distributor, NetworkContext
from tidings.interchain.adapters import RedisStreamNetwork
from tidings.interchain.state import SQLiteState

from .conftest import eventually
from .interchain_support import event


class _Swallow:
    """Blocks at one place, and turns the first cancellation that lands there into a
    ConnectionError, as a client closing its connection might (only the first: a test
    that fails still ends)."""

    def __init__(self, returns: bool = False) -> None:
        self.entered = asyncio.Event()
        self.swallowed = False
        self._returns = returns
        """Return as if done instead of raising (a library that hides the cancel whole)."""

    async def block(self) -> None:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed = True
            if self._returns:
                return
            raise ConnectionError("connection closed while reading") from None


class _State(SQLiteState):
    def __init__(self, path: Path, where: str, swallow: _Swallow) -> None:
        super().__init__(path)
        self._where, self._swallow = where, swallow

    async def peek(self, outbox: str, n: int) -> list[bytes]:
        if self._where == "peek" and outbox == "net:B":
            await self._swallow.block()
        return await super().peek(outbox, n)

    async def pop(self, outbox: str, sent: Sequence[bytes], *, record: str | None = None,
                  gids: Sequence[str] = ()) -> int:
        if self._where == "pop":
            await self._swallow.block()
        return await super().pop(outbox, sent, record=record, gids=gids)


class _Network(RedisStreamNetwork):
    def __init__(self, *args: Any, where: str, swallow: _Swallow) -> None:
        super().__init__(*args)
        self._where, self._swallow = where, swallow

    async def publish_many(self, bodies: list[DltPublish]) -> int:
        if self._where == "send":
            await self._swallow.block()
        return await super().publish_many(bodies)

    async def follow(self, on_events: Any) -> None:
        if self._where == "follow" and self.name == "B":
            await self._swallow.block()
            return  # as a follow that ended
        await super().follow(on_events)


@pytest.mark.parametrize("returns", [False, True], ids=["raises", "returns"])
@pytest.mark.parametrize("where", ["peek", "pop", "send", "follow"])
async def test_a_cancel_turned_into_an_error_still_stops_the_distributor(tmp_path: Path, where: str,
                                                                        returns: bool) -> None:
    swallow = _Swallow(returns)
    state = _State(tmp_path / "state.db", where, swallow)
    await state.open()
    stream = f"test:cancel:{uuid.uuid4().hex[:8]}"
    ctx = NetworkContext(public_url="http://127.0.0.1:1", state=state)
    nets = [_Network(n, {"stream": f"{stream}:{n}"}, ctx, where=where, swallow=swallow) for n in ("A", "B")]
    for n in nets:
        await n.open()
    d = Distributor(nets, state)
    run = asyncio.create_task(d.run(follow=where == "follow"))
    try:
        if where in ("pop", "send"):
            await d.publish(msgspec.convert(event("x"), DltPublish))
        await eventually(swallow.entered.is_set, timeout=10)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(run), 10)  # without the check: never
        assert swallow.swallowed
        assert run.done(), "the distributor went on after it was cancelled"
    finally:
        if not run.done():
            run.cancel()
        for n in nets:
            await n.close()
        await state.close()
        shared = aioredis.Redis()
        await shared.delete(f"{stream}:A", f"{stream}:B")
        await shared.aclose()
