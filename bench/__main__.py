"""Run every benchmark scenario, tidings and its peers side by side, in one invocation.

    .venv/bin/python -m bench                 # full run (a few minutes)
    .venv/bin/python -m bench --quick         # smoke run, a second or two per scenario (CI)
    .venv/bin/python -m bench --only publish-100,latency --seconds 3

Prints one table (scenario, system, figure, unit, ratio tidings/peer) and writes JSON
with the machine, the versions and the settings (default ``bench/results/latest.json``).
The peers are the servers on this machine (Redis, NATS JetStream, RabbitMQ, PostgreSQL on
their default loopback ports; ``BENCH_REDIS_URL``, ``BENCH_NATS_URL``, ``BENCH_AMQP_URL``,
``BENCH_PG_DSN`` override) through their Python clients (the ``bench`` extra); a peer that
is not there is reported as skipped. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from bench import peers as P
from bench._scenario import Row, Settings, log
from bench.floor import with_floor_ratios
from bench.floor_durable import floor_scenario
from bench.suite import SCENARIOS as _SUITE
from tidings.pipeline._human import fmt_figure

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "bench" / "results" / "latest.json"
ALIASES = {"publish": ["publish-1", "publish-100"]}
# The floor first: every later latency and one-event figure is also shown against it.
SCENARIOS = {"floor": floor_scenario, **_SUITE}
PACKAGES = ["aiohttp", "uvicorn", "granian", "msgspec", "starlette", "nats-py", "redis", "aio-pika", "asyncpg",
            "psutil"]


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: about a second per scenario (what CI runs)")
    ap.add_argument("--only", default="", help=f"comma-separated scenarios: {', '.join(SCENARIOS)} (or 'publish')")
    ap.add_argument("--seconds", type=float, default=None,
                    help="duration of each timed run (default 5; 1 with --quick)")
    ap.add_argument("--rate", type=float, default=None,
                    help="latency scenario's publish rate (default: 50%% of tidings' single-event publish rate)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent publishers in the publish scenarios")
    ap.add_argument("--fanout-events", type=int, default=None, help="events in the fan-out scenario (1000; 100)")
    ap.add_argument("--memory-events", type=int, default=None, help="stored events, memory scenario (1e6; 20000)")
    ap.add_argument("--memory-subs", type=int, default=None, help="subscriptions, memory scenario (10000; 200)")
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"where to write the results ({DEFAULT_JSON})")
    a = ap.parse_args(argv)
    names: list[str] = []
    for n in filter(None, (x.strip() for x in a.only.split(","))):
        if n in ALIASES:
            names += ALIASES[n]
        elif n in SCENARIOS:
            names.append(n)
        else:
            ap.error(f"unknown scenario {n!r}; choose from {', '.join(SCENARIOS)}")
    a.names = names or list(SCENARIOS)
    return a


def _machine() -> dict[str, Any]:
    mem = None
    try:
        import psutil

        mem = psutil.virtual_memory().total
    except ImportError:
        try:
            kb = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
            mem = int(kb.split()[1]) * 1024
        except (OSError, StopIteration):
            pass
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "memory_gib": round(mem / 2**30, 1) if mem else None,
            "python": platform.python_version(), "platform": platform.platform()}


def _versions(peers: dict[str, P.Peer]) -> dict[str, Any]:
    import tidings

    commit = None
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                                text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    packages = {}
    for p in PACKAGES:
        try:
            packages[p] = version(p)
        except PackageNotFoundError:
            packages[p] = None
    return {
        "tidings": tidings.__version__, "tidings_commit": commit, "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version, "packages": packages,
        "servers": {p.name: p.server_version for p in peers.values()},
    }


def _ratios(rows: list[Row]) -> None:
    """Fill in tidings/peer for every peer row of a scenario that has figures."""
    by_scenario: dict[str, list[Row]] = {}
    for r in rows:
        by_scenario.setdefault(r.scenario, []).append(r)
    for group in by_scenario.values():
        base = next((r for r in group if r.system == "tidings"), None)
        if base is None or not base.figures:
            continue
        for r in group:
            if r is base:
                continue
            r.ratios = {k: round(base.figures[k] / v, 3) for k, v in r.figures.items() if k in base.figures and v}


def _num(v: float) -> str:
    return fmt_figure(v)  # never scientific notation (a latency of 0.00004 s read 4e-05)


def table(rows: list[Row]) -> str:
    head = ["scenario", "system", "figure", "unit", "tidings/peer", "x floor", "x durable floor"]
    lines = []
    for r in rows:
        system = r.system if not r.how else f"{r.system}: {r.how}"
        if r.skipped:
            lines.append([r.scenario, system, f"skipped: {r.skipped}", r.unit, "", "", ""])
            continue
        keys = list(r.figures)
        fig = " / ".join(_num(r.figures[k]) for k in keys)
        unit = r.unit if len(keys) == 1 else f"{r.unit} {'/'.join(keys)}"
        if r.details.get("incomplete"):
            fig += f" ({r.details['delivered']:,}/{r.details['expected']:,} by the deadline)"
        ratio = "—" if r.system == "tidings" else " / ".join(f"{r.ratios[k]:.2f}" for k in keys if k in r.ratios)
        floor, durable = r.details.get("x_floor", {}), r.details.get("x_durable", {})
        lines.append([r.scenario, system, fig, unit, ratio, " / ".join(f"{floor[k]:.2f}" for k in keys if k in floor),
                      " / ".join(f"{durable[k]:.2f}" for k in keys if k in durable)])
    width = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, width, strict=True)) + " |",
           "|" + "|".join("-" * (w + 2) for w in width) + "|"]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(x, width, strict=True)) + " |" for x in lines]
    return "\n".join(out)


async def run(a: argparse.Namespace) -> dict[str, Any]:
    machine = _machine()
    machine["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]  # others' work on this machine
    peers = P.all_peers()
    await asyncio.gather(*(p.check() for p in peers.values()))
    for p in peers.values():
        log(f"peer {p.name}: {p.status}" + (f" (server {p.server_version}, client {p.client_version})" if p.ok
                                             else f": {p.error}"))
    s = Settings(
        quick=a.quick,
        seconds=a.seconds if a.seconds is not None else (1.0 if a.quick else 5.0),
        clients=a.clients,
        rate=a.rate,
        fanout_events=a.fanout_events or (100 if a.quick else 1000),
        memory_events=a.memory_events or (20_000 if a.quick else 1_000_000),
        memory_subs=a.memory_subs or (200 if a.quick else 10_000),
        peers=peers,
    )
    rows: list[Row] = []
    timings: dict[str, float] = {}
    for name in a.names:
        log(f"[{name}]")
        t0 = time.monotonic()
        try:
            rows += await SCENARIOS[name](s)
        except Exception as e:  # a scenario's own failure is one row, never the whole run
            rows.append(Row(name, "tidings", "", "", skipped=f"failed: {type(e).__name__}: {e}"))
        timings[name] = round(time.monotonic() - t0, 1)
    _ratios(rows)
    with_floor_ratios(rows)
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "machine": machine,
        "versions": _versions(peers),
        "settings": s.as_json(),
        "peers": {k: {"name": p.name, "status": p.status, "error": p.error, "server": p.server_version,
                      "client": p.client_version} for k, p in peers.items()},
        "scenario_seconds": timings,
        "results": [asdict(r) for r in rows],
        "_rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    out = asyncio.run(run(a))
    rows = out.pop("_rows")
    out = {"started": started.isoformat(timespec="seconds"), "seconds": round(time.monotonic() - t0, 1),
           "command": " ".join(["python -m bench", *(sys.argv[1:] if argv is None else argv)]), **out}
    m = out["machine"]
    print(f"\ntidings {out['versions']['tidings']} ({out['versions']['tidings_commit']}) on {m['cpus']} CPUs "
          f"({m['cpu_model']}), {m['memory_gib']} GiB, Python {m['python']}; "
          f"{'quick' if a.quick else 'full'} run, {out['seconds']} s\n")
    print(table(rows))
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"\nresults: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
