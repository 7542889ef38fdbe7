"""The stream face (docs/streaming.md) beside JetStream's async publish: one event per
message, a window of unanswered publishes per connection, and fan-out to stream
subscribers that acknowledge every push.

Both sides are driven the same way: ``connections`` connections, each keeping up to
``window`` publishes unanswered, counting the events answered ``Ok`` (tidings: once
durable, SQLite ``synchronous=FULL``; JetStream: its PubAck, file storage).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec

from bench import peers as P
from bench._harness import Server, post
from tidings.client import EventNotification, Publisher


class _Results(msgspec.Struct):
    op: str
    refs: list[int] = []
    results: list[msgspec.Raw] = []
    push: int = 0
    notifications: list[msgspec.Raw] = []


_decode = msgspec.json.Decoder(_Results).decode


def _ws_url(srv: Server) -> str:
    return srv.url.replace("http://", "ws://") + "/v1/stream"


async def tidings_publish(srv: Server, event: dict[str, Any], connections: int, window: int,
                          seconds: float) -> dict[str, float]:
    """Raw WebSocket clients (aiohttp), the message text built once and numbered per event."""
    headers = {"Authorization": f"Bearer {srv.token}"}
    ns = event["namespace"]
    template = '{"op":"publish","ref":%d,"event":' + json.dumps(event) + "}"
    count = 0
    refused = 0
    stop = time.monotonic() + seconds
    async with aiohttp.ClientSession(headers=headers) as s:
        await post(s, srv.url, "icrc72_register_publication", json.dumps([{"namespace": ns}]).encode())

        async def client() -> None:
            nonlocal count, refused
            room = asyncio.Semaphore(window)
            async with s.ws_connect(_ws_url(srv), max_msg_size=0) as ws:
                async def reader() -> None:
                    nonlocal count, refused
                    async for msg in ws:
                        m = _decode(msg.data)
                        n = len(m.refs)
                        ok = sum(1 for r in m.results if bytes(r).startswith(b'{"Ok"'))
                        count += ok
                        refused += n - ok
                        for _ in range(n):
                            room.release()

                task = asyncio.create_task(reader())
                ref = 0
                while time.monotonic() < stop:
                    await room.acquire()
                    ref += 1
                    await ws.send_str(template % ref)
                for _ in range(window):  # every answer in
                    await room.acquire()
                await ws.close()
                await task

        t0 = time.monotonic()
        await asyncio.gather(*(client() for _ in range(connections)))
        elapsed = time.monotonic() - t0
    if refused:
        raise RuntimeError(f"{refused} publishes were refused")
    return {"events": count, "seconds": round(elapsed, 2), "events_per_s": round(count / elapsed),
            "connections": connections, "window": window}


async def nats_publish(payload: bytes, connections: int, window: int, seconds: float) -> dict[str, float]:
    """``publish_async`` with up to ``window`` PubAcks outstanding, per connection."""
    count = 0
    stop = time.monotonic() + seconds

    async def client(subject: str) -> None:
        nonlocal count
        async with P.nats_conn() as nc:
            js = nc.jetstream(timeout=10)
            room = asyncio.Semaphore(window)

            def done(f: asyncio.Future[Any]) -> None:
                nonlocal count
                room.release()
                if not f.cancelled() and f.exception() is None:
                    count += 1

            while time.monotonic() < stop:
                await room.acquire()
                fut = await js.publish_async(subject, payload)
                fut.add_done_callback(done)
            for _ in range(window):
                await room.acquire()

    async with P.nats_conn() as admin, P.js_stream(admin, "spub") as (_, _, subject):  # one stream, as one namespace
        t0 = time.monotonic()
        await asyncio.gather(*(client(subject) for _ in range(connections)))
        elapsed = time.monotonic() - t0
    return {"events": count, "seconds": round(elapsed, 2), "events_per_s": round(count / elapsed),
            "connections": connections, "window": window}


async def tidings_fanout(srv: Server, event: dict[str, Any], subs: int, listeners: int, events: int,
                         window: int, timeout: float) -> dict[str, float]:
    """``subs`` trusted ``stream:`` subscriptions spread over ``listeners`` connections that
    acknowledge every push; one stream connection publishes ``events`` with ``window``."""
    headers = {"Authorization": f"Bearer {srv.token}"}
    ns = event["namespace"]
    delivered = 0
    async with aiohttp.ClientSession(headers=headers) as s:
        await post(s, srv.url, "icrc72_register_publication", json.dumps([{"namespace": ns}]).encode())
        regs = [{"namespace": ns, "endpoint": f"stream:l{i % listeners}"} for i in range(subs)]
        ids = [r["Ok"] for r in json.loads(await post(s, srv.url, "icrc72_register_subscription",
                                                      json.dumps(regs).encode()))]
        socks = [await s.ws_connect(_ws_url(srv), max_msg_size=0) for _ in range(listeners)]

        async def listen(k: int, ws: aiohttp.ClientWebSocketResponse) -> None:
            nonlocal delivered
            mine = ids[k::listeners]
            await ws.send_str(json.dumps({"op": "listen", "ref": 1, "subscriptions": mine}))
            async for msg in ws:
                m = _decode(msg.data)
                if m.op == "push":
                    delivered += len(m.notifications)
                    await ws.send_str(f'{{"op":"ack","push":{m.push}}}')

        readers = [asyncio.create_task(listen(k, ws)) for k, ws in enumerate(socks)]
        await asyncio.sleep(0.2)  # the listens are answered
        expected = subs * events
        template = '{"op":"publish","ref":%d,"event":' + json.dumps(event) + "}"
        t0 = time.monotonic()
        async with s.ws_connect(_ws_url(srv), max_msg_size=0) as pub:
            room = asyncio.Semaphore(window)

            async def answers() -> None:
                async for msg in pub:
                    for _ in _decode(msg.data).refs:
                        room.release()

            got = asyncio.create_task(answers())
            for ref in range(1, events + 1):
                await room.acquire()
                await pub.send_str(template % ref)
            deadline = time.monotonic() + timeout
            while delivered < expected and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            elapsed = time.monotonic() - t0
            await pub.close()
            await got
        for ws in socks:
            await ws.close()
        await asyncio.gather(*readers)
    return {"subscribers": subs, "listeners": listeners, "events": events, "expected": expected,
            "delivered": delivered, "seconds": round(elapsed, 2),
            "notifications_per_s": round(delivered / elapsed), "events_per_s": round(events / elapsed)}


async def tidings_latency(srv: Server, rate: float, seconds: float, warmup: float = 0.0) -> dict[str, float]:
    """Publish -> handler over streams (``paced_stream_publishes``); events published in
    the first ``warmup`` seconds are not counted."""
    from bench.live_plane import timed

    async def paced(n: int, handle: Callable[[EventNotification], None], clock: Callable[[], int]) -> None:
        await paced_stream_publishes(srv, rate, n, handle, clock)

    return await timed(paced, rate, seconds, warmup)


async def paced_stream_publishes(srv: Server, rate: float, n: int, handle: Callable[[EventNotification], None],
                                 clock: Callable[[], int]) -> None:
    """``n`` single-event publishes at ``rate``/s on one SDK ``Stream`` (each answered once
    durable), each carrying ``clock()`` at its call, received by another ``Stream``
    listening to a trusted ``stream:`` subscription whose handler is ``handle``. Returns
    once all were handled, or 10 s after the last publish was answered."""
    from tidings.client import Stream, item_result

    ns, handled = "bench.lat", 0

    def count(note: EventNotification) -> None:
        nonlocal handled
        handle(note)
        handled += 1

    headers = {"Authorization": f"Bearer {srv.token}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        await post(s, srv.url, "icrc72_register_publication", json.dumps([{"namespace": ns}]).encode())
        reg = [{"namespace": ns, "endpoint": "stream:lat"}]
        sub_id = json.loads(await post(s, srv.url, "icrc72_register_subscription", json.dumps(reg).encode()))[0]["Ok"]
    async with Stream(srv.url, srv.token, handler=count) as listener, Stream(srv.url, srv.token) as pub:
        for r in await listener.listen([sub_id]):
            item_result(r)  # raises if the stream may not listen to it
        pending: list[asyncio.Future[Any]] = []
        interval, t_next = 1 / rate, time.perf_counter()
        for _ in range(n):
            t_next += interval
            pending.append(await pub.send(Publisher.event(ns, {"t": clock(), "name": "x" * 24})))
            await asyncio.sleep(max(0.0, t_next - time.perf_counter()))
        for f in pending:
            item_result(await f)  # raises for a refused publish
        deadline = time.monotonic() + 10
        while handled < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
