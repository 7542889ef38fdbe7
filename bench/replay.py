"""Replay throughput (ICRC-77) to one subscriber, from the hot log and from the archive,
and the latency of live events to another subscription while it runs, beside the same
live latency with no replay.

    .venv/bin/python bench/replay.py [--events 1000000] [--dir /tmp/tidings-bench-replay] [--live-every-ms 20]

Writes a store of ``--events`` events in one namespace (bulk SQL, as bench/archive.py),
starts ``tidings serve`` on it, subscribes an endpoint in this process (aiohttp; it
decodes every push with msgspec) and replays the whole range while a publisher sends one
live event every ``--live-every-ms`` to another namespace, pushed to another subscription
(its endpoint and the publisher in a process of their own, ``bench/replay_live.py``).
Live latency is measured first with no replay (its first 0.5 s not counted), then with no
replay while every core is held by processes that only spin in the idle scheduling class
(``spinning``: the host's floor for work beside the live path). Then stops
the server, archives everything into Parquet (Spark, ``older_than 0``), starts the
server again, measures live latency again, and replays the same range, now read through
Spark by the server (its session start is included and also shown).

Prints events/s of each replay (register to last event received) and the live latency
(publish call to receipt) p50/p99/max during it. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import Server, free_port
from bench.archive import generate
from bench.replay_live import LiveSide

NS = "bench.ns0"
NS_LIVE = "bench.live"


_SPIN = "import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True:\n    pass\n"
SPINNING = "no replay, every core held by idle-class spinners"
"""The source of the host's floor for a replay beside live traffic (``spinning``)."""


@contextlib.contextmanager
def spinning(n: int) -> Iterator[None]:
    """``n`` processes that do nothing but spin, in the idle scheduling class, as the replay
    process runs: what any CPU-bound work at the lowest priority does to the live path on
    this host, tidings' own work aside. The live p99 measured meanwhile is the floor a
    replay beside live traffic is set against (issue 47: "measure the limit in the same
    run")."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


class _Note(msgspec.Struct):
    eventId: int


_decode = msgspec.json.Decoder(list[_Note]).decode


class Endpoint:
    def __init__(self) -> None:
        self.replayed = 0
        self.first_replayed: float | None = None
        self.last_replayed = 0.0
        self.port = free_port()
        self.live_port = free_port()
        """The live subscription's endpoint, in a process of its own (``replay_live``)."""
        self.done = asyncio.Event()
        self.want = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        notes = _decode(body)
        now = time.monotonic()
        self.replayed += len(notes)
        self.first_replayed = self.first_replayed or now
        self.last_replayed = now
        if self.replayed >= self.want:
            self.done.set()
        return web.Response(body=b"null", content_type="application/json")


async def _call(http: aiohttp.ClientSession, url: str, token: str, method: str, arg: Any) -> Any:
    async with http.post(f"{url}/v1/{method}", data=json.dumps(arg), headers={"authorization": f"Bearer {token}"}) as r:
        body = await r.json()
        if r.status != 200:
            raise RuntimeError(f"{method}: {body}")
        return body


def _quantiles(ms: list[float]) -> dict[str, float | None]:
    ms = sorted(ms)
    q = statistics.quantiles(ms, n=100) if len(ms) >= 2 else [float("nan")] * 99
    return {"p50": round(q[49], 2), "p99": round(q[98], 2), "max": round(ms[-1], 2) if ms else None}


async def _subscribe(http: aiohttp.ClientSession, server: Server, ep: Endpoint) -> None:
    """The replaying subscription and the live one, unless they exist
    (the bulk-written publication gets the admin as a publisher, then a subscriber)."""
    have = {s["namespace"] for s in await _call(http, server.url, server.token, "icrc72_get_subscriptions", {})}
    for ns, port, path in ((NS, ep.port, "/"), (NS_LIVE, ep.live_port, "/live")):
        if ns not in have:
            await _call(http, server.url, server.token, "icrc72_register_publication", [{"namespace": ns}])
            await _call(http, server.url, server.token, "icrc72_register_subscription",
                        [{"namespace": ns, "endpoint": f"http://127.0.0.1:{port}{path}"}])


async def baseline(server: Server, ep: Endpoint, live: LiveSide, every: float, seconds: float) -> dict[str, Any]:
    """Live latency with no replay running, for comparison."""
    async with aiohttp.ClientSession() as http:
        await _subscribe(http, server, ep)
    warm = time.monotonic() + 0.5  # the subscription's worker starting is not counted
    live.start(server.url, server.token, every)
    await asyncio.sleep(0.5)
    cpu0, t0 = _cpu(server), time.monotonic()
    await asyncio.sleep(seconds)
    cpu = {k: round((v - cpu0[k]) / (time.monotonic() - t0), 2) for k, v in _cpu(server).items()}
    times = [(t, r) for t, r in await live.stop() if t >= warm]
    lat = [(r - t) * 1000 for t, r in times if r is not None]
    return {"source": "no replay (baseline)", "live_events": len(lat), "live_missing": len(times) - len(lat),
            **{f"live_latency_ms_{k}": v for k, v in _quantiles(lat).items()}, "cpu_cores_busy": cpu}


async def _spinning(server: Server, ep: Endpoint, live: LiveSide, every: float, seconds: float) -> dict[str, Any]:
    with spinning(os.cpu_count() or 1):
        return {**await baseline(server, ep, live, every, seconds), "source": SPINNING}


def against_baselines(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each replay of ``run``'s results, with the live p99 measured before it on the same
    server alone (``live_latency_ms_p99_without``) and beside the spinners
    (``live_latency_ms_p99_spinning``), and the ratios of its own p99 to them."""
    out, alone, spun = [], None, None
    for r in runs:
        if r["source"] == SPINNING:
            spun = r["live_latency_ms_p99"]
        elif r["source"].startswith("no replay"):
            alone = r["live_latency_ms_p99"]
        else:
            p99 = r["live_latency_ms_p99"]
            out.append({**r, "live_latency_ms_p99_without": alone, "live_latency_ms_p99_spinning": spun,
                        "x_alone": round(p99 / alone, 2) if alone else None,
                        "x_spinning": round(p99 / spun, 2) if spun else None})
    return out


async def replay_once(server: Server, ep: Endpoint, live: LiveSide, events: int, every: float,
                      label: str) -> dict[str, Any]:
    ep.replayed, ep.first_replayed, ep.want = 0, None, events
    ep.done.clear()
    async with aiohttp.ClientSession() as http:
        await _subscribe(http, server, ep)
        live.start(server.url, server.token, every)
        await asyncio.sleep(0.2)  # the live side under way first
        cpu0 = _cpu(server)
        t0 = time.monotonic()
        (r,) = await _call(http, server.url, server.token, "icrc77_register_replay",
                           [{"namespace": NS, "range": [1, events + 1]}])
        if "Ok" not in r:
            raise RuntimeError(r)
        await ep.done.wait()
        elapsed = ep.last_replayed - t0
        cpu = {k: round((v - cpu0[k]) / (time.monotonic() - t0), 2) for k, v in _cpu(server).items()}
        times = await live.stop()
    during = sorted((r - t) * 1000 for t, r in times if r is not None and t0 <= t < ep.last_replayed)
    q = statistics.quantiles(during, n=100) if len(during) >= 2 else [float("nan")] * 99
    return {
        "source": label,
        "events": ep.replayed,
        "seconds": round(elapsed, 1),
        "events_per_s": round(ep.replayed / elapsed),
        "first_event_after_s": round((ep.first_replayed or t0) - t0, 2),
        "steady_events_per_s": round(ep.replayed / max(ep.last_replayed - (ep.first_replayed or t0), 1e-9)),
        "live_events_during": len(during),
        "live_missing": sum(1 for _, r in times if r is None),
        "live_latency_ms_p50": round(q[49], 2),
        "live_latency_ms_p99": round(q[98], 2),
        "live_latency_ms_max": round(during[-1], 2) if during else None,
        "cpu_cores_busy": cpu,
    }


def _cpu(server: Server) -> dict[str, float]:
    """CPU seconds so far of the broker, its fronts, this process (the replay's endpoint),
    and of the whole host (every core, others' work included): where the replay's time went."""
    import psutil

    assert server.proc is not None
    broker = psutil.Process(server.proc.pid)
    host = psutil.cpu_times()
    return {
        "broker": sum(broker.cpu_times()[:2]),
        "fronts": sum(sum(c.cpu_times()[:2]) for c in broker.children(recursive=True)),
        "endpoint": sum(psutil.Process().cpu_times()[:2]),
        "host": host.user + host.system + host.nice,
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
    if getattr(args, "yield_ms", None) is not None:  # the replay policy's setting (docs/replay.md)
        os.environ["TIDINGS_REPLAY_YIELD_MS"] = str(args.yield_ms)
    live = LiveSide(ep.live_port, NS_LIVE).__enter__()
    try:
        with Server(data) as server:
            results.append(await baseline(server, ep, live, every, args.baseline_s))
            results.append(await _spinning(server, ep, live, every, args.baseline_s))
            results.append(await replay_once(server, ep, live, args.events, every, "hot log"))
        if getattr(args, "hot_only", False):
            return results
        from tidings.pipeline.archive import archive

        t = time.monotonic()
        run_ = await asyncio.to_thread(archive, data_dir=data, archive_dir=data / "archive", older_than_s=0)
        print(f"archived {run_.events:,} events in {time.monotonic() - t:.1f} s", file=sys.stderr)
        with Server(data) as server:
            results.append(await baseline(server, ep, live, every, args.baseline_s))
            results.append(await _spinning(server, ep, live, every, args.baseline_s))
            results.append(await replay_once(server, ep, live, args.events, every, "archive (pyarrow)"))
    finally:
        live.__exit__()
        await runner.cleanup()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--dir", type=Path, default=Path("/tmp/tidings-bench-replay"))
    p.add_argument("--live-every-ms", type=float, default=20.0)
    p.add_argument("--baseline-s", type=float, default=10.0, help="live latency measured first, with no replay")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--yield-ms", type=float, default=None,
                   help="TIDINGS_REPLAY_YIELD_MS for the server (0: replays do not yield to live work)")
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
