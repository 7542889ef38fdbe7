"""Interchain distributor figures: replication throughput across three networks, and
dedup checks per second against Redis, side by side with raw SADD.

    .venv/bin/python bench/interchain.py [--events 2000] [--checks 100000] [--batch 500]

Replication: ``--events`` events are first written to a Redis stream (network R, by
its own publisher, pipelined), then a distributor (in this process, state in Redis) is
started with R, a NATS JetStream stream (J) and a real ``tidings serve`` broker (T). The
figure is events/s from the start until every event is on J and on T: per event one
delivery from R, two republishes, two echoes back (each checked against the sets).

Dedup checks: ``RedisState.mark`` in batches of ``--batch`` (one Lua call per batch:
SMISMEMBER and SADD per set), the same with an outbox enqueue per new id (what
replication does per target), and raw ``SADD`` pipelined the same way with
redis.asyncio (one command per id, the peer). For the two ``mark`` figures the Redis
server's own time per check (``INFO commandstats``, EVALSHA) is reported beside them;
the rest of each check's time is the client's. Figures are printed, never asserted.
Needs Redis on 6379 and NATS JetStream on 4222, and the ``interchain`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import nats
import redis.asyncio as aioredis
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import Server, free_port
from tidings.interchain import Distributor, NetworkContext
from tidings.interchain.adapters import BrokerNetwork, JetStreamNetwork, RedisStreamNetwork
from tidings.interchain.api import make_app
from tidings.interchain.state import Mark, RedisState


def step(what: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def body(i: int, tag: str) -> bytes:
    return json.dumps({
        "eventType": "ProductOffering", "iss": "0xissuer", "entityId": "0x" + f"{i:064x}",
        "previousEntityHash": "0x" + "0" * 64,
        "dataLocation": f"https://market.example/api/v1/entities/urn:{i}?hl={tag}-{i}",
        "relevantMetadata": ["sbx"],
    }).encode()


def broker_count(data_dir: Path) -> int:
    path = data_dir / "tidings.db"
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM events WHERE namespace = 'dlt.events'").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


async def replication(events: int, workdir: Path) -> float:
    tag = uuid.uuid4().hex[:8]
    prefix, stream = f"bench:ied:{tag}:", f"bench:dlt:{tag}"
    js_stream, subject = f"BENCH_DLT_{tag}", f"bench.dlt.{tag}"
    r = aioredis.Redis()
    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    await js.add_stream(name=js_stream, subjects=[subject])
    (workdir / "broker").mkdir()
    try:
        with Server(workdir / "broker") as broker:
            step(f"broker up; writing {events} events to the Redis stream")
            for lo in range(0, events, 500):
                pipe = r.pipeline(transaction=False)
                for i in range(lo, min(events, lo + 500)):
                    pipe.xadd(stream, {"event": body(i, tag)})
                await pipe.execute()
            state = RedisState("redis://127.0.0.1:6379/0", prefix)
            await state.open()
            port = free_port()
            ctx = NetworkContext(public_url=f"http://127.0.0.1:{port}", state=state)
            nets = [RedisStreamNetwork("R", {"stream": stream}, ctx),
                    JetStreamNetwork("J", {"stream": js_stream, "subject": subject}, ctx),
                    BrokerNetwork("T", {"url": broker.url, "token": broker.token}, ctx)]
            for n in nets:
                await n.open()
            d = Distributor(nets, state)
            server = uvicorn.Server(uvicorn.Config(make_app(d), host="127.0.0.1", port=port, log_level="error",
                                                   lifespan="off", timeout_graceful_shutdown=2))
            serving = asyncio.create_task(server.serve())
            while not server.started:
                if serving.done():
                    raise RuntimeError("the distributor's HTTP server did not start")
                await asyncio.sleep(0.01)
            step("replicating")
            t0 = last = time.perf_counter()
            running = asyncio.create_task(d.run())
            while True:
                if running.done():
                    await running  # it failed: say why
                on_j = (await js.stream_info(js_stream)).state.messages
                on_t = broker_count(broker.data_dir)
                if on_j >= events and on_t >= events:
                    break
                if time.perf_counter() - last > 5:
                    last = time.perf_counter()
                    print(f"  ... J {on_j}, T {on_t} of {events}; health {await d.health()}", file=sys.stderr)
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - t0
            step(f"replicated in {elapsed:.1f} s; stopping")
            # The server first, as `tidings distributor serve` stops: a push that comes in
            # while the networks are still followed is answered, not left waiting for a
            # following that has ended (and cancelled with a traceback at shutdown).
            server.should_exit = True
            await serving
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            step("stopped")
            for n in nets:
                await n.close()
            keys = [k async for k in state._r.scan_iter(match=prefix + "*")]
            if keys:
                await state._r.delete(*keys)
            await state.close()
    finally:
        await js.delete_stream(js_stream)
        await nc.close()
        await r.delete(stream)
        await r.aclose()
    return events / elapsed


async def _script_usec(r: Any) -> int:
    """EVALSHA's microseconds so far on the server (INFO commandstats)."""
    stats = await r.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("usec", 0))


async def dedup(checks: int, batch: int) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    state = RedisState("redis://127.0.0.1:6379/0", f"bench:ied:{tag}:")
    await state.open()
    r = aioredis.Redis()
    out: dict[str, float] = {}

    async def timed(name: str, make: Any) -> None:
        usec0 = await _script_usec(r)
        t0 = time.perf_counter()
        for lo in range(0, checks, batch):
            await state.mark(make(lo, min(checks, lo + batch)))
        elapsed = time.perf_counter() - t0
        usec1 = await _script_usec(r)
        out[name] = checks / elapsed
        server = (usec1 - usec0) / checks  # other clients' scripts meanwhile count too: an upper bound
        out[f"{name}: server us/check"] = round(server, 3)
        out[f"{name}: client us/check"] = round(elapsed * 1e6 / checks - server, 3)

    try:
        await timed("RedisState.mark (SADD)",
                    lambda lo, hi: [Mark("publishedEvents:X", f"g{i}") for i in range(lo, hi)])
        await timed("RedisState.mark + enqueue (script)",
                    lambda lo, hi: [Mark("publishedEvents:Y", f"g{i}", "net:Y", b"x") for i in range(lo, hi)])
        key = f"bench:ied:{tag}:raw"
        t0 = time.perf_counter()
        for lo in range(0, checks, batch):
            pipe = r.pipeline(transaction=False)
            for i in range(lo, min(checks, lo + batch)):
                pipe.sadd(key, f"g{i}")
            await pipe.execute()
        out["raw redis.asyncio SADD"] = checks / (time.perf_counter() - t0)
    finally:
        keys: list[Any] = [k async for k in r.scan_iter(match=f"bench:ied:{tag}:*")]
        if keys:
            await r.delete(*keys)
        await r.aclose()
        await state.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--checks", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidings-bench-ied-") as tmp:
        rate = await replication(args.events, Path(tmp))
    print(f"replication R -> J, T (Redis stream, JetStream, tidings broker): {args.events} events, "
          f"{rate:,.0f} events/s")
    for name, value in (await dedup(args.checks, args.batch)).items():
        unit = "" if "us/check" in name else " checks/s"
        print(f"dedup checks, {name:<52} by {args.batch}: {value:>10,.3f}{unit}")


if __name__ == "__main__":
    asyncio.run(main())
