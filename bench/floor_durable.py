"""The durable floor: the least a publish costs on this host once it must be on disk
before its answer, in Python, before tidings checks, routes or signs anything.

The empty app of ``bench.floor`` plus one durable append: each request's body goes to one
writer thread that takes every body queued, inserts them with one statement into a
SQLite table in WAL mode with ``synchronous=FULL`` (as tidings' embedded store commits)
and commits; each request is answered only after its commit. With a push URL it then
pushes one notification of the event, as ``bench.floor_cpu``'s relay does. Served as
``tidings serve`` serves its app (uvicorn with ``tidings.http1.Http1``, uvloop).

Its rows set tidings' one-event rate, CPU per event and round trip against a floor that
pays for the same durability (issue 47: "measure the limit in the same run"):

    .venv/bin/python -m bench.floor_durable serve PORT DB_PATH [PUSH_URL]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench._harness import free_port
from bench._scenario import Row, Settings, _guard
from bench.floor import SERVERS, http_latency, http_one_event, serve_uvicorn, serving
from bench.floor_cpu import _NOTE, relay_app, relay_load
from bench.floor_cpu import scenario as relay_scenario
from bench.live_plane import latency_body, percentiles
from bench.payloads import LATENCY_WARMUP
from tidings.pipeline._human import fmt_figure

__all__ = ["durable_app", "floor_scenario", "scenario"]

_T = re.compile(rb'"t",\{"Nat":(\d+)\}')
"""The publish call's time in a latency body (``live_plane.latency_body``), in a push."""
_Job = tuple[bytes, "asyncio.Future[None]"]


class _Writer(threading.Thread):
    """One connection, group commit: every body queued goes into one transaction."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(name="floor-writer", daemon=True)
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._loop = loop
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, data BLOB NOT NULL)")

    def run(self) -> None:
        while True:
            batch = [self.jobs.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 1000:
                    batch.append(self.jobs.get_nowait())
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany("INSERT INTO events(data) VALUES (?)", [(b,) for b, _ in batch])
            self._conn.execute("COMMIT")
            self._loop.call_soon_threadsafe(_settle, [f for _, f in batch])


def _settle(futures: list[asyncio.Future[None]]) -> None:
    for f in futures:
        if not f.done():
            f.set_result(None)


def durable_app(db_path: str, push_url: str | None) -> Callable[..., Awaitable[None]]:
    """HTTP: ``bench.floor_cpu``'s relay, each publish committed before its answer.
    WebSockets: ``/sub`` takes the pushes; any other path publishes one event per message,
    each answered once committed and then pushed to every ``/sub`` connection."""
    writer: _Writer | None = None
    count = 0
    subscribers: set[Callable[[dict[str, Any]], Awaitable[None]]] = set()

    async def commit(data: bytes) -> None:
        nonlocal writer
        loop = asyncio.get_running_loop()
        if writer is None:
            writer = _Writer(db_path, loop)
            writer.start()
        done: asyncio.Future[None] = loop.create_future()
        writer.jobs.put((data, done))
        await done

    http = relay_app(push_url, before_answer=commit)

    async def stream(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                     send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        nonlocal count
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        if scope["path"].endswith("/sub"):
            subscribers.add(send)
            try:
                while (await receive())["type"] == "websocket.receive":
                    pass
            finally:
                subscribers.discard(send)
            return
        while True:
            msg = await receive()
            if msg["type"] != "websocket.receive":
                return
            text = msg.get("text") or msg.get("bytes", b"").decode()
            m = json.loads(text)
            event = json.dumps(m["event"], separators=(",", ":")).encode()
            await commit(event)
            await send({"type": "websocket.send", "text": f'{{"op":"results","refs":[{m["ref"]}],'
                                                          '"results":[{"Ok":1}]}'})
            count += 1
            now = time.time_ns()
            note = (_NOTE % (count, count, count - 1, now, event, now, now)).decode()
            for sub in list(subscribers):
                await sub({"type": "websocket.send", "text": note})

    async def app(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                  send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        if scope["type"] == "websocket":
            await stream(scope, receive, send)
        else:
            await http(scope, receive, send)

    return app


@contextlib.asynccontextmanager
async def _durable_server(push_url: str | None = None) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    with tempfile.TemporaryDirectory(prefix="bench-floor-durable-") as d:
        port = free_port()
        command = [sys.executable, "-m", "bench.floor_durable", "serve", str(port), str(Path(d) / "floor.db")]
        async with serving([*command, *([push_url] if push_url else [])], port, "durable") as (url, proc):
            yield url, proc


async def ws_push_latency(url: str, rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    """The stream-latency scenario's cut on the durable floor: one WebSocket publishes one
    event per message at ``rate``/s (each carrying its send time), another takes the
    pushes; the time from the send to the push read."""
    ws_url = url.replace("http://", "ws://")
    samples: list[float] = []
    n, interval = int(rate * (seconds + warmup)), 1 / rate
    first_ns = 0
    async with aiohttp.ClientSession() as s, s.ws_connect(f"{ws_url}/v1/stream/sub") as sub, \
            s.ws_connect(f"{ws_url}/v1/stream") as pub:
        async def take() -> None:
            got = 0
            async for msg in sub:
                now = time.perf_counter_ns()
                m = _T.search(msg.data.encode())
                if m is not None and int(m.group(1)) >= first_ns:
                    samples.append((now - int(m.group(1))) / 1e6)
                got += 1
                if got == n:
                    return

        async def drain() -> None:
            got = 0
            async for _ in pub:
                got += 1
                if got == n:
                    return

        tasks = [asyncio.create_task(take()), asyncio.create_task(drain())]
        t_next = time.perf_counter()
        first_ns = time.perf_counter_ns() + int(warmup * 1e9)
        for k in range(n):
            t_next += interval
            event = latency_body(time.perf_counter_ns())[1:-1].decode()
            await pub.send_str(f'{{"op":"publish","ref":{k},"event":{event}}}')
            await asyncio.sleep(max(0.0, t_next - time.perf_counter()))
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
    return {"rate": rate, "sent": n, **percentiles(samples)}


async def durable_relay(rate: float, seconds: float) -> dict[str, Any]:
    """The durable relay under the cpu row's load (``bench.floor_cpu.relay_load``): its CPU
    per event, and each event's time from the publish call to its push read by the
    subscriber endpoint (``perf_counter_ns``, one clock for every process here)."""
    samples: list[float] = []

    def took(body: bytes) -> None:
        now = time.perf_counter_ns()
        m = _T.search(body)
        if m is not None:
            samples.append((now - int(m.group(1))) / 1e6)

    def measured() -> None:  # the warm-up's pushes are not counted
        samples.clear()

    cpu = await relay_load(_durable_server, rate, seconds, took, measured)
    return {**cpu, **percentiles(samples)}


async def scenario(s: Settings) -> list[Row]:
    """The durable floor's rows: one event per request, the round trip at the latency
    scenario's rate, and the CPU per event of publish -> commit -> push at 1,000/s."""
    rate = s.rate or 1000.0
    timeout = 2 * s.seconds + 60
    how = f"{SERVERS['uvicorn']}: empty app + one durable SQLite append (WAL, synchronous=FULL, group commit)"

    async def one() -> dict[str, Any]:
        async with _durable_server() as (url, _):
            return await http_one_event(url, s.clients, s.seconds)

    async def lat() -> dict[str, Any]:
        async with _durable_server() as (url, _):
            return await http_latency(url, rate, s.seconds, LATENCY_WARMUP)

    stream_rate = rate  # the stream-latency scenario's rate, as the HTTP rows'

    async def ws() -> dict[str, Any]:
        async with _durable_server() as (url, _):
            return await ws_push_latency(url, stream_rate, s.seconds, LATENCY_WARMUP)

    relayed: dict[str, Any] = {}

    async def relay() -> dict[str, Any]:
        relayed.update(await durable_relay(rate, s.seconds))
        return dict(relayed)

    async def cpu() -> dict[str, Any]:
        # The relay's load at 1,000/s measured both (a row's details are its own dict).
        return dict(relayed) if relayed and rate == 1000.0 else await durable_relay(1000.0, s.seconds)

    rows = [
        await _guard("floor", "durable", f"{how}, one event per HTTP request, {s.clients} keep-alive clients",
                     "events/s", timeout, one, lambda d: {"events/s": d["events_per_s"]}),
        await _guard("floor", "durable", f"{how}, publish round trip over HTTP at {fmt_figure(rate)}/s", "ms",
                     timeout, lat, _lat),
        await _guard("floor", "durable", f"{how}, then its push out: publish call -> push read at "
                     f"{fmt_figure(rate)}/s", "ms", timeout, relay, _lat),
        await _guard("floor", "durable", f"{how}, then its push out, at 1,000/s", "ms CPU per event", timeout, cpu,
                     lambda d: {"server": d["server_ms"]}),
        await _guard("floor", "durable", f"{how}, over WebSockets: one event per message, answered once committed, "
                     f"then pushed on another connection: send -> push read at {fmt_figure(stream_rate)}/s", "ms",
                     timeout, ws, _lat),
    ]
    kinds = ("http-one-event", "http-latency", "http-push-latency", "http-relay-cpu", "ws-push-latency")
    for r, kind in zip(rows, kinds, strict=True):
        r.details["durable_floor"] = kind
    return rows


async def floor_scenario(s: Settings) -> list[Row]:
    """The whole ``floor`` scenario: the empty app's and the relay's rows
    (``bench.floor_cpu``), then the durable floor's."""
    return await relay_scenario(s) + await scenario(s)


def _lat(d: dict[str, Any]) -> dict[str, float]:
    return {"p50": d["p50_ms"], "p99": d["p99_ms"], "p99.9": d["p999_ms"]}


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "serve":
        serve_uvicorn(durable_app(sys.argv[3], sys.argv[4] if len(sys.argv) == 5 else None), int(sys.argv[2]))
    else:
        sys.exit("usage: python -m bench.floor_durable serve PORT DB_PATH [PUSH_URL]")
