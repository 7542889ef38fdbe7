"""Subscription semantics under load: filter evaluation rate and fan-out with filters.

1. Filter evaluation in the live path: a three-clause filter compiled once, evaluated
   in-process over events whose data is a 20-key Map (events/s).
2. Delivery with ``--subs`` subscriptions on one namespace of which ``--match`` (a
   fraction) have a filter the events pass: a real ``tidings serve`` process, one
   uvicorn endpoint serving every subscription, ``--events`` events published in
   batches of 100; reports notifications delivered and confirmed per second.

Bounded in time and count; stops what it started.
Run: ``.venv/bin/python -m bench.subscriptions``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn

from bench._harness import Server, free_port, post
from tidings.core import filters

FILTER = "amount > 100 & status == shipped | priority == high"


def _event(i: int) -> dict[str, object]:
    pairs: list[list[object]] = [[f"k{j}", {"Nat": j}] for j in range(17)]
    pairs += [["amount", {"Nat": 50 + i % 100}], ["status", {"Text": "shipped"}], ["priority", {"Text": "low"}]]
    return {"Map": pairs}


def filter_rate(n: int) -> dict[str, float]:
    pred = filters.compile_predicate(filters.parse(FILTER))
    data = [_event(i) for i in range(1000)]
    t0 = time.perf_counter()
    hits = 0
    for i in range(n):
        hits += pred(data[i % 1000])
    elapsed = time.perf_counter() - t0
    return {"filter": FILTER, "events": n, "events_per_s": round(n / elapsed), "matched": hits}


class _Counter:
    """One ASGI endpoint for every subscription: counts and confirms (trusted mode)."""

    def __init__(self) -> None:
        self.received = 0

    async def __call__(self, scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        self.received += body.count(b'"eventId"')
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


async def fanout(srv: Server, subs: int, match: float, events: int, *,
                 data: dict[str, Any] | None = None, timeout: float = 120.0) -> dict[str, float]:
    """``subs`` subscriptions, ``match`` of them with a filter the events pass. With
    ``data`` every event carries that value and the subscriptions have no filter at all
    (``match`` must be 1): plain fan-out."""
    counter = _Counter()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(counter, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off", backlog=4096))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"}
    matching = int(subs * match)
    try:
        async with aiohttp.ClientSession(headers=headers) as s:
            await post(s, srv.url, "icrc72_register_publication", b'[{"namespace":"bench.fan"}]')
            regs = [
                {"namespace": "bench.fan", "endpoint": f"http://127.0.0.1:{port}/s{i}",
                 "filter": "amount >= 0" if i < matching else "amount > 1000000"}
                for i in range(subs)
            ]
            if data is not None:
                for r in regs:
                    del r["filter"]
            for i in range(0, subs, 500):
                await post(s, srv.url, "icrc72_register_subscription", json.dumps(regs[i : i + 500]).encode())
            expected = events * matching
            t0 = time.monotonic()
            for i in range(0, events, 100):
                body = json.dumps([{"namespace": "bench.fan", "data": _event(j) if data is None else data}
                                   for j in range(i, min(i + 100, events))])
                await post(s, srv.url, "icrc72_publish", body.encode())
            deadline = time.monotonic() + timeout
            while counter.received < expected and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            elapsed = time.monotonic() - t0
    finally:
        server.should_exit = True
        await task
    return {"subscriptions": subs, "matching": matching, "events": events, "expected": expected,
            "delivered": counter.received, "seconds": round(elapsed, 2),
            "notifications_per_s": round(counter.received / elapsed),
            "events_per_s": round(events / elapsed)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter-events", type=int, default=300_000)
    ap.add_argument("--subs", type=int, default=1000)
    ap.add_argument("--match", type=float, default=0.1)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    fr = filter_rate(a.filter_events)
    print(f"filter evaluation ({FILTER!r}, 20-key Map): {fr['events_per_s']:>9} events/s")
    with tempfile.TemporaryDirectory() as d, Server(Path(d)) as srv:
        fo = await fanout(srv, a.subs, a.match, a.events)
    print(f"delivery, {fo['subscriptions']} subscriptions, {fo['matching']} matching, {fo['events']} events: "
          f"{fo['notifications_per_s']} notifications/s confirmed "
          f"({fo['delivered']}/{fo['expected']} in {fo['seconds']} s; {fo['events_per_s']} events/s routed)")
    if a.json:
        a.json.write_text(json.dumps({"filter": fr, "fanout": fo}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
