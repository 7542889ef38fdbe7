"""The CPU floor of a live event: what a server spends per event on the HTTP alone of
publish -> push -> confirm, before it stores, routes or signs anything.

An empty relay app under the server tidings runs (uvicorn with ``tidings.http1.Http1``,
uvloop, ``tidings.server._config``) reads each publish request, answers ``[{"Ok":1}]``,
then pushes one notification of that event (the same JSON shape and size as tidings'
push) to a subscriber endpoint over a keep-alive aiohttp session and reads its answer.
The load is the ``cpu`` scenario's: the latency scenario's publish at 1,000/s, each its own
task. The figure is the relay process's CPU (user + system, psutil) over the load, per
event: the ``cpu`` rows are set against it (``x floor``), the way the latency rows are set
against the empty app's round trip (issue 47: "measure the limit in the same run").

    .venv/bin/python -m bench.floor_cpu serve PORT PUSH_URL
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp

from bench._harness import free_port
from bench._scenario import Row, Settings, _guard
from bench.floor import SERVERS, http_latency, read_body, serve_uvicorn, serving
from bench.floor import scenario as floor_scenario
from bench.live_plane import sink

__all__ = ["relay_app", "relay_cpu", "relay_load", "scenario"]

_ANSWER = b'[{"Ok":1}]'
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_ANSWER)).encode())]
# One notification as tidings pushes it (docs/wire-format.md), around the event's data.
_NOTE = (b'[{"id":%d,"eventId":%d,"prev_id":%d,"timestamp":%d,"namespace":"bench.floor","data":%b,'
         b'"source":"bench","filter":null,"headers":[["icrc72:broadcaster:received",{"Nat":%d}],'
         b'["icrc72:eventData:hash",{"Blob":"47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="}],'
         b'["icrc72:broadcaster:sent",{"Nat":%d}]]}]')


def relay_app(push_url: str | None,
              before_answer: Callable[[bytes], Awaitable[None]] | None = None) -> Callable[..., Awaitable[None]]:
    """Answers each publish, after ``before_answer`` of its body if given (the durable
    floor's commit), then pushes one notification of it to ``push_url`` if given."""
    session: aiohttp.ClientSession | None = None
    pushes: set[asyncio.Task[None]] = set()
    count = 0

    async def push(n: int, body: bytes) -> None:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(headers={"content-type": "application/json"})
        now = time.time_ns()
        note = _NOTE % (n, n, n - 1, now, body, now, now)
        with contextlib.suppress(aiohttp.ClientError):
            async with session.post(push_url, data=note) as r:
                await r.read()

    async def app(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                  send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        nonlocal count
        if scope["type"] != "http":
            return
        data = await read_body(receive)
        if before_answer is not None:
            await before_answer(data)
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        await send({"type": "http.response.body", "body": _ANSWER})
        if push_url is None:
            return
        count += 1
        # The event's data as it came (a JSON array of one event: its "data" field is not
        # parsed out; the bytes only need the push's size).
        task = asyncio.create_task(push(count, data))
        pushes.add(task)
        task.add_done_callback(pushes.discard)

    return app


async def scenario(s: Settings) -> list[Row]:
    """The ``floor`` scenario: the empty app's rows (``bench.floor``), then the relay's CPU
    under tidings' server."""
    rows = await floor_scenario(s)

    async def relay() -> dict[str, Any]:
        return await relay_cpu(1000.0, s.seconds)

    rows.append(await _guard("floor", "uvicorn", f"{SERVERS['uvicorn']}: empty relay app, a publish in and its "
                             "push out, at 1,000/s", "ms CPU per event", 2 * s.seconds + 60, relay,
                             lambda d: {"server": d["server_ms"]}))
    rows[-1].details["floor"] = "http-relay-cpu"
    return rows


async def relay_cpu(rate: float, seconds: float) -> dict[str, Any]:
    """The relay app's CPU per event at ``rate`` publishes/s for ``seconds``."""

    @contextlib.asynccontextmanager
    async def relay(push_url: str) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
        port = free_port()
        async with serving([sys.executable, "-m", "bench.floor_cpu", "serve", str(port), push_url], port,
                           "relay") as served:
            yield served

    return await relay_load(relay, rate, seconds)


async def relay_load(server: Callable[[str], contextlib.AbstractAsyncContextManager[tuple[str, Any]]],
                     rate: float, seconds: float, on_body: Callable[[bytes], None] | None = None,
                     measuring: Callable[[], None] | None = None) -> dict[str, Any]:
    """The cpu row's load on a relay: ``server(push_url)`` started, a second of warm load,
    then ``rate`` publishes/s for ``seconds``; the server's CPU per event pushed. Each push's
    body also goes to ``on_body``; ``measuring`` is called when the warm load is over."""
    import psutil

    got = [0]
    runner, push_url = await sink(got, on_body)
    try:
        async with server(push_url) as (url, proc):
            await http_latency(url, rate, 1.0, 0.0)  # warm: connections, imports, caches
            await asyncio.sleep(0.2)
            p = psutil.Process(proc.pid)
            if measuring is not None:
                measuring()
            before, pushed = p.cpu_times(), got[0]
            lat = await http_latency(url, rate, seconds, 0.0)
            deadline = time.monotonic() + 10
            while got[0] - pushed < lat["sent"] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            after = p.cpu_times()
    finally:
        await runner.cleanup()
    events = got[0] - pushed
    if not events:
        raise RuntimeError("no push reached the subscriber")
    cpu_s = (after.user - before.user) + (after.system - before.system)
    return {"events": events, "cpu_s": round(cpu_s, 3), "server_ms": round(1000 * cpu_s / events, 4)}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve_uvicorn(relay_app(sys.argv[3]), int(sys.argv[2]))
    else:
        sys.exit("usage: python -m bench.floor_cpu serve PORT PUSH_URL")
