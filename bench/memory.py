"""The memory scenario: server memory (all its processes) with many stored events and
stopped subscriptions, after loading and after a restart (``python -m bench --only memory``)."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import Server
from bench._scenario import Row, Settings, _guard
from bench.payloads import EVENT


async def _populate(srv: Server, events: int, subs: int, clients: int, deadline: float) -> dict[str, Any]:
    """``events`` events in calls of 1,000 (``clients`` concurrent), then ``subs`` stopped
    subscriptions in calls of 500 pointing at a closed port (nothing is pushed). Events
    first: every stored event is then already there when the subscriptions are, and the
    load is not slowed by the per-event work that registered subscriptions cost."""
    import aiohttp

    from bench._harness import free_port, post

    headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"}
    closed = free_port()  # nothing listens there; the subscriptions are stopped anyway
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=clients)) as s:
        await post(s, srv.url, "icrc72_register_publication", b'[{"namespace":"bench.mem"}]')
        event = dict(EVENT, namespace="bench.mem")
        stored = claimed = 0
        t0 = time.monotonic()

        async def client() -> None:
            nonlocal stored, claimed
            while claimed < events and time.monotonic() < deadline:
                n = min(1000, events - claimed)
                claimed += n
                out = json.loads(await post(s, srv.url, "icrc72_publish", json.dumps([event] * n).encode()))
                ok = sum(1 for r in out if r and "Ok" in r)
                stored += ok
                claimed -= n - ok
                if ok < n:
                    await asyncio.sleep(0.05)  # Busy: let the writer catch up

        await asyncio.gather(*(client() for _ in range(clients)))
        load_s = time.monotonic() - t0
        t0 = time.monotonic()
        made = 0
        for i in range(0, subs, 500):
            if time.monotonic() > deadline:
                break
            regs = [{"namespace": "bench.mem", "endpoint": f"http://127.0.0.1:{closed}/s{j}", "stopped": True}
                    for j in range(i, min(i + 500, subs))]
            out = json.loads(await post(s, srv.url, "icrc72_register_subscription", json.dumps(regs).encode()))
            made += sum(1 for r in out if r and "Ok" in r)
        subs_s = time.monotonic() - t0
    return {"events": stored, "load_seconds": round(load_s, 2), "load_events_per_s": round(stored / load_s),
            "subscriptions": made, "subscribe_seconds": round(subs_s, 2)}


async def _steady_rss(pid: int, settle: float) -> int:
    """RSS once two samples 0.5 s apart differ by under 1% (at most ``settle`` seconds)."""
    from bench._harness import rss_bytes

    prev = rss_bytes(pid)
    end = time.monotonic() + settle
    while time.monotonic() < end:
        await asyncio.sleep(0.5)
        cur = rss_bytes(pid)
        if abs(cur - prev) < 0.01 * prev:
            return cur
        prev = cur
    return prev


def _breakdown(pid: int) -> dict[str, Any]:
    """Per process (the broker first), RSS and PSS in MB; and the PSS total, which counts a
    page shared by the broker and its fronts once."""
    from bench._harness import memory_of

    rss, pss = memory_of(pid, "rss"), memory_of(pid, "pss")
    return {"rss_per_process_mb": [round(v / 2**20, 1) for v in rss.values()],
            "pss_per_process_mb": [round(v / 2**20, 1) for v in pss.values()],
            "pss_restarted_mb": round(sum(pss.values()) / 2**20, 1)}


async def scenario(s: Settings) -> list[Row]:
    name, unit = "memory", "MB"

    async def run() -> dict[str, Any]:
        import psutil  # noqa: F401  (the row says "client not installed" without it)

        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d:
            with Server(Path(d)) as srv:
                loaded = await _populate(srv, s.memory_events, s.memory_subs, s.clients,
                                         time.monotonic() + (120 if s.quick else 600))
                assert srv.proc is not None
                loaded["rss_loaded_mb"] = round(await _steady_rss(srv.proc.pid, 5) / 2**20, 1)
            loaded["store_mb"] = round(sum(f.stat().st_size for f in Path(d).glob("tidings.db*")) / 2**20, 1)
            t0 = time.monotonic()
            with Server(Path(d)) as srv:
                loaded["restart_seconds"] = round(time.monotonic() - t0, 2)
                assert srv.proc is not None
                loaded["rss_restarted_mb"] = round(await _steady_rss(srv.proc.pid, 10) / 2**20, 1)
                loaded.update(_breakdown(srv.proc.pid))
            return loaded

    row = await _guard(name, "tidings", f"{s.memory_events:,} events, {s.memory_subs:,} stopped subscriptions",
                       unit, 1200, run,
                       lambda d: {"RSS after restart": d["rss_restarted_mb"],
                                  "RSS after loading": d["rss_loaded_mb"],
                                  "PSS after restart": d["pss_restarted_mb"]})
    return [row]
