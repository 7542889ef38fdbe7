"""The flow of one replay: one read ahead of the batch being recorded and pushed, and
at most one push in flight (:mod:`.replay`)."""

from __future__ import annotations

import asyncio

from ..store import StoredEvent
from .delivery import Delivery
from .replay_source import ReplaySource

__all__ = ["InFlight", "ReadAhead"]


class ReadAhead:
    """At most one read of a replay's range ahead of the batch being recorded and pushed."""

    def __init__(self, source: ReplaySource, namespace: str, before_id: int) -> None:
        self._source = source
        self._ns = namespace
        self._before = before_id
        self._next: tuple[int, str | None, asyncio.Task[tuple[list[StoredEvent], int]]] | None = None

    def start(self, after_id: int, filter_text: str | None) -> None:
        self.cancel()
        task = asyncio.create_task(self._source.read(self._ns, after_id, self._before, filter_text))
        self._next = (after_id, filter_text, task)

    async def read(self, after_id: int, filter_text: str | None) -> tuple[list[StoredEvent], int]:
        """The read that was started for this position and filter, or a new one."""
        nxt, self._next = self._next, None
        if nxt is not None and nxt[0] == after_id and nxt[1] == filter_text:
            return await nxt[2]
        if nxt is not None:
            self._next = nxt
            self.cancel()
        return await self._source.read(self._ns, after_id, self._before, filter_text)

    def cancel(self) -> None:
        if self._next is not None:
            task = self._next[2]
            self._next = None
            if task.done():
                if not task.cancelled():
                    task.exception()  # retrieved: the read is not wanted any more
            else:
                task.cancel()


class InFlight:
    """At most one push of a replay in flight: the next batch is read and recorded
    meanwhile, and batches still arrive in order."""

    def __init__(self, delivery: Delivery, sub_id: int) -> None:
        self._delivery = delivery
        self._sub_id = sub_id
        self._task: asyncio.Task[bool] | None = None

    async def send(self, notes: list[tuple[int, StoredEvent]], created_at: int) -> bool:
        """Start pushing ``notes`` once the previous push is done; False if that one found
        the subscription gone."""
        if not await self.wait():
            return False
        self._task = asyncio.create_task(self._delivery.push(self._sub_id, notes, created_at))
        return True

    async def wait(self) -> bool:
        task, self._task = self._task, None
        return True if task is None else await task

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
