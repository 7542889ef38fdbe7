"""What tracing costs (docs/operations.md, "Tracing").

* Not switched on: publish and fan-out with ``TIDINGS_TRACING=off`` beside the default
  (``auto``) with the ``otel`` extra installed and no OTLP endpoint. Both run the same
  code (the broker's tracing is None): the rows differ by noise only.
* Switched on: publish with every event traced (a ``traceparent`` header) and one
  subscriber, with tracing off and on (receive, commit, route and push spans exported to
  an OTLP sink in this process).

The configurations of a scenario alternate; those not switched on run twice and keep
their better run."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from bench._harness import Server, free_port
from bench._scenario import Row, Settings, _guard, fanout_times, notifications_figure
from bench.payloads import EVENT, FANOUT_SUBS

_OFF = {"TIDINGS_TRACING": "off"}
_UNCONFIGURED = {"TIDINGS_TRACING": "auto"}
_TRACED = {**EVENT, "headers": [["traceparent", {"Text": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}]]}


def _clean(env: dict[str, str]) -> dict[str, str]:
    # No OTLP endpoint of the bench's own environment may switch tracing on where it is not.
    return {**{k: "" for k in os.environ if k.startswith("OTEL_EXPORTER_OTLP")}, **env}


async def _otlp_sink() -> tuple[web.AppRunner, str]:
    """Takes ``POST /v1/traces`` and answers 200 (an empty ExportTraceServiceResponse)."""
    async def traces(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def _best_of(rounds: int, scenario: str, unit: str, timeout: float,
                   fig: Callable[[dict[str, Any]], dict[str, float]],
                   runs: dict[str, tuple[str, Callable[[], Awaitable[dict[str, Any]]]]]) -> list[Row]:
    best: dict[str, Row] = {}
    for _ in range(rounds):
        for system, (how, run) in runs.items():
            row = await _guard(scenario, system, how, unit, timeout, run, fig)
            kept = best.get(system)
            if kept is None or (row.figures and (not kept.figures or row.figures[unit] > kept.figures[unit])):
                best[system] = row
    return list(best.values())


async def tracing(s: Settings) -> list[Row]:
    from bench.live_plane import throughput
    from bench.subscriptions import fanout

    extra = "otel extra " + ("installed" if importlib.util.find_spec("opentelemetry.sdk") else "absent")
    deadline, fanout_timeout = fanout_times(s)
    sink, sink_url = await _otlp_sink()

    def publish(env: dict[str, str], **kw: Any) -> Callable[[], Awaitable[dict[str, Any]]]:
        async def run() -> dict[str, Any]:
            with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d), _clean(env)) as srv:
                return await throughput(srv, s.clients, 100, s.seconds, **kw)
        return run

    def fan(env: dict[str, str]) -> Callable[[], Awaitable[dict[str, Any]]]:
        async def run() -> dict[str, Any]:
            with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d), _clean(env)) as srv:
                return await fanout(srv, FANOUT_SUBS, 1.0, s.fanout_events, data=EVENT["data"], timeout=deadline)
        return run

    on = {"TIDINGS_TRACING": "auto", "OTEL_EXPORTER_OTLP_ENDPOINT": sink_url}
    traced = {"event": _TRACED, "subscription_filter": "i > 0"}
    publish_fig = lambda d: {"events/s": d["events_per_s"]}  # noqa: E731
    try:
        rows = await _best_of(2, "tracing-publish-100", "events/s", s.seconds + 60, publish_fig, {
            "tidings, tracing off": (f"TIDINGS_TRACING=off, {extra}", publish(_OFF, event=EVENT)),
            "tidings, tracing unconfigured": (f"no OTLP endpoint, {extra}", publish(_UNCONFIGURED, event=EVENT)),
        })
        rows += await _best_of(2, "tracing-fanout", "notifications/s", fanout_timeout, notifications_figure, {
            "tidings, tracing off": (f"TIDINGS_TRACING=off, {extra}", fan(_OFF)),
            "tidings, tracing unconfigured": (f"no OTLP endpoint, {extra}", fan(_UNCONFIGURED)),
        })
        if importlib.util.find_spec("opentelemetry.sdk"):
            how = "every event traced, one subscriber"
            rows += await _best_of(1, "tracing-on-publish-100", "events/s", s.seconds + 60, publish_fig, {
                "tidings, tracing off": (f"{how}, TIDINGS_TRACING=off", publish(_OFF, **traced)),
                "tidings, tracing on": (f"{how}, spans exported to an OTLP sink", publish(on, **traced)),
            })
    finally:
        await sink.cleanup()
    return rows
