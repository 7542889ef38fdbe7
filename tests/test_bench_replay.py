"""``python -m bench --only replay`` (issue 39, point 4): another subscription's live
latency while a replay runs, beside the same with no replay, from a process of its own."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from bench import replay as rp
from bench.archive import generate


async def test_the_replay_scenario_measures_live_latency_with_and_without_a_replay(tmp_path: Path) -> None:
    await asyncio.to_thread(generate, tmp_path / "var", 20_000, 1)
    args = argparse.Namespace(events=20_000, dir=tmp_path, live_every_ms=5.0, baseline_s=0.5, hot_only=True,
                              yield_ms=None)
    base, hot = await rp.run(args)
    assert base["source"] == "no replay (baseline)" and base["live_events"] > 10 and base["live_missing"] == 0
    assert base["live_latency_ms_p50"] <= base["live_latency_ms_p99"]
    assert hot["source"] == "hot log" and hot["events"] == 20_000 and hot["live_missing"] == 0
    assert hot["events_per_s"] > 0 and hot["live_latency_ms_p99"] > 0
    assert set(hot["cpu_cores_busy"]) == {"broker", "fronts", "endpoint", "host"}
