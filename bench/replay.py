"""Replay throughput (ICRC-77) to one subscriber, from the hot log and from the archive,
and the latency of live events published while it runs.

    .venv/bin/python bench/replay.py [--events 1000000] [--dir /tmp/tidings-bench-replay] [--live-every-ms 20]

Writes a store of ``--events`` events in one namespace (bulk SQL, as bench/archive.py),
starts ``tidings serve`` on it, subscribes an endpoint in this process (aiohttp; it
decodes every push with msgspec) and replays the whole range while a publisher sends one
live event every ``--live-every-ms``. Then stops the server, archives everything into
Parquet (Spark, ``older_than 0``), starts the server again and replays the same range,
now read through Spark by the server (its session start is included and also shown).

Prints events/s of each replay (register to last event received) and the live latency
(publish call to receipt) p50/p99/max during it. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import Server, free_port
from bench.archive import generate

NS = "bench.ns0"


class _Note(msgspec.Struct):
    eventId: int


_decode = msgspec.json.Decoder(list[_Note]).decode


class Endpoint:
    def __init__(self) -> None:
        self.replayed = 0
        self.first_replayed: float | None = None
        self.last_replayed = 0.0
        self.live: dict[int, float] = {}
        self.port = free_port()
        self.done = asyncio.Event()
        self.want = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        notes = _decode(body)
        now = time.monotonic()
        if b"icrc77:replay:id" in body:  # a push holds either live or replayed notifications
            self.replayed += len(notes)
            self.first_replayed = self.first_replayed or now
            self.last_replayed = now
            if self.replayed >= self.want:
                self.done.set()
        else:
            for n in notes:
                self.live[n.eventId] = now
        return web.Response(body=b"null", content_type="application/json")


async def _call(http: aiohttp.ClientSession, url: str, token: str, method: str, arg: Any) -> Any:
    async with http.post(f"{url}/v1/{method}", data=json.dumps(arg), headers={"authorization": f"Bearer {token}"}) as r:
        body = await r.json()
        if r.status != 200:
            raise RuntimeError(f"{method}: {body}")
        return body


async def _live(http: aiohttp.ClientSession, url: str, token: str, every: float, stop: asyncio.Event,
                sent: dict[int, float]) -> None:
    i = 0
    while not stop.is_set():
        t = time.monotonic()
        event = {"namespace": NS, "data": {"Map": [["live", {"Nat": i}]]}}
        (r,) = await _call(http, url, token, "icrc72_publish", [event])
        ok = r["Ok"]
        sent[ok[0] if isinstance(ok, list) else ok] = t
        i += 1
        await asyncio.sleep(every)


def _quantiles(ms: list[float]) -> dict[str, float | None]:
    ms = sorted(ms)
    q = statistics.quantiles(ms, n=100) if len(ms) >= 2 else [float("nan")] * 99
    return {"p50": round(q[49], 2), "p99": round(q[98], 2), "max": round(ms[-1], 2) if ms else None}


async def baseline(server: Server, ep: Endpoint, every: float, seconds: float) -> dict[str, Any]:
    """Live latency with no replay running, for comparison."""
    ep.live.clear()
    sent: dict[int, float] = {}
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        await _call(http, server.url, server.token, "icrc72_register_publication", [{"namespace": NS}])
        await _call(http, server.url, server.token, "icrc72_register_subscription",
                    [{"namespace": NS, "endpoint": f"http://127.0.0.1:{ep.port}/"}])
        live = asyncio.create_task(_live(http, server.url, server.token, every, stop, sent))
        await asyncio.sleep(seconds)
        stop.set()
        await live
        await asyncio.sleep(0.5)
    lat = [(ep.live[i] - t) * 1000 for i, t in sent.items() if i in ep.live]
    return {"source": "no replay (baseline)", "live_events": len(lat),
            **{f"live_latency_ms_{k}": v for k, v in _quantiles(lat).items()}}


async def replay_once(server: Server, ep: Endpoint, events: int, every: float, label: str) -> dict[str, Any]:
    ep.replayed, ep.first_replayed, ep.want = 0, None, events
    ep.done.clear()
    ep.live.clear()
    sent: dict[int, float] = {}
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        subs = await _call(http, server.url, server.token, "icrc72_get_subscriptions", {})
        if not subs:  # the bulk-written publication gets the admin as a publisher, then a subscriber
            await _call(http, server.url, server.token, "icrc72_register_publication", [{"namespace": NS}])
            await _call(http, server.url, server.token, "icrc72_register_subscription",
                        [{"namespace": NS, "endpoint": f"http://127.0.0.1:{ep.port}/"}])
        live = asyncio.create_task(_live(http, server.url, server.token, every, stop, sent))
        t0 = time.monotonic()
        (r,) = await _call(http, server.url, server.token, "icrc77_register_replay",
                           [{"namespace": NS, "range": [1, events + 1]}])
        if "Ok" not in r:
            raise RuntimeError(r)
        await ep.done.wait()
        elapsed = ep.last_replayed - t0
        stop.set()
        await live
        await asyncio.sleep(0.5)
    lat = sorted((ep.live[i] - t) * 1000 for i, t in sent.items() if i in ep.live)
    during = [(ep.live[i] - t) * 1000 for i, t in sent.items() if i in ep.live and t < ep.last_replayed]
    during.sort()
    q = statistics.quantiles(during, n=100) if len(during) >= 2 else [float("nan")] * 99
    return {
        "source": label,
        "events": ep.replayed,
        "seconds": round(elapsed, 1),
        "events_per_s": round(ep.replayed / elapsed),
        "first_event_after_s": round((ep.first_replayed or t0) - t0, 2),
        "steady_events_per_s": round(ep.replayed / max(ep.last_replayed - (ep.first_replayed or t0), 1e-9)),
        "live_events_during": len(during),
        "live_missing": len(sent) - len(lat),
        "live_latency_ms_p50": round(q[49], 2),
        "live_latency_ms_p99": round(q[98], 2),
        "live_latency_ms_max": round(during[-1], 2) if during else None,
    }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    data = args.dir / "var"
    ep = Endpoint()
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/", ep.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", ep.port).start()
    results = []
    every = args.live_every_ms / 1000
    os.environ["TIDINGS_REPLAY_MAX_RANGE"] = str(args.events)
    try:
        with Server(data) as server:
            results.append(await baseline(server, ep, every, args.baseline_s))
            results.append(await replay_once(server, ep, args.events, every, "hot log"))
        if getattr(args, "hot_only", False):
            return results
        from tidings.pipeline.archive import archive

        t = time.monotonic()
        run_ = await asyncio.to_thread(archive, data_dir=data, archive_dir=data / "archive", older_than_s=0)
        print(f"archived {run_.events:,} events in {time.monotonic() - t:.1f} s", file=sys.stderr)
        with Server(data) as server:
            results.append(await replay_once(server, ep, args.events, every, "archive (pyarrow)"))
    finally:
        await runner.cleanup()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--dir", type=Path, default=Path("/tmp/tidings-bench-replay"))
    p.add_argument("--live-every-ms", type=float, default=20.0)
    p.add_argument("--baseline-s", type=float, default=10.0, help="live latency measured first, with no replay")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--hot-only", action="store_true", help="replay from the hot log only (no archive, no Spark)")
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    gen_s = generate(args.dir / "var", args.events, 1)
    print(f"generated {args.events:,} events in {gen_s:.1f} s", file=sys.stderr)
    try:
        results = asyncio.run(run(args))
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps({"cores": os.cpu_count(), "replays": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
