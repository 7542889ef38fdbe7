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
from aiohttp import web

from bench._harness import free_port
from bench.floor import http_latency

__all__ = ["relay_cpu"]

_ANSWER = b'[{"Ok":1}]'
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_ANSWER)).encode())]
# One notification as tidings pushes it (docs/wire-format.md), around the event's data.
_NOTE = (b'[{"id":%d,"eventId":%d,"prev_id":%d,"timestamp":%d,"namespace":"bench.floor","data":%b,'
         b'"source":"bench","filter":null,"headers":[["icrc72:broadcaster:received",{"Nat":%d}],'
         b'["icrc72:eventData:hash",{"Blob":"47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="}],'
         b'["icrc72:broadcaster:sent",{"Nat":%d}]]}]')


def relay_app(push_url: str) -> Callable[..., Awaitable[None]]:
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
        chunks, more = [], True
        while more:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        await send({"type": "http.response.body", "body": _ANSWER})
        count += 1
        data = b"".join(chunks)
        # The event's data as it came (a JSON array of one event: its "data" field is not
        # parsed out; the bytes only need the push's size).
        task = asyncio.create_task(push(count, data))
        pushes.add(task)
        task.add_done_callback(pushes.discard)

    return app


def _serve(port: int, push_url: str) -> None:
    import uvicorn
    import uvloop

    from tidings.server import _config
    from tidings.settings import Settings as TidingsSettings

    config = _config(relay_app(push_url), TidingsSettings(host="127.0.0.1", port=port, log_level="warning"))
    uvloop.run(uvicorn.Server(config).serve())


@contextlib.asynccontextmanager
async def _subscriber() -> AsyncIterator[tuple[str, list[int]]]:
    """The push endpoint: answers each push ``null`` (taken), counting them."""
    got = [0]

    async def take(request: web.Request) -> web.Response:
        await request.read()
        got[0] += 1
        return web.Response(body=b"null", content_type="application/json")

    app = web.Application()
    app.router.add_post("/push", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/push", got
    finally:
        await runner.cleanup()


async def relay_cpu(rate: float, seconds: float) -> dict[str, Any]:
    """The relay app's CPU per event at ``rate`` publishes/s for ``seconds``."""
    import psutil

    async with _subscriber() as (push_url, got):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "bench.floor_cpu", "serve", str(port), push_url],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 20
            while True:
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the relay floor server did not start") from None
                    await asyncio.sleep(0.05)
            await http_latency(url, rate, 1.0, 0.0)  # warm: connections, imports, caches
            await asyncio.sleep(0.2)
            p = psutil.Process(proc.pid)
            before, pushed = p.cpu_times(), got[0]
            lat = await http_latency(url, rate, seconds, 0.0)
            deadline = time.monotonic() + 10
            while got[0] - pushed < lat["sent"] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            after = p.cpu_times()
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    events = got[0] - pushed
    if not events:
        raise RuntimeError("no push reached the subscriber")
    cpu_s = (after.user - before.user) + (after.system - before.system)
    return {"events": events, "cpu_s": round(cpu_s, 3), "server_ms": round(1000 * cpu_s / events, 4)}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        _serve(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("usage: python -m bench.floor_cpu serve PORT PUSH_URL")
