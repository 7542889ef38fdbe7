"""What the faults are measured against: publishers that record every event answered Ok,
and one subscriber endpoint that records every push, per subscription, with what a
partition or a pause could break: two pushes of one subscription at once, and a push
under a lease epoch older than one already seen."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

__all__ = ["Attempt", "Publishers", "Recorder"]


class Recorder:
    """The subscriber endpoint of every subscription."""

    def __init__(self, handler_delay_s: float = 0.002) -> None:
        self.got: dict[int, list[tuple[str, int]]] = defaultdict(list)
        self.first_at: dict[tuple[int, str, int], float] = {}
        self.inflight: dict[int, int] = defaultdict(int)
        self.overlaps = 0
        """Pushes that arrived while another push of the same subscription was in flight."""
        self.max_epoch: dict[int, int] = {}
        self.stale = 0
        """Pushes under a lease epoch lower than one already seen for the subscription."""
        self.pushes = 0
        self._delay = handler_delay_s
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/", self._push)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{self.port}/"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _push(self, request: web.Request) -> web.Response:
        sub = int(request.headers["x-tidings-subscription"])
        epoch = int(request.headers.get("x-tidings-lease-epoch", "0"))
        self.pushes += 1
        if self.inflight[sub]:
            self.overlaps += 1
        self.inflight[sub] += 1
        try:
            if epoch < self.max_epoch.get(sub, 0):
                self.stale += 1
            self.max_epoch[sub] = max(epoch, self.max_epoch.get(sub, 0))
            body = await request.read()
            now = time.monotonic()
            for n in json.loads(body):
                key = (n["namespace"], n["eventId"])
                self.got[sub].append(key)
                self.first_at.setdefault((sub, *key), now)
            if self._delay:
                await asyncio.sleep(self._delay)
        finally:
            self.inflight[sub] -= 1
        return web.Response(status=200)


@dataclass
class Attempt:
    member: str
    start: float
    end: float
    status: int | None
    """HTTP status, or None for no answer (a timeout, a refused connection)."""
    acked: list[tuple[str, int]] = field(default_factory=list)


class Publishers:
    """``per_member`` publishers on each member, each publishing one event per request,
    round-robin over the namespaces, until stopped."""

    def __init__(self, members: list[Any], namespaces: list[str], *, per_member: int = 2,
                 timeout_s: float = 10.0, pace_s: float = 0.02) -> None:
        self.members = members
        self.namespaces = namespaces
        self.per_member = per_member
        self.timeout_s = timeout_s
        self.pace_s = pace_s
        self.attempts: list[Attempt] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.statuses: dict[int | None, int] = defaultdict(int)
        self.no_retry_after = 0
        """503 answers without a Retry-After header."""

    def start(self) -> None:
        for m in self.members:
            for j in range(self.per_member):
                self._tasks.append(asyncio.create_task(self._run(m, j)))

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def acked(self) -> set[tuple[str, int]]:
        return {k for a in self.attempts for k in a.acked}

    async def _run(self, member: Any, j: int) -> None:
        k = j
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while not self._stop.is_set():
                if member.proc is None:  # killed: nobody to ask until it is back
                    await asyncio.sleep(0.1)
                    continue
                ns = self.namespaces[k % len(self.namespaces)]
                k += 1
                start = time.monotonic()
                attempt = Attempt(member.name, start, start, None)
                with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError, ValueError):
                    async with http.post(
                        f"{member.url}/v1/icrc72_publish", json=[{"namespace": ns, "data": {"Nat": k}}],
                        headers={"authorization": f"Bearer {member.token}"},
                    ) as r:
                        attempt.status = r.status
                        if r.status == 503 and "retry-after" not in r.headers:
                            self.no_retry_after += 1
                        if r.status == 200:
                            (item,) = await r.json()
                            if item and "Ok" in item:
                                attempt.acked = [(ns, i) for i in item["Ok"]]
                attempt.end = time.monotonic()
                self.statuses[attempt.status] += 1
                self.attempts.append(attempt)
                await asyncio.sleep(self.pace_s)

    def longest_gap(self, start: float, end: float, members: set[str]) -> float:
        """The longest time within ``[start, end]`` in which no publish through one of
        ``members`` was answered Ok (the window's edges count as answers)."""
        oks = sorted(a.end for a in self.attempts if a.member in members and a.acked and start <= a.end <= end)
        marks = [start, *oks, end]
        return max(b - a for a, b in itertools.pairwise(marks))
