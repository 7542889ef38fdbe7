"""The streaming scenarios (docs/streaming.md): publish one event per message on
persistent connections, and fan-out to stream subscribers, beside NATS JetStream."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench._harness import Server
from bench._scenario import (
    Row,
    Settings,
    _guard,
    _lat_fig,
    fanout_peer_row,
    fanout_times,
    mark_incomplete,
    notifications_figure,
)
from bench.payloads import EVENT, FANOUT_SUBS, LATENCY_WARMUP, PAYLOAD
from tidings.pipeline._human import fmt_figure

STREAM_WINDOW = 1000
STREAM_LISTENERS = 4


async def publish(s: Settings) -> list[Row]:
    """One event per message on persistent connections, ``STREAM_WINDOW`` unanswered per
    connection, beside JetStream's ``publish_async`` driven the same way."""
    from bench import stream as st

    name, unit = "stream-publish", "events/s"
    timeout = s.seconds + 60
    conns = max(1, s.clients // 4)

    def fig(d: dict[str, Any]) -> dict[str, float]:
        return {"events/s": d["events_per_s"]}

    async def run_tidings() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
            return await st.tidings_publish(srv, EVENT, conns, STREAM_WINDOW, s.seconds)

    how = f"WebSocket, 1 event/message, {conns} connection(s) x {STREAM_WINDOW} in flight, SQLite synchronous=FULL"
    rows = [await _guard(name, "tidings", how, unit, timeout, run_tidings, fig)]

    async def run_nats() -> dict[str, Any]:
        return await st.nats_publish(PAYLOAD, conns, STREAM_WINDOW, s.seconds)

    rows.append(await _guard(name, s.peers["nats"].name, f"publish_async, {conns} connection(s) x {STREAM_WINDOW} "
                             "acks outstanding, file storage", unit, timeout, run_nats, fig, s.peers["nats"]))
    return rows


async def fanout(s: Settings) -> list[Row]:
    """Fan-out to subscribers on persistent connections that acknowledge every push,
    beside JetStream's push consumers (explicit ack) of the fan-out scenario."""
    from bench import stream as st

    name, unit, fig = "stream-fanout", "notifications/s", notifications_figure
    deadline, timeout = fanout_times(s)

    async def run_tidings() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
            return await st.tidings_fanout(srv, EVENT, FANOUT_SUBS, STREAM_LISTENERS, s.fanout_events,
                                           STREAM_WINDOW, deadline)

    how = (f"{FANOUT_SUBS} trusted stream: subscriptions on {STREAM_LISTENERS} WebSocket connections, "
           "every push acked; published over a stream connection")
    rows = [await _guard(name, "tidings", how, unit, timeout, run_tidings, fig)]
    rows.append(await fanout_peer_row(s, name, "nats", deadline, timeout))
    return mark_incomplete(rows)


async def latency(s: Settings) -> list[Row]:
    """Publish -> handler with persistent connections on both sides: a ``Stream`` publishes
    one event per message at the latency rate, another ``Stream`` handles the pushes of a
    trusted ``stream:`` subscription; JetStream beside it, as in the latency scenario."""
    from bench import stream as st
    from bench.peers_latency import LATENCY

    name, unit = "stream-latency", "ms"
    rate, timeout = s.rate or 1000.0, 2 * s.seconds + 60

    async def run_tidings() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
            return await st.tidings_latency(srv, rate, s.seconds, LATENCY_WARMUP)

    at = f"at {fmt_figure(rate)}/s"
    rows = [await _guard(name, "tidings", f"Stream publish -> Stream handler (stream: subscription) {at}",
                         unit, timeout, run_tidings, _lat_fig)]
    how, fn = LATENCY["nats"]

    async def run_nats() -> dict[str, Any]:
        return dict(await fn(rate, s.seconds, LATENCY_WARMUP))

    rows.append(await _guard(name, s.peers["nats"].name, f"{how} {at}", unit, timeout, run_nats, _lat_fig,
                             s.peers["nats"]))
    return rows
