"""The live side of bench/replay.py in a process of its own: a publisher sending one event
every ``every`` seconds and the endpoint of the live subscription, so that the replay's
receiving end (200,000 events decoded in the benchmark's process) does not delay them.

Times are ``time.monotonic()``, one clock for every process of the host.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

__all__ = ["LiveSide"]


class _Note(msgspec.Struct):
    eventId: int


_decode = msgspec.json.Decoder(list[_Note]).decode


async def _main(conn: Connection, port: int, namespace: str) -> None:
    got: dict[int, float] = {}

    async def take(request: web.Request) -> web.Response:
        body = await request.read()
        now = time.monotonic()
        for n in _decode(body):
            got[n.eventId] = now
        return web.Response(body=b"null", content_type="application/json")

    app = web.Application()
    app.router.add_post("/live", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    conn.send("ready")
    while True:
        cmd = await asyncio.to_thread(conn.recv)
        if cmd is None:
            break
        url, token, every = cmd
        got.clear()
        sent: dict[int, float] = {}
        stop = asyncio.Event()
        headers = {"authorization": f"Bearer {token}"}

        async def publish(http: aiohttp.ClientSession, stop: asyncio.Event = stop,
                          sent: dict[int, float] = sent, url: str = url, every: float = every) -> None:
            i = 0
            while not stop.is_set():
                t = time.monotonic()
                event = {"namespace": namespace, "data": {"Map": [["live", {"Nat": i}]]}}
                async with http.post(f"{url}/v1/icrc72_publish", data=json.dumps([event])) as r:
                    (res,) = await r.json()
                ok = res["Ok"]
                sent[ok[0] if isinstance(ok, list) else ok] = t
                i += 1
                await asyncio.sleep(every)

        async with aiohttp.ClientSession(headers=headers) as http:
            task = asyncio.create_task(publish(http))
            await asyncio.to_thread(conn.recv)  # stop
            stop.set()
            await task
        await asyncio.sleep(0.5)
        conn.send([(t, got.get(i)) for i, t in sent.items()])
    await runner.cleanup()


def _child(conn: Connection, port: int, namespace: str) -> None:
    asyncio.run(_main(conn, port, namespace))


class LiveSide:
    """``with LiveSide(port, ns) as live``: ``start(url, token, every)``, then ``stop()``
    returns (publish time, receipt time or None) per live event."""

    def __init__(self, port: int, namespace: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child, args=(child, port, namespace), daemon=True)

    def __enter__(self) -> LiveSide:
        self._proc.start()
        if not self._conn.poll(30) or self._conn.recv() != "ready":
            raise RuntimeError("the live side did not start")
        return self

    def start(self, url: str, token: str, every: float) -> None:
        self._conn.send((url, token, every))

    async def stop(self) -> list[tuple[float, Any]]:
        self._conn.send("stop")
        out: list[tuple[float, Any]] = await asyncio.to_thread(self._conn.recv)
        return out

    def __exit__(self, *exc: object) -> None:
        try:
            self._conn.send(None)
        finally:
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
