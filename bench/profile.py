"""Where the server's time goes: py-spy on a real ``tidings serve`` while a scenario runs.

    .venv/bin/python -m bench.profile publish            # publish-100, 8 clients
    .venv/bin/python -m bench.profile publish --gil      # only who holds the interpreter lock
    .venv/bin/python -m bench.profile publish --keyed    # each event with an idempotency key
    .venv/bin/python -m bench.profile publish-1          # one event per request, 8 clients
    .venv/bin/python -m bench.profile fanout             # 100 endpoints
    .venv/bin/python -m bench.profile stream-publish     # WebSocket, 1 event/message, 2 x 1000 in flight
    .venv/bin/python -m bench.profile stream-fanout      # 100 stream: subscriptions on 4 connections
    .venv/bin/python -m bench.profile publish --workers 1  # the broker alone, no front process
    .venv/bin/python -m bench.profile replay             # hot-log replay of 200,000 events to one endpoint
    .venv/bin/python -m bench.profile split --rate 1000  # a live event's latency, stage by stage
    .venv/bin/python -m bench.profile split --stream     # the same over /v1/stream on both sides
    .venv/bin/python -m bench.profile hops --rate 1000   # p50/p99/p99.9 and CPU per hop (bench/hops.py)
    .venv/bin/python -m bench.profile hops --stream      # the same over /v1/stream on both sides

``publish`` and ``fanout`` print the server's CPU per event or notification (psutil), the
share of samples per thread, and the lines with the most samples of their own. ``split``
needs no py-spy: it cuts publish-to-handler latency at the broadcaster's own timestamps
(the ``icrc72:broadcaster:received`` and ``:sent`` headers of each notification). Bounded
in time; stops what it started. ``hops`` is ``split`` cut finer, with CPU per hop:
client to server, parse and check, front to broker, rights, commit, route, push, handler
(bench/hops.py says how each is measured). BENCHMARKS.md ("Where the time goes now") and the profiles in
docs/benchmarks/history/ were made so.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench._harness import Server
from bench.live_plane import EVENT, paced_publishes, throughput
from bench.stream import paced_stream_publishes
from bench.subscriptions import fanout
from tidings.client import EventNotification
from tidings.pipeline._human import fmt_figure


def _cpu(pid: int) -> dict[str, float]:
    """CPU seconds of the broker, of its front processes together (docs/scaling.md), and
    of this process (the scenario's clients and endpoints)."""
    import psutil

    def used(p: psutil.Process) -> float:
        try:
            t = p.cpu_times()
        except psutil.Error:  # a front that has exited counts for nothing
            return 0.0
        return float(t.user + t.system)

    root = psutil.Process(pid)
    return {
        "broker": used(root),
        "fronts": sum(used(p) for p in root.children(recursive=True)),
        "clients": used(psutil.Process()),
    }


def _split_line(cpu: dict[str, float], count: int, unit: str) -> str:
    """Each process's CPU per ``unit``, and the rate that each alone would allow on a core
    of its own: the broker is one process, the fronts as many as there are cores."""
    parts = []
    for role in ("broker", "fronts", "clients"):
        us = 1e6 * cpu[role] / count
        ceiling = f", {1e6 / us:,.0f}/s per core" if us >= 0.5 else ""  # not for a process that barely took part
        parts.append(f"{role} {us:.1f} µs{ceiling}")
    return f"CPU per {unit}: " + "; ".join(parts) + "\n" + _host_line(cpu, count, unit)


def _host_line(cpu: dict[str, float], count: int, unit: str) -> str:
    """What this host could do at best with these costs: its cores shared by every
    process of the run (the clients and endpoints too), and never faster than the one
    broker process on its one core. The figure a target is compared with (BENCHMARKS.md)."""
    cores = os.cpu_count() or 1
    total = 1e6 * sum(cpu.values()) / count
    broker = 1e6 * cpu["broker"] / count
    if total <= 0 or broker <= 0:
        return f"all processes: too little CPU per {unit} to measure"
    shared, alone = cores * 1e6 / total, 1e6 / broker
    return (f"all processes {total:.1f} µs per {unit}: at best {min(shared, alone):,.0f}/s on this host "
            f"({cores} cores shared: {shared:,.0f}/s; the broker's one core: {alone:,.0f}/s)")


def _report(raw: Path, top: int) -> None:
    """Samples per thread and per line (own samples), from py-spy's raw format."""
    own: collections.Counter[tuple[str, str]] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        total += int(n)
        threads[frames[0]] += int(n)
        own[(frames[0], frames[-1])] += int(n)
    print(f"{total} samples")
    for t, n in threads.most_common():
        print(f"  {100 * n / total:5.1f} %  {t}")
    inclusive: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        for f in set(stack.split(";")[1:]):
            inclusive[f.split(" (")[0]] += int(n)
    print("functions with the most samples, callees included:")
    for f, n in inclusive.most_common(top):
        print(f"  {100 * n / total:5.1f} %  {f}")
    files: collections.Counter[str] = collections.Counter()
    for (_t, f), n in own.items():
        where = f.rpartition("(")[2].rstrip(")").rsplit(":", 1)[0]
        files["/".join(where.split("/")[-2:])] += n
    print("own samples per source file:")
    for f, n in files.most_common(top):
        print(f"  {100 * n / total:5.1f} %  {f}")
    print("lines with the most samples of their own:")
    for (t, f), n in own.most_common(top):
        print(f"  {100 * n / total:5.1f} %  {t.split(':')[-1].strip()[:24]:24}  {f}")


async def _run(what: str, srv: Server, seconds: float) -> tuple[int, str, float]:
    """Count, unit, and the scenario's own rate (fan-out: from the first publish on)."""
    if what in ("publish", "publish-keyed", "publish-1", "publish-1-keyed"):
        batch = 1 if what.startswith("publish-1") else 100
        r = await throughput(srv, 8, batch, seconds, keyed=what.endswith("-keyed"))
        return int(r["events"]), "event", float(r["events_per_s"])
    if what == "stream-publish":
        from bench import stream

        r = await stream.tidings_publish(srv, EVENT, 2, 1000, seconds)
        return int(r["events"]), "event", float(r["events_per_s"])
    if what == "stream-fanout":
        from bench import stream

        r = await stream.tidings_fanout(srv, EVENT, 100, 4, max(1000, int(seconds * 300)), 1000, 120)
        return int(r["delivered"]), "notification", float(r["notifications_per_s"])
    events = max(1000, int(seconds * 800))
    r = await fanout(srv, 100, 1.0, events, data=EVENT["data"])
    return int(r["delivered"]), "notification", float(r["notifications_per_s"])


async def _replay(srv: Server, events: int) -> tuple[int, str, float]:
    from aiohttp import web

    from bench import replay as rp

    ep = rp.Endpoint()
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/", ep.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", ep.port).start()
    try:
        with rp.LiveSide(ep.live_port, rp.NS_LIVE) as live:
            r = await rp.replay_once(srv, ep, live, events, 0.02, "hot log")
    finally:
        await runner.cleanup()
    return int(r["events"]), "event", float(r["events_per_s"])


REPLAY_EVENTS = 200_000


def profile(what: str, seconds: float, gil: bool, top: int, workers: int, sample: bool = True,
            keyed: bool = False, keep: Path | None = None) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if sample and not Path(spy).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    env = {"TIDINGS_WORKERS": str(workers)}
    if what == "replay":
        seconds = 60  # py-spy is stopped when the replay is done
        env["TIDINGS_REPLAY_MAX_RANGE"] = str(REPLAY_EVENTS)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as d, _store(what, Path(d)), Server(Path(d), env) as srv:
        assert srv.proc is not None
        raw = Path(d) / "profile.txt"
        time.sleep(1.0)  # the fronts are up
        # With fronts, samples are per process first ("process N"), then per thread.
        cmd = [spy, "record", "-p", str(srv.proc.pid), "-f", "raw", "-o", str(raw), "--threads", "-r", "200",
               "--subprocesses", "-d", str(int(seconds) + 1)] + (["--gil"] if gil else [])
        # Without sampling, py-spy takes no share of the two cores from the processes measured.
        rec = subprocess.Popen(cmd if sample else ["sleep", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attached before the load starts
        cpu0, t0 = _cpu(srv.proc.pid), time.monotonic()
        if what == "replay":
            count, unit, rate = asyncio.run(_replay(srv, REPLAY_EVENTS))
        else:
            count, unit, rate = asyncio.run(_run(what + ("-keyed" if keyed else ""), srv, seconds))
        cpu1, elapsed = _cpu(srv.proc.pid), time.monotonic() - t0
        if what == "replay" and sample:
            rec.send_signal(signal.SIGINT)  # py-spy writes what it has
        rec.wait(timeout=seconds + 30)
        used = {k: cpu1[k] - cpu0[k] for k in cpu1}
        server = used["broker"] + used["fronts"]
        print(f"{what}: {count:,} {unit}s, {rate:,.0f}/s; server CPU {100 * server / elapsed:.0f} % "
              f"over the {elapsed:.1f} s (setup included), {1e6 * server / count:.1f} µs per {unit}")
        print(_split_line(used, count, unit))
        if sample and raw.exists():
            _report(raw, top)
            if keep is not None:
                shutil.copyfile(raw, keep)


@contextlib.contextmanager
def _store(what: str, data: Path) -> Iterator[None]:
    """The replay's events, written before the server starts (bench/archive.py)."""
    if what == "replay":
        from bench.archive import generate

        generate(data, REPLAY_EVENTS, 1)
    yield


async def split(srv: Server, rate: float, seconds: float, stream: bool = False) -> None:
    """Latency stages of single-event publishes at ``rate``/s, from the notification headers;
    HTTP publishes to the SDK ``Subscriber``, or with ``stream`` a ``Stream`` to a ``Stream``."""
    rows: list[tuple[int, int, int, int]] = []

    def handle(n: EventNotification) -> None:
        now = time.time_ns()
        h = dict(n.headers)
        rows.append((n.data["Map"][0][1]["Nat"], h["icrc72:broadcaster:received"]["Nat"],
                     h["icrc72:broadcaster:sent"]["Nat"], now))

    # The wall clock in each body, to compare with the server's own stamps.
    if stream:
        await paced_stream_publishes(srv, rate, int(rate * seconds), handle, time.time_ns)
    else:
        await paced_publishes(srv, rate, int(rate * seconds), handle, time.time_ns)
    rows = rows[len(rows) // 10 :]  # the first tenth warms up

    def pct(xs: list[float]) -> str:
        xs = sorted(xs)
        return " / ".join(f"{xs[min(len(xs) - 1, int(p * len(xs)))]:.2f}" for p in (0.5, 0.9, 0.99))

    print(f"{len(rows)} events at {fmt_figure(rate)}/s; ms p50 / p90 / p99")
    print(f"  publish call -> broadcaster received  {pct([(r - t) / 1e6 for t, r, _, _ in rows])}")
    print(f"  received -> push sent (commit, route)  {pct([(s_ - r) / 1e6 for _, r, s_, _ in rows])}")
    print(f"  push sent -> subscriber handler       {pct([(h - s_) / 1e6 for _, _, s_, h in rows])}")
    print(f"  end to end                            {pct([(h - t) / 1e6 for t, _, _, h in rows])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["publish", "publish-1", "fanout", "stream-publish", "stream-fanout", "replay",
                                     "split", "hops"])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--gil", action="store_true", help="sample only the thread holding the GIL")
    ap.add_argument("--keyed", action="store_true", help="publish: each event with an idempotency key")
    ap.add_argument("--raw", type=Path, default=None, help="keep py-spy's raw samples in this file")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--rate", type=float, default=1000.0, help="split, hops: events per second")
    ap.add_argument("--stream", action="store_true", help="split, hops: publish and receive over /v1/stream")
    ap.add_argument("--workers", type=int, default=0, help="TIDINGS_WORKERS of the server (0: one per core)")
    ap.add_argument("--cpu-only", "--no-sample", action="store_true",
                    help="no py-spy: only each process's CPU per event")
    ap.add_argument("--server-env", action="append", default=[], metavar="K=V",
                    help="hops: more environment for the server (TIDINGS_COMMIT_FSYNC=false)")
    ap.add_argument("--jetstream", action="store_true", help="hops: the same load on NATS JetStream, with its CPU")
    a = ap.parse_args()
    if a.what == "hops":
        from bench import hops

        hops.SERVER_ENV.update(kv.split("=", 1) for kv in a.server_env)
        hops.run(a.rate, a.seconds, a.stream, sample=not a.cpu_only, peer=a.jetstream)
    elif a.what == "split":
        with tempfile.TemporaryDirectory(prefix="bench-profile-") as d, Server(Path(d)) as srv:
            asyncio.run(split(srv, a.rate, a.seconds, a.stream))
    else:
        profile(a.what, a.seconds, a.gil, a.top, a.workers, sample=not a.cpu_only, keyed=a.keyed, keep=a.raw)


if __name__ == "__main__":
    main()
