"""The peers' latency runs (publish -> consumer, paced at a rate), beside tidings'
publish -> SDK handler in the latency scenario; connections and names come from
:mod:`bench.peers`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.peers import _await_count, _uniq, amqp_conn, js_stream, nats_conn, redis_conn


def latency_payload(t_ns: int) -> bytes:
    """About 120 bytes of JSON carrying the publish call's ``perf_counter_ns``."""
    return b'{"namespace":"bench.lat","data":{"Map":[["t",{"Nat":%d}],["name",{"Text":"%s"}]]}}' % (t_ns, b"x" * 24)


def _since(payload: bytes) -> tuple[int, float]:
    """The publish call's time recorded in ``payload``, and the milliseconds from it to now."""
    now = time.perf_counter_ns()
    t = json.loads(payload)["data"]["Map"][0][1]["Nat"]
    return t, (now - t) / 1e6


class _Samples(list[tuple[int, float]]):
    """(publish time, latency) pairs; ``result`` drops those published during the warm-up."""

    def __init__(self, rate: float, seconds: float, warmup: float) -> None:
        super().__init__()
        self.rate, self.n = rate, int(rate * (seconds + warmup))
        self.warmup = warmup
        self.start_ns = 0

    def begin(self) -> None:
        """Call right before the first publish."""
        self.start_ns = time.perf_counter_ns() + int(self.warmup * 1e9)

    def result(self) -> dict[str, Any]:
        from bench.live_plane import percentiles

        lat = [ms for t, ms in self if t >= self.start_ns]
        return {"rate": self.rate, "sent": self.n, "warmup_s": self.warmup, **percentiles(lat)}


async def _paced(rate: float, n: int, publish: Callable[[bytes], Awaitable[Any]]) -> None:
    """``n`` publishes at ``rate``/s, each its own task (a slow one does not delay the next)."""
    interval = 1 / rate
    pending: set[asyncio.Task[Any]] = set()
    t_next = time.perf_counter()
    for _ in range(n):
        t_next += interval
        task = asyncio.create_task(publish(latency_payload(time.perf_counter_ns())))
        pending.add(task)
        task.add_done_callback(pending.discard)
        await asyncio.sleep(max(0.0, t_next - time.perf_counter()))
    await asyncio.gather(*pending)


async def redis_latency(rate: float, seconds: float, warmup: float = 0.0) -> dict[str, Any]:
    """XADD per event at ``rate``; one consumer-group reader (XREADGROUP BLOCK, COUNT 100,
    XACK per read) records the time since the XADD call."""
    lat = _Samples(rate, seconds, warmup)
    n = lat.n
    async with redis_conn() as r:
        key = _uniq("lat")
        try:
            await r.xgroup_create(key, "g", id="$", mkstream=True)
            done = asyncio.Event()

            async def consumer() -> None:
                while not done.is_set():
                    out = await r.xreadgroup("g", "c", {key: ">"}, count=100, block=100)
                    for _, msgs in out or ():
                        for _id, fields in msgs:
                            lat.append(_since(fields[b"d"]))
                        if msgs:
                            await r.xack(key, "g", *(m[0] for m in msgs))

            task = asyncio.create_task(consumer())
            try:
                lat.begin()
                await _paced(rate, n, lambda p: r.xadd(key, {"d": p}))
                await _await_count(lambda: len(lat), n, time.monotonic() + 10)
            finally:
                done.set()
                await task
        finally:
            await r.delete(key)
    return lat.result()


async def nats_latency(rate: float, seconds: float, warmup: float = 0.0) -> dict[str, Any]:
    """``js.publish`` (awaiting the ack) per event at ``rate``; a durable push consumer
    (explicit ack) records the time since the publish call."""
    from nats.js.api import AckPolicy, ConsumerConfig

    lat = _Samples(rate, seconds, warmup)
    n = lat.n
    async with nats_conn() as nc, js_stream(nc, "lat") as (js, _, subject):
        async def cb(msg: Any) -> None:
            lat.append(_since(msg.data))
            await msg.ack()

        sub = await js.subscribe(subject, durable="lat", cb=cb, manual_ack=True,
                                 config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
        try:
            lat.begin()
            await _paced(rate, n, lambda p: js.publish(subject, p))
            await _await_count(lambda: len(lat), n, time.monotonic() + 10)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
    return lat.result()


async def rabbitmq_latency(rate: float, seconds: float, warmup: float = 0.0) -> dict[str, Any]:
    """Persistent messages to a durable queue with publisher confirms at ``rate``; one
    consumer (prefetch 100, ack each) records the time since the publish call."""
    import aio_pika

    lat = _Samples(rate, seconds, warmup)
    n = lat.n
    async with amqp_conn() as conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=100)
        pub = await conn.channel(publisher_confirms=True)
        qname = _uniq("lat")
        q = await ch.declare_queue(qname, durable=True)
        try:
            async def on_message(m: Any) -> None:
                lat.append(_since(m.body))
                await m.ack()

            tag = await q.consume(on_message)

            async def publish(p: bytes) -> None:
                await pub.default_exchange.publish(
                    aio_pika.Message(p, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=qname)

            try:
                lat.begin()
                await _paced(rate, n, publish)
                await _await_count(lambda: len(lat), n, time.monotonic() + 10)
            finally:
                await q.cancel(tag)
        finally:
            with contextlib.suppress(Exception):
                await (await conn.channel()).queue_delete(qname)
    return lat.result()


LATENCY: dict[str, tuple[str, Callable[..., Awaitable[dict[str, Any]]]]] = {
    "redis": ("XADD -> consumer group reader", redis_latency),
    "nats": ("publish (ack) -> durable push consumer", nats_latency),
    "rabbitmq": ("confirmed persistent publish -> consumer", rabbitmq_latency),
}
