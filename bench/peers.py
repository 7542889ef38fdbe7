"""The peers on this machine, through their Python clients, doing what tidings does.

Every client library is imported inside the function that uses it, so the harness runs
(and reports ``skipped: client not installed``) with only the ``test`` extra. Each
function makes its own stream, queue or table under a name unique to this process and
removes it before returning, whatever happens.

Durability as configured here, for reading the figures: PostgreSQL commits with
``synchronous_commit=on`` (fsync per commit); RabbitMQ confirms a persistent message to a
durable classic queue once it is written (fsync batched); JetStream's file store acks
once the message is written to the OS, without fsync (NATS' default ``sync_interval``);
Redis here runs with ``appendonly no`` and no snapshots, so XADD is held in memory only.
tidings answers once SQLite has committed with ``synchronous=FULL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
NATS_URL = os.environ.get("BENCH_NATS_URL", "nats://127.0.0.1:4222")
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
PG_DSN = os.environ.get("BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")

CONNECT_TIMEOUT = 3.0


class Unavailable(Exception):
    """A peer cannot be used: its client is not installed or its server does not answer."""


def _uniq(tag: str) -> str:
    return f"bench_{os.getpid()}_{tag}_{time.monotonic_ns() % 1_000_000_000}"


@dataclass
class Peer:
    """One peer system: ``probe`` connects once and returns the server's version."""

    key: str
    name: str
    client_dist: str
    probe: Callable[[], Awaitable[str]]
    status: str = "unprobed"
    server_version: str | None = None
    client_version: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    async def check(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            self.client_version = version(self.client_dist)
        except PackageNotFoundError:
            self.client_version = None
        try:
            self.server_version = await asyncio.wait_for(self.probe(), CONNECT_TIMEOUT + 2)
            self.status = "ok"
        except ImportError:
            self.status, self.error = "skipped", f"client not installed (pip install -e '.[bench]': {self.client_dist})"
        except Exception as e:  # any failure to connect: the peer is skipped, never fatal
            why = str(e)[:100] or f"no answer within {CONNECT_TIMEOUT + 2:g} s"
            self.status, self.error = "skipped", f"server unavailable ({type(e).__name__}: {why})"


# -- connections ----------------------------------------------------------------------------


async def _noop_cb(*_: Any) -> None:
    return None


@contextlib.asynccontextmanager
async def nats_conn() -> AsyncIterator[Any]:
    import nats

    nc = await nats.connect(NATS_URL, connect_timeout=CONNECT_TIMEOUT, allow_reconnect=False,
                            max_reconnect_attempts=0, error_cb=_noop_cb, pending_size=64 * 1024 * 1024)
    try:
        yield nc
    finally:
        await nc.close()


@contextlib.asynccontextmanager
async def js_stream(nc: Any, tag: str) -> AsyncIterator[tuple[Any, str, str]]:
    """A JetStream file-storage stream on a subject of its own; deleted on exit."""
    from nats.js.api import StorageType

    js = nc.jetstream(timeout=10)
    name = _uniq(tag).upper()
    subject = f"bench.{name}"
    await js.add_stream(name=name, subjects=[subject], storage=StorageType.FILE)
    try:
        yield js, name, subject
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(name)


@contextlib.asynccontextmanager
async def redis_conn(connections: int = 64) -> AsyncIterator[Any]:
    import redis.asyncio as aioredis

    r = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=CONNECT_TIMEOUT, max_connections=connections)
    try:
        yield r
    finally:
        await r.aclose()


@contextlib.asynccontextmanager
async def amqp_conn() -> AsyncIterator[Any]:
    import aio_pika

    conn = await aio_pika.connect(AMQP_URL, timeout=CONNECT_TIMEOUT)
    try:
        yield conn
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def pg_pool(size: int) -> AsyncIterator[Any]:
    import asyncpg

    pool = await asyncpg.create_pool(PG_DSN, min_size=1, max_size=size, timeout=CONNECT_TIMEOUT)
    try:
        yield pool
    finally:
        await pool.close()


# -- probes ---------------------------------------------------------------------------------


async def _probe_nats() -> str:
    async with nats_conn() as nc:
        await nc.jetstream().account_info()  # JetStream enabled?
        return str(nc._server_info.get("version", "?"))


async def _probe_redis() -> str:
    async with redis_conn() as r:
        info = await r.info("server")
        return str(info.get("redis_version", "?"))


async def _probe_amqp() -> str:
    async with amqp_conn() as conn:
        props = conn.transport.connection.server_properties
        v = props.get("version", "?")
        return v.decode() if isinstance(v, bytes) else str(v)


async def _probe_pg() -> str:
    async with pg_pool(1) as pool:
        return str(await pool.fetchval("show server_version"))


def all_peers() -> dict[str, Peer]:
    return {
        "nats": Peer("nats", "NATS JetStream", "nats-py", _probe_nats),
        "redis": Peer("redis", "Redis Streams", "redis", _probe_redis),
        "rabbitmq": Peer("rabbitmq", "RabbitMQ", "aio-pika", _probe_amqp),
        "postgres": Peer("postgres", "PostgreSQL", "asyncpg", _probe_pg),
    }


# -- publish throughput -----------------------------------------------------------------


async def _drive(clients: int, seconds: float, op: Callable[[int], Awaitable[int]]) -> dict[str, float]:
    """``clients`` concurrent loops of ``op(client_index)`` (returns events stored) for ``seconds``."""
    count = 0
    stop = time.monotonic() + seconds

    async def client(i: int) -> None:
        nonlocal count
        while time.monotonic() < stop:
            n = await op(i)  # not ``count += await op(i)``: that reads ``count`` before the await
            count += n

    t0 = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.monotonic() - t0
    return {"events": count, "seconds": round(elapsed, 2), "events_per_s": round(count / elapsed)}


async def nats_publish(payload: bytes, clients: int, batch: int, seconds: float) -> dict[str, float]:
    """batch 1: ``js.publish`` awaiting each ack; batch > 1: ``publish_async`` of ``batch``
    messages, then await their acks."""
    async with nats_conn() as nc, js_stream(nc, "pub") as (js, _, subject):
        if batch == 1:
            async def op(_: int) -> int:
                await js.publish(subject, payload)
                return 1
        else:
            async def op(_: int) -> int:
                futs = [await js.publish_async(subject, payload) for _ in range(batch)]
                await asyncio.gather(*futs)
                return batch
        return await _drive(clients, seconds, op)


async def redis_publish(payload: bytes, clients: int, batch: int, seconds: float) -> dict[str, float]:
    """batch 1: one XADD per round trip; batch > 1: ``batch`` XADDs pipelined per round trip."""
    async with redis_conn() as r:
        key = _uniq("pub")
        try:
            if batch == 1:
                async def op(_: int) -> int:
                    await r.xadd(key, {"d": payload})
                    return 1
            else:
                async def op(_: int) -> int:
                    pipe = r.pipeline(transaction=False)
                    for _ in range(batch):
                        pipe.xadd(key, {"d": payload})
                    await pipe.execute()
                    return batch
            return await _drive(clients, seconds, op)
        finally:
            await r.delete(key)


async def rabbitmq_publish(payload: bytes, clients: int, batch: int, seconds: float) -> dict[str, float]:
    """Persistent messages to a durable queue, one confirm channel per client; batch 1
    awaits each confirm, batch > 1 publishes ``batch`` at once and awaits their confirms."""
    import aio_pika

    async with amqp_conn() as conn:
        ch0 = await conn.channel()
        qname = _uniq("pub")
        await ch0.declare_queue(qname, durable=True)
        try:
            chans = [await conn.channel(publisher_confirms=True) for _ in range(clients)]
            msg = aio_pika.Message(payload, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)

            async def op(i: int) -> int:
                ex = chans[i].default_exchange
                if batch == 1:
                    await ex.publish(msg, routing_key=qname)
                else:
                    await asyncio.gather(*(ex.publish(msg, routing_key=qname) for _ in range(batch)))
                return batch

            return await _drive(clients, seconds, op)
        finally:
            with contextlib.suppress(Exception):
                await ch0.queue_delete(qname)


async def postgres_publish(payload: bytes, clients: int, batch: int, seconds: float) -> dict[str, float]:
    """Rows of (bigserial, jsonb) in a logged table; batch 1: one INSERT per commit; batch >
    1: ``executemany`` of ``batch`` rows in one committed transaction."""
    async with pg_pool(clients) as pool:
        table = _uniq("pub")
        await pool.execute(f"create table {table} (id bigserial primary key, payload jsonb not null)")
        try:
            text = payload.decode()
            insert = f"insert into {table} (payload) values ($1)"
            rows = [(text,)] * batch

            async def op(_: int) -> int:
                async with pool.acquire() as c:
                    if batch == 1:
                        await c.execute(insert, text)
                    else:
                        async with c.transaction():
                            await c.executemany(insert, rows)
                return batch

            return await _drive(clients, seconds, op)
        finally:
            await pool.execute(f"drop table if exists {table}")


PUBLISH: dict[str, tuple[str, str, Callable[..., Awaitable[dict[str, float]]]]] = {
    # key: (how, with batch=1; how, with batch>1; function)
    "nats": ("publish, await each ack", "publish_async x{b}, await acks", nats_publish),
    "redis": ("XADD, one per round trip", "XADD pipelined by {b}", redis_publish),
    "rabbitmq": ("durable queue, persistent, await each confirm", "durable queue, persistent, {b} confirms in flight",
                 rabbitmq_publish),
    "postgres": ("INSERT, one row per commit", "executemany {b} rows per commit", postgres_publish),
}


# -- fan-out ----------------------------------------------------------------------------


async def _await_count(get: Callable[[], int], expected: int, deadline: float) -> None:
    while get() < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def _fanout_result(subs: int, events: int, delivered: int, elapsed: float) -> dict[str, float]:
    return {"subscribers": subs, "events": events, "expected": subs * events, "delivered": delivered,
            "seconds": round(elapsed, 2), "notifications_per_s": round(delivered / elapsed),
            "events_per_s": round(events / elapsed)}


async def _publish_batches(events: int, publish_batch: Callable[[int], Awaitable[None]]) -> None:
    for i in range(0, events, 100):
        await publish_batch(min(100, events - i))


async def nats_fanout(payload: bytes, subs: int, events: int, timeout: float) -> dict[str, float]:
    """One stream, ``subs`` durable push consumers (explicit ack, each message acked);
    the publisher sends batches of 100 with ``publish_async`` and awaits their acks."""
    from nats.js.api import AckPolicy, ConsumerConfig

    delivered = 0
    async with nats_conn() as nc, js_stream(nc, "fan") as (js, _, subject):
        async def cb(msg: Any) -> None:
            nonlocal delivered
            delivered += 1
            await msg.ack()

        consumers = [
            await js.subscribe(subject, durable=f"c{i}", cb=cb, manual_ack=True,
                               config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=10_000))
            for i in range(subs)
        ]
        try:
            async def batch(n: int) -> None:
                futs = [await js.publish_async(subject, payload) for _ in range(n)]
                await asyncio.gather(*futs)

            t0 = time.monotonic()
            await _publish_batches(events, batch)
            await _await_count(lambda: delivered, subs * events, t0 + timeout)
            elapsed = time.monotonic() - t0
        finally:
            for c in consumers:
                with contextlib.suppress(Exception):
                    await c.unsubscribe()
    return _fanout_result(subs, events, delivered, elapsed)


async def redis_fanout(payload: bytes, subs: int, events: int, timeout: float) -> dict[str, float]:
    """One stream, ``subs`` consumer groups, each read with XREADGROUP COUNT 100 and
    confirmed with one XACK per read; the publisher pipelines XADD by 100."""
    delivered = 0
    async with redis_conn(subs + 16) as r:  # each reader blocks a connection of its own
        key = _uniq("fan")
        try:
            for i in range(subs):
                await r.xgroup_create(key, f"g{i}", id="0", mkstream=True)
            done = asyncio.Event()

            async def consumer(i: int) -> None:
                nonlocal delivered
                g = f"g{i}"
                got = 0
                while got < events and not done.is_set():
                    out = await r.xreadgroup(g, "c", {key: ">"}, count=100, block=200)
                    for _, msgs in out or ():
                        if msgs:
                            await r.xack(key, g, *(m[0] for m in msgs))
                            got += len(msgs)
                            delivered += len(msgs)

            tasks = [asyncio.create_task(consumer(i)) for i in range(subs)]

            async def batch(n: int) -> None:
                pipe = r.pipeline(transaction=False)
                for _ in range(n):
                    pipe.xadd(key, {"d": payload})
                await pipe.execute()

            t0 = time.monotonic()
            try:
                await _publish_batches(events, batch)
                await _await_count(lambda: delivered, subs * events, t0 + timeout)
                elapsed = time.monotonic() - t0
            finally:
                done.set()
                errors = [e for e in await asyncio.gather(*tasks, return_exceptions=True) if e is not None]
            if errors:
                raise errors[0]
        finally:
            await r.delete(key)
    return _fanout_result(subs, events, delivered, elapsed)


async def rabbitmq_fanout(payload: bytes, subs: int, events: int, timeout: float) -> dict[str, float]:
    """A durable fanout exchange bound to ``subs`` durable queues, one consumer each
    (prefetch 100, each message acked); the publisher sends persistent messages with
    confirms, 100 in flight."""
    import aio_pika

    delivered = 0
    async with amqp_conn() as conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=100)
        pub = await conn.channel(publisher_confirms=True)
        name = _uniq("fan")
        ex = await ch.declare_exchange(name, aio_pika.ExchangeType.FANOUT, durable=True)
        queues = []
        try:
            async def on_message(m: Any) -> None:
                nonlocal delivered
                delivered += 1
                await m.ack()

            for i in range(subs):
                q = await ch.declare_queue(f"{name}.{i}", durable=True)
                await q.bind(ex)
                queues.append((q, await q.consume(on_message)))
            pex = await pub.get_exchange(name)
            msg = aio_pika.Message(payload, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)

            async def batch(n: int) -> None:
                await asyncio.gather(*(pex.publish(msg, routing_key="") for _ in range(n)))

            t0 = time.monotonic()
            await _publish_batches(events, batch)
            await _await_count(lambda: delivered, subs * events, t0 + timeout)
            elapsed = time.monotonic() - t0
        finally:
            cleanup = await conn.channel()
            for q, tag in queues:  # cancel first: deleting a consumed queue logs a warning
                with contextlib.suppress(Exception):
                    await q.cancel(tag)
                with contextlib.suppress(Exception):
                    await cleanup.queue_delete(q.name)
            with contextlib.suppress(Exception):
                await cleanup.exchange_delete(name)
    return _fanout_result(subs, events, delivered, elapsed)


FANOUT: dict[str, tuple[str, Callable[..., Awaitable[dict[str, float]]]]] = {
    "nats": ("{n} durable push consumers, ack each", nats_fanout),
    "redis": ("{n} consumer groups, XREADGROUP 100 + XACK", redis_fanout),
    "rabbitmq": ("fanout exchange, {n} durable queues, ack each", rabbitmq_fanout),
}
