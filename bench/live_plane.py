"""Publish throughput and publish-to-handler latency of the live plane.

Starts a real ``tidings serve`` process on a free port with a fresh data folder, then:

1. durable publish throughput over HTTP: ``--clients`` concurrent publishers, each
   sending batches of ``--batch`` events, for ``--seconds``;
2. latency from the publish call to the subscriber's handler, one subscriber (SDK
   Subscriber on uvicorn), single-event publishes at ``--rate`` events/s.

Prints the figures and writes them as JSON (``--json``). Bounded in time; stops what it
started. Run: ``.venv/bin/python -m bench.live_plane``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn

from bench._harness import Server, free_port, post
from tidings.client import EventNotification, Subscriber

_FASTEST = 150_000
"""Events per second: more than any publish run here has reached (keyed bodies made ahead)."""

EVENT = {"namespace": "bench.tp", "data": {"Map": [["i", {"Nat": 1}], ["name", {"Text": "x" * 64}]]}}


async def throughput(srv: Server, clients: int, batch: int, seconds: float,
                     event: dict[str, Any] | None = None, schema: tuple[str, Any] | None = None,
                     subscription_filter: str | None = None, others: Sequence[Server] = (),
                     keyed: bool = False, round_: int = 0) -> dict[str, float]:
    """``clients`` concurrent publishers posting ``batch`` copies of ``event`` (namespace
    ``bench.tp``) per request for ``seconds``; counts the events answered ``Ok``. With
    ``schema`` (format, model), the publication is bound to it and every event validated.
    With ``others`` (broadcasters sharing ``srv``'s store), the clients are spread over all.
    ``keyed``: each event has an idempotency key of its own (as the SDK sends them), unique
    per ``round_`` (a server measured again takes the next round)."""
    event = EVENT if event is None else event
    headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"}
    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(headers=headers, connector=conn) as s:
        config: list[Any] = []
        if schema is not None:
            model = schema[1] if isinstance(schema[1], str) else json.dumps(schema[1])  # .proto files are text
            reg = [{"format": schema[0], "model": model}]
            (r,) = json.loads(await post(s, srv.url, "register_schema", json.dumps(reg).encode()))
            config = [["tidings:publication:schema", {"Nat": r["Ok"]["id"]}]]
        pub = [{"namespace": "bench.tp", "config": config}]
        await post(s, srv.url, "icrc72_register_publication", json.dumps(pub).encode())
        taker = None
        if subscription_filter is not None:  # one subscriber, whose filter runs on every event
            taker = await sink()
            sub = [{"namespace": "bench.tp", "endpoint": taker[1], "filter": subscription_filter}]
            await post(s, srv.url, "icrc72_register_subscription", json.dumps(sub).encode())
        body = json.dumps([event] * batch).encode()
        # A keyed event: the event's JSON with a key spliced in before its closing brace,
        # 36 characters as a UUID's, unique per round, client, request and position.
        head = json.dumps(event).encode()[:-1] + b', "idempotencyKey": "'

        def keyed_body(k: int, n: int) -> bytes:
            return b"[" + b",".join(head + b"%04d%04d-%08d-%018d\"}" % (round_, k, n, i) for i in range(batch)) + b"]"

        # The keyed bodies are made before the clock starts, as the plain one is: making
        # them per request cost the clients, on the cores the server shares, about half a
        # microsecond per event (BENCHMARKS.md, "Idempotency keys"). Enough for the
        # fastest rate seen here; past that, made as needed.
        ready: list[list[bytes]] = [
            [keyed_body(k, n) for n in range(1, 2 + int(_FASTEST * seconds / batch / clients))] if keyed else []
            for k in range(clients)
        ]
        count = 0
        stop = time.monotonic() + seconds

        async def client(url: str, k: int = 0) -> None:
            nonlocal count
            n = 0
            while time.monotonic() < stop:
                if keyed:
                    data = ready[k][n] if n < len(ready[k]) else keyed_body(k, n + 1)
                    n += 1
                else:
                    data = body
                out = json.loads(await post(s, url, "icrc72_publish", data))
                count += sum(1 for r in out if r and "Ok" in r)

        urls = [x.url for x in (srv, *others)]
        t0 = time.monotonic()
        await asyncio.gather(*(client(urls[k % len(urls)], k) for k in range(clients)))
        elapsed = time.monotonic() - t0
        if taker is not None:
            await taker[0].cleanup()
    return {"events": count, "seconds": round(elapsed, 2), "events_per_s": round(count / elapsed)}


async def alternated(a: Server, b: Server, clients: int, batch: int, seconds: float,
                     slices: int = 4) -> tuple[dict[str, float], dict[str, float]]:
    """Plain publishes to ``a`` and keyed ones to ``b``, in ``slices`` alternating slices of
    ``seconds / slices`` each (both servers started beforehand): each figure is the
    events over the time of its own slices. Two runs one after the other saw the host's
    speed change between them by tens of percent; slices alternated see the same host."""
    per = seconds / slices
    got: dict[bool, list[float]] = {False: [0, 0.0], True: [0, 0.0]}
    for r in range(slices):
        for srv, keyed in ((a, False), (b, True)) if r % 2 == 0 else ((b, True), (a, False)):
            d = await throughput(srv, clients, batch, per, event=EVENT, keyed=keyed, round_=r)
            got[keyed][0] += d["events"]
            got[keyed][1] += d["seconds"]

    def fig(keyed: bool) -> dict[str, float]:
        n, t = got[keyed]
        return {"events": n, "seconds": round(t, 2), "events_per_s": round(n / t)}

    return fig(False), fig(True)


async def sink(got: list[int] | None = None, on_body: Callable[[bytes], None] | None = None) -> tuple[Any, str]:
    """A subscriber endpoint that takes every push (aiohttp.web on a free port), counting
    them in ``got[0]`` if given and handing each body to ``on_body``: its runner and URL."""
    from aiohttp import web

    async def take(request: web.Request) -> web.Response:
        body = await request.read()
        if got is not None:
            got[0] += 1
        if on_body is not None:
            on_body(body)
        return web.Response(text="null", content_type="application/json")

    app = web.Application()
    app.router.add_post("/", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/"


def latency_body(t_ns: int) -> bytes:
    """One event whose data carries the publish call's ``perf_counter_ns`` (about 120 bytes)."""
    return (b'[{"namespace":"bench.lat","data":{"Map":[["t",{"Nat":%d}],["name",{"Text":"%s"}]]}}]'
            % (t_ns, b"x" * 24))


async def latency(srv: Server, rate: float, seconds: float, warmup: float = 0.0,
                  subscription_filter: str | None = None) -> dict[str, float]:
    """Single-event publishes at ``rate``/s for ``warmup`` + ``seconds``; each event carries
    the time of its publish call, and the subscriber's handler (SDK ``Subscriber`` on
    uvicorn, trusted mode) records the time from that call to itself. Events published in
    the first ``warmup`` seconds are not counted."""

    async def paced(n: int, handle: Callable[[EventNotification], None], clock: Callable[[], int]) -> Any:
        return await paced_publishes(srv, rate, n, handle, clock, subscription_filter)

    return await timed(paced, rate, seconds, warmup)


async def timed(paced: Callable[[int, Callable[[EventNotification], None], Callable[[], int]], Awaitable[Any]],
                rate: float, seconds: float, warmup: float) -> dict[str, float]:
    """Latency percentiles of ``paced(n, handle, clock)``, which publishes ``n`` events at
    ``rate``/s carrying ``clock()`` (``perf_counter_ns``) and calls ``handle`` on each
    notification; events of the first ``warmup`` seconds are not counted."""
    samples: list[tuple[int, float]] = []

    def handle(n: EventNotification) -> None:
        t = n.data["Map"][0][1]["Nat"]
        samples.append((t, (time.perf_counter_ns() - t) / 1e6))

    n = int(rate * (seconds + warmup))
    start_ns = time.perf_counter_ns() + int(warmup * 1e9)
    await paced(n, handle, time.perf_counter_ns)
    lat_ms = [ms for t, ms in samples if t >= start_ns]
    return {"rate": rate, "sent": n, "warmup_s": warmup, **percentiles(lat_ms)}


async def paced_publishes(srv: Server, rate: float, n: int, handle: Callable[[EventNotification], None],
                          clock: Callable[[], int], other_filter: str | None = None) -> int:
    """``n`` single-event publishes at ``rate``/s, each carrying ``clock()`` at its call
    (``latency_body``), to one subscription whose handler is ``handle`` (SDK ``Subscriber``
    on uvicorn, trusted mode). Each publish is its own task, so a slow one does not hold
    back the next. Returns once ``n`` were handled, or 10 s after the last publish."""
    handled = 0

    async def count(note: EventNotification) -> None:
        nonlocal handled
        handle(note)
        handled += 1

    sub = Subscriber(count, url=srv.url, token=srv.token, dedupe=False)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(sub, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"}
    try:
        async with aiohttp.ClientSession(headers=headers) as s:
            await post(s, srv.url, "icrc72_register_publication", b'[{"namespace":"bench.lat"}]')
            await sub.subscribe("bench.lat", f"http://127.0.0.1:{port}/")
            if other_filter is not None:  # another subscriber, whose filter runs on every event
                taker = await sink()
                other = [{"namespace": "bench.lat", "endpoint": taker[1], "filter": other_filter}]
                await post(s, srv.url, "icrc72_register_subscription", json.dumps(other).encode())
            interval = 1 / rate
            t_next = time.perf_counter()
            pending: set[asyncio.Task[None]] = set()

            async def one() -> None:
                out = json.loads(await post(s, srv.url, "icrc72_publish", latency_body(clock())))
                if "Ok" not in out[0]:
                    raise RuntimeError(f"publish: {out[0]}")

            for _ in range(n):
                t_next += interval
                task1 = asyncio.create_task(one())
                pending.add(task1)
                task1.add_done_callback(pending.discard)
                await asyncio.sleep(max(0.0, t_next - time.perf_counter()))
            await asyncio.gather(*pending)
            deadline = time.monotonic() + 10
            while handled < n and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
    finally:
        server.should_exit = True
        await task
        await sub.close()
    return handled


def percentiles(lat_ms: list[float]) -> dict[str, float]:
    """``received``, p50/p99/p99.9 and mean of latencies in milliseconds (nearest rank)."""
    lat_ms = sorted(lat_ms)
    if not lat_ms:
        return {"received": 0}

    def pct(p: float) -> float:
        return round(lat_ms[min(len(lat_ms) - 1, int(p * len(lat_ms)))], 3)

    return {"received": len(lat_ms), "p50_ms": pct(0.5), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
            "mean_ms": round(statistics.fmean(lat_ms), 3)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, Server(Path(d)) as srv:
        tp1 = await throughput(srv, a.clients, 1, a.seconds)
        tpb = await throughput(srv, a.clients, a.batch, a.seconds)
        lat = await latency(srv, a.rate, a.seconds)
    result = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "publish_1_per_request": tp1,
        f"publish_{a.batch}_per_request": tpb,
        "latency_publish_to_handler": lat,
    }
    print(f"durable publish, 1 event/request, {a.clients} clients:   {tp1['events_per_s']:>8} events/s")
    print(f"durable publish, {a.batch} events/request, {a.clients} clients: {tpb['events_per_s']:>8} events/s")
    print(f"publish->handler latency at {a.rate:.0f}/s, 1 subscriber:  p50 {lat['p50_ms']} ms  "
          f"p99 {lat['p99_ms']} ms  p99.9 {lat['p999_ms']} ms  ({lat['received']} received)")
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
