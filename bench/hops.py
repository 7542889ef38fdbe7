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
rule of ``RULES`` (bench/hops_cpu.py) names (module and function: the code that does the hop;
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
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench._harness import Server
from bench.hops_base import ANSWERED, END, HOPS, SERVER_ENV, fmt_ms, load, pct
from bench.hops_cpu import CLIENT_RULES, RULES, classify, cpu_table, measure_cpu
from tidings.client import EventNotification

__all__ = ["ANSWERED", "CLIENT_RULES", "END", "HOPS", "RULES", "SERVER_ENV", "classify", "measure_latency", "run"]

# -- latency --------------------------------------------------------------------------------

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
            got = d.get(hop)
            cells.append(" / ".join(fmt_ms(pct(got, p)) for p in (0.5, 0.99, 0.999)) if got else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
            asyncio.run(load(srv, rate, seconds, stream, handle))
            records = _flush(srv.proc.pid, folder)
    handled.sort(key=lambda r: r[1])
    handled = handled[len(handled) // 10:]  # the first tenth warms up
    return _join(handled, records), len(records)


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
    return (f"JetStream, same rate and clients' loop: end to end ms p50 / p99 / p99.9 {fmt_ms(r['p50_ms'])} / "
            f"{fmt_ms(r['p99_ms'])} / {fmt_ms(r['p999_ms'])}; CPU per event: nats-server {srv:.3f} ms, "
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
                  + " / ".join(fmt_ms(pct(xs, p)) for p in (0.5, 0.99, 0.999)))
    if peer:
        print(jetstream(rate, seconds))
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in psutil.getloadavg())}")
