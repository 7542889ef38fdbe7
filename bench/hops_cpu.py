"""The CPU half of ``bench/hops.py`` (its docstring says how it is measured): which hop
each py-spy sample belongs to (``RULES``), the CPU seconds of each process and thread, and
their split per hop."""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import Server
from bench.hops_base import HOPS, SERVER_ENV, load
from tidings.client import EventNotification

SERVER = "HTTP/WebSocket server"
LOOP = "event loop, socket I/O in C (uvloop)"
RECORDS = "delivery records (after the answer)"
OTHER = "other"
# (substring of the frame's file, function or None for any): the hop. The innermost frame
# a rule names decides.
RULES: list[tuple[str, str | None, str]] = [
    # the fronts' half
    ("tidings/front/app.py", "_prepare", "parse and check"),
    ("tidings/core/ingest.py", None, "parse and check"),
    ("tidings/core/values.py", None, "parse and check"),
    ("tidings/bodies.py", None, SERVER),
    ("tidings/front/app.py", None, "front -> broker"),  # publish, relay, upstream, the WebSocket relay
    ("tidings/api/internal.py", None, "front -> broker"),
    # the broker's
    ("tidings/broker/delivery/_push.py", None, "push"),
    ("tidings/broker/delivery/_push_body.py", None, "push"),
    ("tidings/broker/delivery/_signing.py", None, "push"),
    ("tidings/core/webhooks.py", None, "push"),
    ("tidings/outbound.py", None, "push"),
    ("tidings/api/stream.py", "push", "push"),
    ("tidings/api/stream.py", "_send_raw", "push"),  # its answers' too, a few bytes each
    ("tidings/broker/auth/", None, "auth, rights, schemas"),
    ("tidings/broker/registry/", None, "auth, rights, schemas"),
    ("tidings/schemas/", None, "auth, rights, schemas"),
    ("tidings/store/_sqlite_deliveries.py", None, RECORDS),
    ("tidings/store/", None, "commit"),
    ("tidings/broker/publish/_broadcaster.py", "publish", "parse and check"),
    ("tidings/broker/publish/", None, "auth, rights, schemas"),
    ("tidings/broker/delivery/_direct.py", "_record_confirmed", RECORDS),
    ("tidings/broker/delivery/_behind.py", None, RECORDS),
    ("tidings/broker/delivery/_accounting.py", None, RECORDS),
    ("tidings/broker/delivery/_direct.py", None, "push"),
    ("tidings/broker/delivery/", None, "route"),  # the tail, routing, the workers, confirmations
    ("tidings/broker/service.py", "_appended", "route"),
    ("tidings/broker/service.py", "_logged", "route"),
    ("tidings/api/stream.py", "_read_loop", "parse and check"),
    ("tidings/api/stream.py", "_commit_loop", "auth, rights, schemas"),
    ("tidings/api/", None, "parse and check"),  # the public handlers: decode the request
    ("tidings/http1.py", None, SERVER),
    ("uvicorn/", None, SERVER),
    ("starlette/", None, SERVER),
    ("websockets/", None, SERVER),
    ("h11/", None, SERVER),
    ("httptools/", None, SERVER),
]
BROKER_ONLY: list[tuple[str, str | None, str]] = [("aiohttp/", None, "push")]  # its HTTP client: pushes
# A front's HTTP client and its WebSocket relay (websockets, both ways) exist for the hop
# to the broker: named before every other rule for a front's samples.
FRONT_FIRST: list[tuple[str, str | None, str]] = [("aiohttp/", None, "front -> broker"),
                                                  ("websockets/", None, "front -> broker")]
# The clients' process (this one): the subscriber's side, else the publisher's and the loop.
CLIENT_RULES: list[tuple[str, str | None, str]] = [
    ("bench/hops_cpu.py", "handle", "handler"),
    ("tidings/client/_subscriber.py", None, "handler"),
    ("tidings/client/_stream.py", None, "client -> server"),
    ("uvicorn/", None, "handler"),
    ("httptools/", None, "handler"),
]


def _frame(f: str) -> tuple[str, str]:
    """py-spy's ``function (file:line)``: (file, function)."""
    fn, _, where = f.partition(" (")
    return where.rsplit(":", 1)[0], fn


def classify(frames: list[str], rules: list[tuple[str, str | None, str]], default: str) -> str:
    for f in reversed(frames):
        file, fn = _frame(f)
        for part, func, hop in rules:
            if part in file and (func is None or fn == func):
                return hop
    return default


def _main_thread(frames: list[str]) -> bool:
    """The event loop's thread (the others start in ``threading``: the SQLite writer, the read pool)."""
    return not any("threading.py" in f for f in frames[:3])


def split_samples(raw: Path, broker: int) -> dict[tuple[int, bool], collections.Counter[str]]:
    """Samples per (process, main thread or not), per hop, from py-spy's ``--subprocesses``
    raw output (``process N:"cmd";[process M:"cmd";]frames... count``)."""
    out: dict[tuple[int, bool], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        k = 0
        while k < len(frames) and frames[k].startswith("process "):
            k += 1
        if k == 0:
            continue
        pid = int(frames[k - 1].split()[1].split(":")[0])
        rules = RULES + BROKER_ONLY if pid == broker else FRONT_FIRST + RULES
        fr = frames[k:]
        main = _main_thread(fr)
        hop = classify(fr, rules, LOOP if main and any("Runner.run" in f for f in fr[-1:]) else OTHER)
        out[(pid, main)][hop] += int(n)
    return out


def _cpu_by_thread(pid: int) -> dict[tuple[int, bool], float]:
    """CPU seconds per (process, main thread or not): the broker and its fronts."""
    import psutil

    out: dict[tuple[int, bool], float] = {}
    for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            threads = p.threads()
        except psutil.Error:
            continue
        out[(p.pid, True)] = sum(t.user_time + t.system_time for t in threads if t.id == p.pid)
        out[(p.pid, False)] = sum(t.user_time + t.system_time for t in threads if t.id != p.pid)
    return out


SAMPLE_HZ = 100


def _phase(rate: float, seconds: float, stream: bool, spy: str | None,
           keep: str | None) -> tuple[dict[tuple[int, bool], float], float, int, list[float], Any]:
    """One load on a fresh server without the recorder: CPU seconds per (process, main
    thread or not), the clients' CPU seconds, the events, their end-to-end ms, and with
    ``spy`` the samples per (process, main thread or not) per hop and the clients' per hop."""
    import psutil

    e2e: list[tuple[int, float]] = []

    def handle(n: EventNotification) -> None:
        t = n.data["Map"][0][1]["Nat"]
        e2e.append((t, (time.time_ns() - t) / 1e6))

    with tempfile.TemporaryDirectory(prefix="bench-hops-cpu-") as d, Server(Path(d) / "data", dict(SERVER_ENV)) as srv:
        assert srv.proc is not None
        broker = srv.proc.pid
        time.sleep(1.0)  # the fronts are up
        raw, mine = Path(d) / "server.txt", Path(d) / "clients.txt"
        recs = []
        if spy is not None:
            # 100 Hz, and not the clients' process: at 250 Hz on three processes the sampler
            # took enough of two shared cores to put the load seconds behind.
            base = [spy, "record", "-f", "raw", "-r", str(SAMPLE_HZ), "-d", str(int(seconds) + 3), "--nonblocking"]
            recs.append(subprocess.Popen([*base, "-p", str(broker), "--subprocesses", "-o", str(raw)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.7)  # attached before the load starts
        cpu0, me0 = _cpu_by_thread(broker), psutil.Process().cpu_times()
        asyncio.run(load(srv, rate, seconds, stream, handle))
        cpu1, me1 = _cpu_by_thread(broker), psutil.Process().cpu_times()
        for r in recs:
            r.send_signal(signal.SIGINT)  # py-spy writes what it has
        for r in recs:
            try:
                r.wait(timeout=20)
            except subprocess.TimeoutExpired:
                r.kill()
        if keep:  # the raw samples, for a look at the stacks behind the rules
            for f in (raw, mine):
                if f.exists():
                    shutil.copy(f, Path(keep) / f"{'stream' if stream else 'http'}-{f.name}")
        used = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
        clients = (me1.user + me1.system) - (me0.user + me0.system)
        samples: Any = None
        if spy is not None and raw.exists():
            cc: collections.Counter[str] = collections.Counter()
            if mine.exists():
                for line in mine.read_text().splitlines():
                    stack, _, n = line.rpartition(" ")
                    if stack:
                        cc[classify(stack.split(";")[1:], CLIENT_RULES, "client -> server")] += int(n)
            samples = (split_samples(raw, broker), cc, {p for p, _ in used})
        lat = [ms for _, ms in sorted(e2e)[len(e2e) // 10:]]
        return used, clients, len(e2e), lat, (broker, samples)


def measure_cpu(rate: float, seconds: float, stream: bool, sample: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """ms of CPU per event per hop (server processes), and the totals by process: the CPU
    from a load with nothing attached, split by the shares of py-spy's samples in a second
    load on another fresh server (the sampler slows every process; its run's CPU is not used)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if sample and not Path(spy).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    keep = os.environ.get("BENCH_HOPS_KEEP")
    used, clients, count, lat, (broker, _) = _phase(rate, seconds, stream, None, keep)
    sampled_lat: list[float] = []
    shares: dict[tuple[str, bool], collections.Counter[str]] = {}
    client_shares: collections.Counter[str] = collections.Counter()
    if sample:
        _, _, _, sampled_lat, (b2, got) = _phase(rate, seconds, stream, spy, keep)
        if got is not None:
            by_thread, client_shares, _pids = got
            # The processes of the two servers differ: matched by role (the broker, a front).
            for (p, main), c in by_thread.items():
                shares.setdefault(("broker" if p == b2 else "front", main), collections.Counter()).update(c)
    events = max(1, count)
    per_hop: dict[str, float] = collections.defaultdict(float)
    for (p, main), secs in used.items():
        got_c = shares.get(("broker" if p == broker else "front", main))
        if not got_c:
            per_hop["(not sampled)"] += 1e3 * secs / events
            continue
        n = sum(got_c.values())
        for hop, c in got_c.items():
            per_hop[hop] += 1e3 * secs * c / n / events
    tot = sum(client_shares.values())
    totals = {
        "events": count,
        "broker_ms": 1e3 * sum(v for (p, _), v in used.items() if p == broker) / events,
        "fronts_ms": 1e3 * sum(v for (p, _), v in used.items() if p != broker) / events,
        "writer_ms": 1e3 * used.get((broker, False), 0.0) / events,
        "clients_ms": 1e3 * clients / events,
        "client_hops": {h: 1e3 * clients * c / tot / events for h, c in client_shares.items()} if tot else {},
        "samples": sum(sum(c.values()) for c in shares.values()),
        "end_to_end": lat, "end_to_end_sampled": sampled_lat,
    }
    return dict(per_hop), totals


def cpu_table(per_hop: dict[str, float], totals: dict[str, Any]) -> str:
    lines = ["| hop | server CPU, ms per event | clients' process, ms per event |", "|---|---|---|"]
    ch = totals.get("client_hops", {})
    for hop in (*HOPS, RECORDS, SERVER, LOOP, OTHER, "(not sampled)"):
        if hop in per_hop or hop in ch:
            s = f"{per_hop[hop]:.3f}" if hop in per_hop else "-"
            c = f"{ch[hop]:.3f}" if hop in ch else "-"
            lines.append(f"| {hop} | {s} | {c} |")
    server = totals["broker_ms"] + totals["fronts_ms"]
    lines.append(f"| all | {server:.3f} (broker {totals['broker_ms']:.3f}, of which its other threads "
                 f"{totals['writer_ms']:.3f}; fronts {totals['fronts_ms']:.3f}) | {totals['clients_ms']:.3f} |")
    return "\n".join(lines)


