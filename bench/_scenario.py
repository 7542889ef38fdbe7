"""What every scenario of ``python -m bench`` shares: the run's :class:`Settings`, the
:class:`Row` a system's run gives, and :func:`_guard`, which runs one system bounded and
turns a failure or a missing peer into a row that says so.

The scenario modules (``bench.suite`` and the ones it gathers: ``bench.cluster``,
``bench.memory``, ``bench.stream_scenarios``, ``bench.tracing_cost``, and
``bench.floor``) import this; it imports none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import peers as P
from bench.payloads import FANOUT_SUBS, LATENCY_WARMUP, PAYLOAD
from tidings.pipeline._human import fmt_figure

__all__ = ["Row", "Settings", "fanout_peer_row", "fanout_times", "log", "mark_incomplete", "notifications_figure"]


@dataclass
class Settings:
    quick: bool
    seconds: float
    clients: int
    rate: float | None
    fanout_events: int
    memory_events: int
    memory_subs: int
    peers: dict[str, P.Peer]
    # filled in while running: tidings' single-event publish rate, for the latency rate
    tidings_max_single: float | None = None

    def as_json(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "peers"}
        d["payload_bytes"] = len(PAYLOAD)
        d["fanout_subscribers"] = FANOUT_SUBS
        d["latency_warmup_s"] = LATENCY_WARMUP
        return d


@dataclass
class Row:
    scenario: str
    system: str
    how: str
    unit: str
    figures: dict[str, float] = field(default_factory=dict)
    """The figure(s) the table shows, e.g. ``{"events/s": 1234}`` or p50/p99/p99.9."""
    ratios: dict[str, float] = field(default_factory=dict)
    """tidings / this row, per figure (filled in for peer rows)."""
    skipped: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _guard(scenario: str, system: str, how: str, unit: str, timeout: float,
                 run: Callable[[], Awaitable[dict[str, Any]]],
                 figures: Callable[[dict[str, Any]], dict[str, float]], peer: P.Peer | None = None) -> Row:
    row = Row(scenario, system, how, unit)
    if peer is not None and not peer.ok:
        row.skipped = peer.error or peer.status
        log(f"  [{scenario}] {system}: skipped: {row.skipped}")
        return row
    t0 = time.monotonic()
    try:
        row.details = await asyncio.wait_for(run(), timeout)
        row.figures = figures(row.details)
    except ImportError as e:
        row.skipped = f"client not installed ({e.name})"
    except Exception as e:  # a failing system is reported in its row, never fatal
        row.skipped = f"failed: {type(e).__name__}: {str(e)[:160]}"
    shown = row.skipped or ", ".join(f"{k} {fmt_figure(v)}" for k, v in row.figures.items())
    log(f"  [{scenario}] {system} ({how}): {shown}  [{time.monotonic() - t0:.1f} s]")
    return row


@contextlib.asynccontextmanager
async def _pg_store() -> AsyncIterator[dict[str, str]]:
    """The environment of a server on a PostgreSQL database made for one run, dropped after."""
    import asyncpg

    name = f"bench_tidings_{os.getpid()}_{time.monotonic_ns()}"
    conn = await asyncpg.connect(P.PG_DSN, timeout=P.CONNECT_TIMEOUT)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        try:
            yield {"TIDINGS_STORE": f"{P.PG_DSN.rsplit('/', 1)[0]}/{name}"}
        finally:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


# -- what the fan-out and latency scenarios share ---------------------------------------


async def fanout_peer_row(s: Settings, name: str, key: str, deadline: float, timeout: float) -> Row:
    """A peer's row of a fan-out scenario: ``FANOUT_SUBS`` consumers, ``s.fanout_events`` events."""
    how, fn = P.FANOUT[key]
    peer = s.peers[key]

    async def run() -> dict[str, Any]:
        return await fn(PAYLOAD, FANOUT_SUBS, s.fanout_events, deadline)

    return await _guard(name, peer.name, how.format(n=FANOUT_SUBS), "notifications/s", timeout, run,
                        notifications_figure, peer)


def notifications_figure(d: dict[str, Any]) -> dict[str, float]:
    return {"notifications/s": d["notifications_per_s"]}


def fanout_times(s: Settings) -> tuple[float, float]:
    """The fan-out scenarios' delivery deadline, and their timeout."""
    deadline = max(20.0, 6 * s.seconds)
    return deadline, deadline + 60


def mark_incomplete(rows: list[Row]) -> list[Row]:
    """Flag the rows whose run ended before every notification was delivered."""
    for r in rows:
        if r.details and r.details.get("delivered", 0) < r.details.get("expected", 0):
            r.details["incomplete"] = True
    return rows


def _lat_fig(d: dict[str, Any]) -> dict[str, float]:
    if not d.get("received"):
        raise RuntimeError("nothing received")
    return {"p50": d["p50_ms"], "p99": d["p99_ms"], "p99.9": d["p999_ms"]}
