"""A live event's latency and CPU, hop by hop (issue 39, point 2): ``python -m bench.profile hops``.

    .venv/bin/python -m bench.profile hops --rate 1000            # HTTP publish -> SDK Subscriber
    .venv/bin/python -m bench.profile hops --rate 1000 --stream   # Stream publish -> Stream handler
    .venv/bin/python -m bench.profile hops --no-sample            # CPU per process only, no py-spy
    .venv/bin/python -m bench.profile hops --jetstream            # and the same load on JetStream after

Three loads, each on a fresh server (``tidings serve``, default ``TIDINGS_WORKERS``: the
broker and a front per further core), each ``--seconds`` of single-event publishes at
``--rate``, every publish its own task, to one trusted subscription (the clients of the
latency scenarios: ``bench.live_plane.paced_publishes``, ``bench.stream.paced_stream_publishes``).

**Latency (server 1, with ``TIDINGS_HOPS_DIR``).** The server records wall-clock stamps
(``time.time_ns``, one clock for every process of the host) in memory, at points it
already has (``tidings/hops.py``): when the publish reached the ASGI app of the process
that took the connection (a front or the broker), when it reached the broker's private
socket (from a front), when the broker took it, began and ended its append, and when a
worker took the batch to push and got its answer. The event carries the publish call's
stamp; its notification carries the broadcaster's ``received`` stamp (the events decoded,
before the ICRC-16 check) and its ``sent`` stamp (the push body made); the handler stamps
itself. Records are joined by event id. The first tenth of the events warms up and is
not counted. Hops (a front's connection | the broker's own):

==========================  =========================================================
client -> server            the publish call -> the first app's ASGI call (the client's
                            request, loopback TCP, the event loop, the HTTP parser)
parse and check             HTTP: that app -> ``received`` (body read, JSON decoded); the
                            stream: the broker's app -> ``received`` (its read loop's
                            decode and check, then the wait for the connection's commit
                            loop, which stores one batch at a time)
front -> broker             HTTP: ``received`` -> the broker's private socket (the
                            front's ICRC-16 check, hash, msgpack; aiohttp over the Unix
                            socket; the broker's HTTP); stream: the front's WebSocket
                            relay to the broker; none for the broker's own connections
auth, rights, schemas       -> the append begins (HTTP through a front: from the
                            private socket; otherwise from ``received``)
commit                      the append: the writer's queue, the insert, the fsync, the
                            event loop seeing it done
route                       the append done -> a worker takes the batch (the tail, the
                            wake-up, the worker's turn on the event loop)
push                        the worker took it -> the body made (``sent``)
handler                     ``sent`` -> the handler (the broker's HTTP client or the
                            stream face, the subscriber's server, the SDK's decoding)
==========================  =========================================================

**CPU (servers 2 and 3, without the recorder: the code path as shipped).** Two more
loads, each on a fresh server. During the first nothing is attached: psutil gives the CPU
seconds of each process's event-loop thread and of its other threads together (the
broker's SQLite writer and read pool), and of this process (the clients: publisher and
subscriber, one figure). During the second, py-spy samples the broker and its fronts
(``--subprocesses``, 100 Hz; idle threads are not sampled, so a sample is a thread on a
core or waiting for one). Each sample's stack goes to a hop by its innermost frame that a
rule of ``RULES`` names (module and function: the code that does the hop;
tests/test_bench_hops.py checks that each still exists). The first load's CPU seconds of each
(role, thread) are split in the proportions of that (role, thread)'s samples in the
second, summed, and divided by the events: ms of CPU per event per hop. Two loads
because the sampler itself takes enough of two shared cores to slow every process;
its run's CPU is not used, only its proportions. Rows that no single hop owns:

* ``HTTP/WebSocket server``: uvicorn, ``tidings.http1``, Starlette and the WebSocket
  protocol, for the clients' connections and, in the broker, for the fronts' private
  socket too (the same frames);
* ``event loop, socket I/O in C (uvloop)``: samples whose innermost Python frame is the
  loop's own run: uvloop's C code, the socket reads and writes of every hop, in kernel
  time mostly;
* ``delivery records``: the record of a confirmed push, after the subscriber answered;
* the SQLite writer thread's C code (the insert, the commit, its fsync's CPU) is
  ``commit``; with delivery records it commits those too, in the same transactions.

Sample proportions on a loaded host favour threads that wait for a core (a sample is
taken of a runnable thread too); read the CPU rows as an estimate within about 10%, the
small ones as an order of magnitude.
"""

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from bench._harness import Server
from bench.live_plane import paced_publishes
from bench.stream import paced_stream_publishes
from tidings.client import EventNotification

HOPS = ("client -> server", "parse and check", "front -> broker", "auth, rights, schemas", "commit", "route", "push",
        "handler")
END = "end to end"
ANSWERED = "push answered (handler -> the broker has the answer)"


# -- latency --------------------------------------------------------------------------------

async def _load(srv: Server, rate: float, seconds: float, stream: bool,
                handle: Callable[[EventNotification], None]) -> None:
    n = max(20, int(rate * seconds))
    if stream:
        await paced_stream_publishes(srv, rate, n, handle, time.time_ns)
    else:
        await paced_publishes(srv, rate, n, handle, time.time_ns)


def _flush(pid: int, folder: Path) -> list[Any]:
    """Every process's records: SIGUSR2 to the broker and its fronts, then their files."""
    import psutil

    procs = [pid] + [p.pid for p in psutil.Process(pid).children(recursive=True)]
    before = set(folder.glob("*.msgpack"))
    for p in procs:
        os.kill(p, signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        new = set(folder.glob("*.msgpack")) - before
        if {f.name.split("-")[1] for f in new} >= {str(p) for p in procs}:
            break
        time.sleep(0.05)
    out: list[Any] = []
    for f in sorted(folder.glob("*.msgpack")):
        out.extend(msgspec.msgpack.decode(f.read_bytes()))
    return out


def _join(handled: list[tuple[int, int, int, int, int]], records: list[Any]) -> dict[str, dict[str, list[float]]]:
    """Per path (``front``, ``broker``), per hop, the ms of each event."""
    first: dict[int, tuple[str, int]] = {}
    internal: dict[int, int] = {}
    pub: dict[int, tuple[int, int, int, int]] = {}
    push: dict[int, tuple[int, int]] = {}
    for r in records:
        if r[0] == "in":
            _, role, i, t0, _t1 = r
            if role == "internal":
                internal[i] = t0
            else:
                first[i] = (role, t0)
        elif r[0] == "pub":
            pub[r[1]] = (r[2], r[3], r[4], r[5])
        elif r[0] == "push":
            for i in r[2]:
                push.setdefault(i, (r[3], r[4]))  # a retry's record comes later
    out: dict[str, dict[str, list[float]]] = {}
    for eid, t_call, received, sent, t_handler in handled:
        if eid not in first or eid not in pub or eid not in push:
            continue
        role, t_in = first[eid]
        t_receive, t_commit, t_committed, _t_end = pub[eid]
        t_push, t_answer = push[eid]
        via_front = role == "front" and eid in internal
        path = "front" if via_front else "broker"
        stamps: dict[str, tuple[int, int]] = {"client -> server": (t_call, t_in)}
        if via_front and received < internal[eid]:  # HTTP: the front parsed
            stamps["parse and check"] = (t_in, received)
            stamps["front -> broker"] = (received, internal[eid])
            stamps["auth, rights, schemas"] = (internal[eid], t_commit)
        elif via_front:  # the stream: the front relays messages, the broker parses
            stamps["front -> broker"] = (t_in, internal[eid])
            stamps["parse and check"] = (internal[eid], received)
            stamps["auth, rights, schemas"] = (received, t_commit)
        else:
            stamps["parse and check"] = (t_in, received)
            stamps["auth, rights, schemas"] = (received, t_commit)
        # A group commit's batch-mate may hand this event to delivery before its own
        # publisher's task resumes: the append then ended, for this event, by its push.
        done = min(t_committed, t_push)
        stamps["commit"] = (t_commit, done)
        stamps["route"] = (done, t_push)
        stamps["push"] = (t_push, sent)
        stamps["handler"] = (sent, t_handler)
        stamps[END] = (t_call, t_handler)
        stamps[ANSWERED] = (t_handler, t_answer)
        d = out.setdefault(path, collections.defaultdict(list))
        for hop, (a, b) in stamps.items():
            d[hop].append((b - a) / 1e6)
        _ = t_receive
    return out


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _fmt(ms: float) -> str:
    return f"{ms:.3f}" if abs(ms) < 1 else f"{ms:.2f}" if abs(ms) < 10 else f"{ms:.1f}"


def latency_table(by_path: dict[str, dict[str, list[float]]]) -> str:
    """Per hop: p50 / p99 / p99.9 (ms) of all events, and of each path with its share."""
    total = sum(len(d[END]) for d in by_path.values())
    every: dict[str, list[float]] = collections.defaultdict(list)
    for d in by_path.values():
        for hop, xs in d.items():
            every[hop].extend(xs)
    paths = [p for p in ("front", "broker") if p in by_path]
    head = ["hop", f"all {total} events"] + [
        f"via {'a front' if p == 'front' else 'the broker'} ({len(by_path[p][END])})" for p in paths]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for hop in (*HOPS, END, ANSWERED):
        cells = [hop]
        for d in (every, *(by_path[p] for p in paths)):
            xs = d.get(hop)
            cells.append(" / ".join(_fmt(_pct(xs, p)) for p in (0.5, 0.99, 0.999)) if xs else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


SERVER_ENV: dict[str, str] = {}
"""More environment for every server of the run (``--server-env K=V``: ``TIDINGS_COMMIT_FSYNC=false``)."""


def measure_latency(rate: float, seconds: float, stream: bool) -> tuple[dict[str, dict[str, list[float]]], int]:
    handled: list[tuple[int, int, int, int, int]] = []

    def handle(n: EventNotification) -> None:
        now = time.time_ns()
        h = dict(n.headers)
        handled.append((n.eventId, n.data["Map"][0][1]["Nat"], h["icrc72:broadcaster:received"]["Nat"],
                        h["icrc72:broadcaster:sent"]["Nat"], now))

    with tempfile.TemporaryDirectory(prefix="bench-hops-") as d:
        folder = Path(d) / "hops"
        folder.mkdir()
        with Server(Path(d) / "data", {**SERVER_ENV, "TIDINGS_HOPS_DIR": str(folder)}) as srv:
            assert srv.proc is not None
            time.sleep(1.0)  # the fronts are up, as in the CPU loads
            asyncio.run(_load(srv, rate, seconds, stream, handle))
            records = _flush(srv.proc.pid, folder)
    handled.sort(key=lambda r: r[1])
    handled = handled[len(handled) // 10:]  # the first tenth warms up
    return _join(handled, records), len(records)


# -- CPU ------------------------------------------------------------------------------------

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
    ("bench/hops.py", "handle", "handler"),
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
        asyncio.run(_load(srv, rate, seconds, stream, handle))
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


def jetstream(rate: float, seconds: float) -> str:
    """The same load on NATS JetStream (the latency scenario's: ``js.publish`` awaiting its
    ack, a durable push consumer), with the CPU per event of ``nats-server`` and of this
    process (psutil): the peer's figures beside tidings', from the same run."""
    import psutil

    from bench.peers_latency import nats_latency

    server = next((p for p in psutil.process_iter(["name"]) if p.info["name"] == "nats-server"), None)
    if server is None:
        return "JetStream: skipped (no nats-server process on this host)"
    me = psutil.Process()
    c0, m0 = server.cpu_times(), me.cpu_times()
    try:
        r = asyncio.run(nats_latency(rate, seconds, 0.1 * seconds))
    except Exception as e:  # the peer is optional, as in python -m bench
        return f"JetStream: skipped ({type(e).__name__}: {e})"
    c1, m1 = server.cpu_times(), me.cpu_times()
    n = max(1, int(r.get("sent", rate * seconds)))
    srv = 1e3 * ((c1.user + c1.system) - (c0.user + c0.system)) / n
    cli = 1e3 * ((m1.user + m1.system) - (m0.user + m0.system)) / n
    return (f"JetStream, same rate and clients' loop: end to end ms p50 / p99 / p99.9 {_fmt(r['p50_ms'])} / "
            f"{_fmt(r['p99_ms'])} / {_fmt(r['p999_ms'])}; CPU per event: nats-server {srv:.3f} ms, "
            f"clients' process {cli:.3f} ms")


def run(rate: float, seconds: float, stream: bool, sample: bool = True, peer: bool = False) -> None:
    import psutil

    face = "stream (/v1/stream both sides)" if stream else "HTTP (icrc72_publish -> SDK Subscriber)"
    if SERVER_ENV:
        face += ", server with " + " ".join(f"{k}={v}" for k, v in SERVER_ENV.items())
    print(f"hops: {face}, {rate:,.0f} events/s for {seconds:g} s, {os.cpu_count()} cores, "
          f"load average {' '.join(f'{x:.2f}' for x in psutil.getloadavg())}")
    by_path, n_records = measure_latency(rate, seconds, stream)
    print(f"\nlatency per hop, ms p50 / p99 / p99.9 (first tenth not counted; {n_records} server records)")
    print(latency_table(by_path))
    per_hop, totals = measure_cpu(rate, seconds, stream, sample)
    how = ("CPU of a load with nothing attached, split by py-spy's samples of a second load" if sample
           else "no sampler: per process only")
    print(f"\nCPU per hop, ms per event ({totals['events']} events; {how}; {totals['samples']} samples)")
    print(cpu_table(per_hop, totals))
    for key, what in (("end_to_end", "no recorder, nothing attached"), ("end_to_end_sampled", "py-spy attached")):
        xs = totals[key]
        if xs:
            print(f"end to end with {what}, ms p50 / p99 / p99.9: "
                  + " / ".join(_fmt(_pct(xs, p)) for p in (0.5, 0.99, 0.999)))
    if peer:
        print(jetstream(rate, seconds))
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in psutil.getloadavg())}")
