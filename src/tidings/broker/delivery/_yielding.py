"""Live work first: replays and redrives of dead letters yield to live pushes.

A replay of 200,000 events, or a redrive of as many dead letters, is work nobody is
waiting on event by event; a live notification is. Both share this process's event loop
(and its interpreter lock with the store's threads), so a replay sent at full speed put
every other subscription's live pushes behind its batches (issue 39: live p99 13 times
its value without a replay). :class:`LiveFirst` is the policy (docs/replay.md,
"Live work first"):

* **priority**: before each of its batches, a replay (or a redrive) waits while live
  work is under way: events routed or woken for a subscription's worker that has not
  gone idle since (its push built, sent and answered). It waits at most
  ``replay_yield_ms`` per batch, so a steady live load slows a replay but never stops
  it; 0 turns the wait off;
* **rate**: with ``replay_max_rate`` > 0, the replays and redrives of this process
  together send at most that many notifications a second (a pacer: each batch is given
  its share of time after the last); 0 is no cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

__all__ = ["LiveFirst"]


class LiveFirst:
    def __init__(
        self, yield_ms: float, max_rate: float, *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.yield_s = yield_ms / 1000
        self.max_rate = max_rate
        self._monotonic = monotonic
        self._sleep = sleep
        self._busy: dict[int, float] = {}
        """Subscriptions with live work under way, and since when."""
        self._changed = asyncio.Event()
        self._next_free = 0.0
        """When the pacer lets the next background batch go."""
        self.waits = 0
        """Background batches that waited for live work (for tests and metrics)."""
        self.waited_s = 0.0

    def arrived(self, sub_id: int) -> None:
        """Live events were routed to, or woke, ``sub_id``'s worker (on the live path: cheap)."""
        if self.yield_s > 0 and sub_id not in self._busy:
            self._busy[sub_id] = self._monotonic()

    def idle(self, sub_id: int) -> None:
        """``sub_id``'s worker has nothing left to do for now."""
        if self._busy.pop(sub_id, None) is not None:
            self._changed.set()

    def live_under_way(self, own: int | None = None) -> bool:
        """Whether another subscription than ``own`` has live work under way. A worker that
        ended without going idle (stopped, deleted) is forgotten after ``yield_s``."""
        if not self._busy:
            return False
        stale = self._monotonic() - self.yield_s
        for k in [k for k, t in self._busy.items() if t < stale]:
            del self._busy[k]
        return any(k != own for k in self._busy)

    async def turn(self, n: int, own: int | None = None) -> None:
        """Before a background batch of ``n`` notifications: wait while live work is under
        way (``own``: the subscription whose worker sends this batch, which cannot be
        pushing live meanwhile), at most ``yield_s``; then for the pacer."""
        if self.yield_s > 0 and self.live_under_way(own):
            start = self._monotonic()
            deadline = start + self.yield_s
            self.waits += 1
            while self.live_under_way(own) and (left := deadline - self._monotonic()) > 0:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._changed.wait()
            self.waited_s += self._monotonic() - start
        if self.max_rate > 0:
            now = self._monotonic()
            at = max(now, self._next_free)
            self._next_free = at + n / self.max_rate
            if at > now:
                await self._sleep(at - now)
