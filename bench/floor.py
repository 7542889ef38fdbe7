"""The floor: what HTTP and a WebSocket cost on this host before tidings does anything.

The same requests the latency and one-event scenarios send (the publish body, its
headers, keep-alive, the same aiohttp client), answered by an empty ASGI app that reads
the body and answers a fixed ``[{"Ok":1}]``; once under the server tidings runs
(uvicorn with tidings' own protocol classes, ``tidings.http1.Http1`` and
``WsHandshake``, on uvloop, configured by ``tidings.server._config``), and once under
granian (Rust, its own event loop threads). The WebSocket row sends the stream-publish
scenario's message and gets a one-result answer back.

Each server runs in a process of its own, as ``tidings serve`` does:

    .venv/bin/python -m bench.floor serve uvicorn PORT    # or granian
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp

from bench._harness import free_port
from bench._scenario import Row, Settings, _guard
from bench.live_plane import latency_body, percentiles
from bench.payloads import EVENT, LATENCY_WARMUP
from tidings.pipeline._human import fmt_figure

__all__ = ["SERVERS", "app", "read_body", "scenario", "with_floor_ratios"]

_ANSWER = b'[{"Ok":1}]'
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_ANSWER)).encode())]
SERVERS = {
    "uvicorn": "uvicorn + tidings.http1.Http1 (as tidings serve), uvloop",
    "granian": "granian (ASGI, 1 worker, uvloop)",
}


async def read_body(receive: Callable[[], Awaitable[Any]]) -> bytes:
    """An HTTP request's whole body, as an ASGI app receives it."""
    chunks, more = [], True
    while more:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        more = msg.get("more_body", False)
    return b"".join(chunks)


async def app(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
              send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """Reads what it is sent and answers the smallest publish answer; nothing else."""
    if scope["type"] == "http":
        more = True
        while more:
            msg = await receive()
            more = msg.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        await send({"type": "http.response.body", "body": _ANSWER})
    elif scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            msg = await receive()
            if msg["type"] != "websocket.receive":
                return
            ref = int(json.loads(msg.get("text") or msg.get("bytes") or b"{}").get("ref", 0))
            await send({"type": "websocket.send", "text": f'{{"op":"results","refs":[{ref}],"results":[{{"Ok":1}}]}}'})


def serve_uvicorn(asgi: Callable[..., Awaitable[None]], port: int) -> None:
    """Serve ``asgi`` as ``tidings serve`` serves its app: uvicorn with tidings' protocol
    classes and settings, on uvloop."""
    import uvicorn
    import uvloop

    from tidings.server import _config
    from tidings.settings import Settings as TidingsSettings

    config = _config(asgi, TidingsSettings(host="127.0.0.1", port=port, log_level="warning"))
    uvloop.run(uvicorn.Server(config).serve())


def _serve(kind: str, port: int) -> None:
    if kind == "uvicorn":
        serve_uvicorn(app, port)
        return
    os.execvp(sys.executable, [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1", "--loop", "uvloop", "--http", "1", "--ws",
                               "--log-level", "warning", "bench.floor:app"])


@contextlib.asynccontextmanager
async def floor_server(kind: str) -> AsyncIterator[str]:
    """A floor server of ``kind`` on a free port; its base URL."""
    port = free_port()
    async with serving([sys.executable, "-m", "bench.floor", "serve", kind, str(port)], port, kind) as (url, _):
        yield url


@contextlib.asynccontextmanager
async def serving(command: list[str], port: int, name: str) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    """``command`` run until the block ends, once it listens on ``port``: its URL and process."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {name} floor server did not start") from None
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def http_latency(url: str, rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    """Round trips of the latency scenario's publish at ``rate``/s, each its own task,
    over one keep-alive session: the time from the call to the answer read."""
    headers = {"Authorization": "Bearer floor", "Content-Type": "application/json"}
    samples: list[float] = []
    n, interval = int(rate * (seconds + warmup)), 1 / rate
    first = int(rate * warmup)
    async with aiohttp.ClientSession(headers=headers) as s:
        async def one(k: int) -> None:
            t = time.perf_counter_ns()
            async with s.post(f"{url}/v1/icrc72_publish", data=latency_body(t)) as r:
                await r.read()
            if k >= first:
                samples.append((time.perf_counter_ns() - t) / 1e6)

        pending: set[asyncio.Task[None]] = set()
        t_next = time.perf_counter()
        for k in range(n):
            t_next += interval
            task = asyncio.create_task(one(k))
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(max(0.0, t_next - time.perf_counter()))
        await asyncio.gather(*pending)
    return {"rate": rate, "sent": n, **percentiles(samples)}


async def http_one_event(url: str, clients: int, seconds: float) -> dict[str, Any]:
    """The publish-1 scenario's load: ``clients`` concurrent keep-alive clients, one event
    per request, as fast as the answers come."""
    headers = {"Authorization": "Bearer floor", "Content-Type": "application/json"}
    body = json.dumps([EVENT]).encode()
    count = 0
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=clients)) as s:
        stop = time.monotonic() + seconds

        async def client() -> None:
            nonlocal count
            while time.monotonic() < stop:
                async with s.post(f"{url}/v1/icrc72_publish", data=body) as r:
                    await r.read()
                count += 1

        t0 = time.monotonic()
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.monotonic() - t0
    return {"events": count, "seconds": round(elapsed, 2), "events_per_s": round(count / elapsed)}


async def ws_latency(url: str, rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    """One stream-publish message per round trip at ``rate``/s on one connection."""
    template = '{"op":"publish","ref":%d,"event":' + json.dumps(EVENT) + "}"
    sent: dict[int, int] = {}
    samples: list[float] = []
    n, interval = int(rate * (seconds + warmup)), 1 / rate
    first = int(rate * warmup)
    async with aiohttp.ClientSession() as s, s.ws_connect(url.replace("http://", "ws://") + "/v1/stream") as ws:
        async def reader() -> None:
            got = 0
            async for msg in ws:
                ref = json.loads(msg.data)["refs"][0]
                if ref >= first:
                    samples.append((time.perf_counter_ns() - sent.pop(ref)) / 1e6)
                got += 1
                if got == n:
                    return

        task = asyncio.create_task(reader())
        t_next = time.perf_counter()
        for k in range(n):
            t_next += interval
            sent[k] = time.perf_counter_ns()
            await ws.send_str(template % k)
            await asyncio.sleep(max(0.0, t_next - time.perf_counter()))
        await asyncio.wait_for(task, 10)
    return {"rate": rate, "sent": n, **percentiles(samples)}


def _lat(d: dict[str, Any]) -> dict[str, float]:
    return {"p50": d["p50_ms"], "p99": d["p99_ms"], "p99.9": d["p999_ms"]}


def _rate(d: dict[str, Any]) -> dict[str, float]:
    return {"events/s": d["events_per_s"]}


async def scenario(s: Settings) -> list[Row]:
    rate = s.rate or 1000.0
    timeout = 2 * s.seconds + 60
    at = f"at {fmt_figure(rate)}/s"
    rows: list[Row] = []
    for kind, how in SERVERS.items():
        async def lat(kind: str = kind) -> dict[str, Any]:
            async with floor_server(kind) as url:
                return await http_latency(url, rate, s.seconds, LATENCY_WARMUP)

        async def one(kind: str = kind) -> dict[str, Any]:
            async with floor_server(kind) as url:
                return await http_one_event(url, s.clients, s.seconds)

        async def ws(kind: str = kind) -> dict[str, Any]:
            async with floor_server(kind) as url:
                return await ws_latency(url, rate, s.seconds, LATENCY_WARMUP)

        rows.append(await _guard("floor", kind, f"{how}: empty app, publish round trip over HTTP {at}", "ms",
                                 timeout, lat, _lat))
        rows[-1].details["floor"] = "http-latency"
        rows.append(await _guard("floor", kind, f"{how}: empty app, one event per HTTP request, {s.clients} "
                                 "keep-alive clients", "events/s", timeout, one, _rate))
        rows[-1].details["floor"] = "http-one-event"
        rows.append(await _guard("floor", kind, f"{how}: empty app, one WebSocket message round trip {at}", "ms",
                                 timeout, ws, _lat))
        rows[-1].details["floor"] = "ws-latency"
    return rows


# Which floor each tidings figure is set against: its transport and its kind.
_AGAINST = {"cpu": "http-relay-cpu", "latency": "http-latency", "stream-latency": "ws-latency",
            "publish-1": "http-one-event", "xmpp-latency": "http-latency", "filter-cost": "http-latency"}
# And which durable floor (``bench.floor_durable``: the same server, plus one durable
# SQLite append per event): the figures that pay for a commit before their answer or push.
_AGAINST_DURABLE = {"cpu": "http-relay-cpu", "latency": "http-push-latency", "publish-1": "http-one-event",
                    "stream-latency": "ws-push-latency"}


def with_floor_ratios(rows: list[Row]) -> None:
    """Set every latency and one-event figure (tidings' and, for scale, the peers') against
    the floor of tidings' transport for it, under tidings' own server (``x floor``): 3.0
    means three times what an HTTP round trip alone costs on this host. The figures that
    wait for a commit are also set against the durable floor (``x durable floor``)."""
    for key, kind, against in (("x_floor", "floor", _AGAINST), ("x_durable", "durable_floor", _AGAINST_DURABLE)):
        floors = {r.details.get(kind): r for r in rows
                  if r.scenario == "floor" and r.system in ("uvicorn", "durable") and kind in r.details and r.figures}
        for r in rows:
            if r.scenario == "floor" or not r.figures:
                continue
            base = floors.get(against.get(r.scenario, ""))
            if base is None or r.unit != base.unit:
                continue
            r.details[key] = {k: round(v / base.figures[k], 2) for k, v in r.figures.items() if base.figures.get(k)}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve" and sys.argv[2] in SERVERS:
        _serve(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("usage: python -m bench.floor serve uvicorn|granian PORT")
