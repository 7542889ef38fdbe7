"""What tracing costs when it is not switched on: publish and fan-out with
``TIDINGS_TRACING=off`` beside the default (``auto``) with the ``otel`` extra installed
and no OTLP endpoint configured (docs/operations.md, "Tracing"). Both run the same code
(the broker's tracing is None); the rows show the difference is noise. Each
configuration runs twice, alternating, and keeps its better run."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

from bench._harness import Server
from bench.suite import EVENT, FANOUT_SUBS, Row, Settings, _guard, fanout_times, notifications_figure

_CONFIGS = {
    "tidings, tracing off": {"TIDINGS_TRACING": "off"},
    "tidings, tracing unconfigured": {"TIDINGS_TRACING": "auto"},
}


def _clean(env: dict[str, str]) -> dict[str, str]:
    # No OTEL_* of the bench's own environment may switch tracing on for the second row.
    return {**{k: "" for k in os.environ if k.startswith("OTEL_EXPORTER_OTLP")}, **env}


async def tracing(s: Settings) -> list[Row]:
    from bench.live_plane import throughput
    from bench.subscriptions import fanout

    installed = importlib.util.find_spec("opentelemetry.sdk") is not None
    deadline, fanout_timeout = fanout_times(s)

    async def publish_run(env: dict[str, str]) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d), _clean(env)) as srv:
            return await throughput(srv, s.clients, 100, s.seconds, event=EVENT)

    async def fanout_run(env: dict[str, str]) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d), _clean(env)) as srv:
            return await fanout(srv, FANOUT_SUBS, 1.0, s.fanout_events, data=EVENT["data"], timeout=deadline)

    rows: list[Row] = []
    for scenario, unit, run, fig, timeout in (
        ("tracing-publish-100", "events/s", publish_run, lambda d: {"events/s": d["events_per_s"]}, s.seconds + 60),
        ("tracing-fanout", "notifications/s", fanout_run, notifications_figure, fanout_timeout),
    ):
        best: dict[str, Row] = {}
        for _ in range(2):
            for label, env in _CONFIGS.items():
                how = f"TIDINGS_TRACING={env['TIDINGS_TRACING']}, no OTEL_EXPORTER_OTLP_*, otel extra " + (
                    "installed" if installed else "absent")

                async def go(env: dict[str, str] = env, run: Any = run) -> dict[str, Any]:
                    return await run(env)

                row = await _guard(scenario, label, how, unit, timeout, go, fig)
                kept = best.get(label)
                if kept is None or (row.figures and (not kept.figures or row.figures[unit] > kept.figures[unit])):
                    best[label] = row
        rows.extend(best.values())
    return rows
