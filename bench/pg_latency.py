"""Publishing on PostgreSQL a network away: what the database's round trips cost a member.

One ``tidings serve`` on a PostgreSQL database reached through a TCP proxy that adds a
delay each way to every chunk (``bench.chaos._proxy``, latency, not a bandwidth cap), run
in a process of its own so that its work does not share the clients' interpreter. Per
delay (0, 1 and 5 ms each way by default): ``--clients`` publishers posting one event per
request for ``--seconds`` (events/s, and the p50/p99 of a request), then the same with
100 events per request; and the database round trips the member began per request
(counted by the proxy, the member's background work included).

The issue's targets (issue 47, point 5), with ``rtt`` = 2 x the delay: one event per
request at 5 ms ≥ clients / (2 rtt) events/s, its p50 ≤ the no-delay p50 + 1.5 rtt; 100 events
per request at 1 ms ≥ 80 % of the no-delay figure.

With ``--forwarding``, the same one-event rows through a second member that forwards each
batch to the namespace's owner, the owner reached through another such proxy (its
``TIDINGS_ADVERTISE_URL``), both members a delay away from the database: the member
round trips and the database round trips per request.

Run: ``.venv/bin/python -m bench.pg_latency [--delays 0,1,5] [--seconds 5] [--clients 8] [--forwarding]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._harness import Server, post
from bench._scenario import _pg_store
from bench.live_plane import EVENT


def _run_proxy(delay_s: float, port_out: Any, turns: Any, stop: Any, target: int = 5432) -> None:
    from bench.chaos._proxy import Proxy

    async def main() -> None:
        proxy = await Proxy(target, delay_s=delay_s).start()
        port_out.put(proxy.port)
        while not stop.is_set():
            turns.value = proxy.turns
            await asyncio.sleep(0.05)
        await proxy.close()

    asyncio.run(main())


class ProxyProcess:
    """The latency proxy to 127.0.0.1:``target`` (PostgreSQL's by default) in a child
    process; ``turns()`` reads its count."""

    def __init__(self, delay_s: float, target: int = 5432) -> None:
        ctx = mp.get_context("spawn")
        self._port: Any = ctx.Queue()
        self._turns: Any = ctx.Value("q", 0)
        self._stop: Any = ctx.Event()
        self._proc = ctx.Process(target=_run_proxy, args=(delay_s, self._port, self._turns, self._stop, target),
                                 daemon=True)

    def __enter__(self) -> ProxyProcess:
        self._proc.start()
        self.port = int(self._port.get(timeout=30))
        return self

    def turns(self) -> int:
        time.sleep(0.12)  # the child publishes its count every 50 ms
        return int(self._turns.value)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()


async def publish_run(srv: Server, clients: int, batch: int, seconds: float,
                      namespace: str = "bench.tp") -> dict[str, Any]:
    """``clients`` publishers, ``batch`` events per request, for ``seconds``: events/s and
    the requests' latencies."""
    headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"}
    body = json.dumps([{**EVENT, "namespace": namespace}] * batch).encode()
    lat: list[float] = []
    count = 0
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=clients)) as s:
        await post(s, srv.url, "icrc72_register_publication", json.dumps([{"namespace": namespace}]).encode())
        for _ in range(3):  # warm: the token, the publication, the pool's connections
            await post(s, srv.url, "icrc72_publish", body)
        stop = time.monotonic() + seconds

        async def client() -> None:
            nonlocal count
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                out = json.loads(await post(s, srv.url, "icrc72_publish", body))
                lat.append(time.perf_counter() - t0)
                count += sum(1 for r in out if r and "Ok" in r)

        t0 = time.monotonic()
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.monotonic() - t0
    lat.sort()
    return {
        "events_per_s": round(count / elapsed), "requests": len(lat),
        "p50_ms": round(statistics.median(lat) * 1000, 2), "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2),
    }


async def one_delay(delay_ms: float, clients: int, seconds: float, batch: int) -> dict[str, Any]:
    out: dict[str, Any] = {"delay_ms": delay_ms}
    async with _pg_store() as env:
        with ProxyProcess(delay_ms / 1000) as proxy, tempfile.TemporaryDirectory() as d:
            dsn = env["TIDINGS_STORE"].replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
            with Server(Path(d), {**env, "TIDINGS_STORE": dsn}) as srv:
                for name, b in (("one", 1), (f"batch{batch}", batch))[: 2 if batch > 1 else 1]:
                    before = proxy.turns()
                    r = await publish_run(srv, clients, b, seconds)
                    r["db_round_trips_per_request"] = round((proxy.turns() - before) / max(1, r["requests"] + 3), 2)
                    out[name] = r
    return out


async def _owned_by(srv: Server, broadcaster: str) -> str:
    """A namespace whose publication ``broadcaster`` owns, registered through ``srv``."""
    from tidings.client import Admin

    deadline = time.monotonic() + 30
    headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"}
    async with Admin(srv.url, srv.token) as admin, aiohttp.ClientSession(headers=headers) as s:
        while time.monotonic() < deadline:  # until both members see each other
            for i in range(32):
                ns = f"bench.fw{i}"
                await post(s, srv.url, "icrc72_register_publication", json.dumps([{"namespace": ns}]).encode())
                for b in await admin.get_publication_broadcasters(ns):
                    if dict(b.stats)["tidings:broadcaster:role"] == {"Text": "owner"} and b.broadcaster == broadcaster:
                        return ns
            await asyncio.sleep(0.5)
    raise RuntimeError(f"no namespace owned by {broadcaster}")


async def one_forwarding(delay_ms: float, clients: int, seconds: float) -> dict[str, Any]:
    """Two members on one database, each a ``delay_ms`` away from it, and from each other:
    one event per request published to the member that does not own the namespace, which
    forwards each batch to the owner (docs/scaling.md, "Publishing to the owner")."""
    delay = delay_ms / 1000
    async with _pg_store() as env:
        with ProxyProcess(delay) as db, tempfile.TemporaryDirectory() as d:
            address = env["TIDINGS_STORE"].replace("127.0.0.1:5432", f"127.0.0.1:{db.port}")
            store = {**env, "TIDINGS_WORKERS": "1", "TIDINGS_STORE": address}
            (Path(d) / "a").mkdir()
            owner = Server(Path(d) / "b", {**store, "TIDINGS_BROADCASTER_ID": "b"})
            with ProxyProcess(delay, target=owner.port) as hop:
                assert owner.env is not None
                owner.env["TIDINGS_ADVERTISE_URL"] = f"http://127.0.0.1:{hop.port}"  # its peers reach it so
                with owner:
                    shutil.copy(Path(d) / "b" / "admin.token", Path(d) / "a" / "admin.token")
                    with Server(Path(d) / "a", {**store, "TIDINGS_BROADCASTER_ID": "a"}) as given:
                        ns = await _owned_by(given, "b")
                        db0, hop0 = db.turns(), hop.turns()
                        r = await publish_run(given, clients, 1, seconds, namespace=ns)
                        n = max(1, r["requests"] + 3)
                        r["db_round_trips_per_request"] = round((db.turns() - db0) / n, 2)
                        r["member_round_trips_per_request"] = round((hop.turns() - hop0) / n, 2)
    return {"delay_ms": delay_ms, "forwarded": r}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delays", default="0,1,5", help="ms each way, comma-separated")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch", type=int, default=100, help="events per request of the second row (1: no such row)")
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--forwarding", action="store_true",
                    help="also: one event per request to a member that forwards to the owner")
    a = ap.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f}; {a.clients} clients, {a.seconds:g} s per row")
    rows = []
    many_key = f"batch{a.batch}"
    none = {"events_per_s": 0, "p50_ms": 0, "db_round_trips_per_request": 0}
    for d in (float(x) for x in a.delays.split(",")):
        r = asyncio.run(one_delay(d, a.clients, a.seconds, a.batch))
        rows.append(r)
        one, many = r["one"], r.get(many_key, none)
        print(f"{d:g} ms each way: one event/request {one['events_per_s']} events/s, p50 {one['p50_ms']} ms, "
              f"p99 {one['p99_ms']} ms, {one['db_round_trips_per_request']} db round trips/request | "
              f"{a.batch} events/request {many['events_per_s']} events/s, p50 {many['p50_ms']} ms, "
              f"{many['db_round_trips_per_request']} db round trips/request", flush=True)
    base = rows[0] if rows and rows[0]["delay_ms"] == 0 else None
    for r in rows:
        d = r["delay_ms"]
        if base is None or d == 0:
            continue
        rtt = 2 * d
        one, many = r["one"], r.get(many_key, none)
        over = one["p50_ms"] - base["one"]["p50_ms"]
        batched = many["events_per_s"] / max(1, base.get(many_key, none)["events_per_s"])
        print(f"{d:g} ms: one-event {one['events_per_s']} vs target {a.clients / (2 * rtt / 1000):.0f} events/s; "
              f"p50 over no-delay {over:.1f} ms = {over / rtt:.2f} rtt (target ≤ 1.5); "
              f"batched {batched:.0%} of no-delay")
    forwarded = []
    for d in (float(x) for x in a.delays.split(",")) if a.forwarding else ():
        f = asyncio.run(one_forwarding(d, a.clients, a.seconds))
        forwarded.append(f)
        r = f["forwarded"]
        print(f"{d:g} ms each way, forwarded to the owner: one event/request {r['events_per_s']} events/s, "
              f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, {r['db_round_trips_per_request']} db and "
              f"{r['member_round_trips_per_request']} member round trips/request", flush=True)
    if forwarded and forwarded[0]["delay_ms"] == 0:
        base = forwarded[0]["forwarded"]["p50_ms"]
        for f in forwarded[1:]:
            rtt = 2 * f["delay_ms"]
            over = f["forwarded"]["p50_ms"] - base
            print(f"{f['delay_ms']:g} ms, forwarded: p50 over no-delay {over:.1f} ms = {over / rtt:.2f} rtt "
                  "(the member's hop and the owner's commit: 2 at best)")
    if a.json:
        Path(a.json).write_text(json.dumps({"load": os.getloadavg(), "rows": rows, "forwarded": forwarded}, indent=1))


if __name__ == "__main__":
    main()
