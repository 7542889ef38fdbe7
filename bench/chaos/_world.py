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
    round-robin over the namespaces, until stopped.

    Each event is a logical event with an idempotency key of its own (its data is the key
    too, so the log shows which it is): one whose outcome is unknown (no answer, 503, an
    item that may have been stored, ``Busy``) is sent again with the same key, through the
    next member that is up, until it is answered (docs/semantics.md, "Exactly once").
    ``ids`` records what each logical event was answered with."""

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
        self.ids: dict[str, tuple[str, list[int]]] = {}
        """Logical event (its key) -> (namespace, the ids it was answered Ok with, each try)."""
        self.repeats = 0
        """Answers ``repeat``: a retry recognised as an event stored before."""

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
        others = [m for m in self.members if m is not member]
        async with aiohttp.ClientSession(timeout=timeout) as http:
            pending: tuple[str, str] | None = None  # (namespace, key) of an event not settled
            tries = 0
            while not self._stop.is_set():
                # A retry goes through the next member up: a key holds across the cluster.
                via = [member, *others][tries % len(self.members)] if pending is not None else member
                if via.proc is None:  # killed: nobody to ask until it is back
                    tries += 1
                    await asyncio.sleep(0.1)
                    continue
                if pending is None:
                    ns = self.namespaces[k % len(self.namespaces)]
                    k += 1
                    pending = (ns, f"{member.name}-{j}-{k}")
                    self.ids[pending[1]] = (ns, [])
                    tries = 0
                ns, key = pending
                start = time.monotonic()
                attempt = Attempt(via.name, start, start, None)
                settled = False
                with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError, ValueError):
                    async with http.post(
                        f"{via.url}/v1/icrc72_publish",
                        json=[{"namespace": ns, "data": {"Text": key}, "idempotencyKey": key}],
                        headers={"authorization": f"Bearer {via.token}"},
                    ) as r:
                        attempt.status = r.status
                        if r.status == 503 and "retry-after" not in r.headers:
                            self.no_retry_after += 1
                        if r.status == 200:
                            (item,) = await r.json()
                            if item and "Ok" in item:
                                attempt.acked = [(ns, i) for i in item["Ok"]]
                                self.ids[key][1].extend(item["Ok"])
                                self.repeats += bool(item.get("repeat"))
                            settled = not _unsettled(item)
                attempt.end = time.monotonic()
                self.statuses[attempt.status] += 1
                self.attempts.append(attempt)
                if settled:
                    pending = None
                else:
                    tries += 1
                await asyncio.sleep(self.pace_s)

    def unsettled_at_stop(self) -> int:
        """Logical events never answered (each publisher's last, at most, in flight at stop)."""
        return sum(1 for _, got in self.ids.values() if not got)

    def longest_gap(self, start: float, end: float, members: set[str]) -> float:
        """The longest time within ``[start, end]`` in which no publish through one of
        ``members`` was answered Ok (the window's edges count as answers)."""
        oks = sorted(a.end for a in self.attempts if a.member in members and a.acked and start <= a.end <= end)
        marks = [start, *oks, end]
        return max(b - a for a, b in itertools.pairwise(marks))


def _unsettled(item: Any) -> bool:
    """Whether an item's answer leaves the event to be sent again (as the SDK's rule)."""
    if not isinstance(item, dict):
        return True
    err = item.get("Err")
    if err is None:
        return False
    if "Busy" in err:
        return True
    if "GenericBatchError" in err:
        return "at most" not in str(err["GenericBatchError"])
    generic = err.get("GenericError")
    return isinstance(generic, dict) and generic.get("error_code") == 6
