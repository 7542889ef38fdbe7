"""The ``cpu`` scenario of ``python -m bench``: server CPU per live event (publish -> push
-> confirm, 1,000 events/s, the hop profile's load) for tidings over HTTP and over the
stream face, beside ``nats-server``'s under JetStream's latency load at the same rate.

tidings' figure is the CPU of every server process (the broker, its threads and its
fronts; psutil, nothing attached: ``bench/hops_cpu.py``); the peer's is ``nats-server``'s
own, found among this host's processes. The ratio (tidings / nats-server) is issue 47's
second target (at most 2)."""

from __future__ import annotations

import asyncio
from typing import Any

from bench._scenario import Row, Settings, _guard

__all__ = ["RATE", "cpu", "stream_cpu"]

RATE = 1000.0
_UNIT = "ms CPU per event"


def _fig(d: dict[str, Any]) -> dict[str, float]:
    if not d.get("events"):
        raise RuntimeError("no event went through")
    return {"server": round(d["server_ms"], 4)}


async def cpu(s: Settings) -> list[Row]:
    return await _rows(s, "cpu", False)


async def stream_cpu(s: Settings) -> list[Row]:
    return await _rows(s, "stream-cpu", True)


async def _rows(s: Settings, name: str, stream: bool) -> list[Row]:
    """tidings' row first (the ratio's numerator), then nats-server's under its load."""
    from bench.hops_cpu import measure_cpu

    timeout = 4 * s.seconds + 90
    face = "/v1/stream on both sides" if stream else "HTTP: icrc72_publish -> SDK Subscriber"

    async def run() -> dict[str, Any]:
        _, totals = await asyncio.to_thread(measure_cpu, RATE, s.seconds, stream, False)
        return {**totals, "server_ms": totals["broker_ms"] + totals["fronts_ms"]}

    return [
        await _guard(name, "tidings", f"{face}, {RATE:,.0f} events/s, broker + fronts", _UNIT, timeout, run, _fig),
        await _guard(name, s.peers["nats"].name, f"js.publish awaiting each ack, a durable push consumer, "
                     f"{RATE:,.0f} events/s, nats-server", _UNIT, timeout, lambda: _nats(s.seconds), _fig,
                     s.peers["nats"]),
    ]


async def _nats(seconds: float) -> dict[str, Any]:
    import psutil

    from bench.peers_latency import nats_latency

    server = next((p for p in psutil.process_iter(["name"]) if p.info["name"] == "nats-server"), None)
    if server is None:
        raise RuntimeError("no nats-server process on this host to measure")
    c0 = server.cpu_times()
    r = await nats_latency(RATE, seconds, 0.1 * seconds)
    c1 = server.cpu_times()
    n = max(1, int(r.get("sent", RATE * seconds)))
    return {"events": n, "server_ms": 1e3 * ((c1.user + c1.system) - (c0.user + c0.system)) / n}

