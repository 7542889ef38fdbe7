"""``python -m bench --only replay`` (issue 39, point 4): another subscription's live
latency while a replay runs, beside the same with no replay and with idle-class spinners
on every core (the host's floor), from a process of its own."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from bench import replay as rp
from bench.archive import generate


async def test_the_replay_scenario_measures_live_latency_with_and_without_a_replay(tmp_path: Path) -> None:
    await asyncio.to_thread(generate, tmp_path / "var", 20_000, 1)
    args = argparse.Namespace(events=20_000, dir=tmp_path, live_every_ms=5.0, baseline_s=0.5, hot_only=True,
                              yield_ms=None)
    base, spun, hot = await rp.run(args)
    assert base["source"] == "no replay (baseline)" and base["live_events"] > 10 and base["live_missing"] == 0
    assert base["live_latency_ms_p50"] <= base["live_latency_ms_p99"]
    assert hot["source"] == "hot log" and hot["events"] == 20_000 and hot["live_missing"] == 0
    assert hot["events_per_s"] > 0 and hot["live_latency_ms_p99"] > 0
    assert set(hot["cpu_cores_busy"]) == {"broker", "fronts", "endpoint", "host"}
    # The host's floor: the same live load while idle-class spinners hold every core.
    assert spun["source"] == rp.SPINNING and spun["live_events"] > 10 and spun["live_missing"] == 0
    assert spun["cpu_cores_busy"]["host"] > 0.5 * (os.cpu_count() or 1)
    (ratios,) = rp.against_baselines([base, spun, hot])
    assert ratios["live_latency_ms_p99_without"] == base["live_latency_ms_p99"]
    assert ratios["live_latency_ms_p99_spinning"] == spun["live_latency_ms_p99"]
    assert ratios["x_spinning"] == round(hot["live_latency_ms_p99"] / spun["live_latency_ms_p99"], 2)


def test_the_spinners_run_in_the_idle_class_and_are_gone_after() -> None:
    import psutil

    before = {p.pid for p in psutil.Process().children()}
    with rp.spinning(2):
        kids = [p for p in psutil.Process().children() if p.pid not in before]
        assert len(kids) == 2
        deadline = time.monotonic() + 10
        while any(os.sched_getscheduler(p.pid) != os.SCHED_IDLE for p in kids):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in kids)
