"""The scenarios of ``python -m bench``: each runs tidings and its peers side by side.

A scenario is an async function taking the run's :class:`Settings` and returning
:class:`Row` s, tidings' first. Every system's run is bounded (its own duration or count
and a timeout) and cleans up after itself; a peer that is unavailable or fails gives a
row that says so instead of a figure.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import peers as P
from bench._harness import Server
from bench._scenario import (
    Row,
    Settings,
    _guard,
    _lat_fig,
    _pg_store,
    fanout_peer_row,
    fanout_times,
    log,
    mark_incomplete,
    notifications_figure,
)
from bench.cpu_row import cpu, stream_cpu
from bench.payloads import (
    AVRO_SCHEMA,
    EVENT,
    FANOUT_SUBS,
    JSON_SCHEMA,
    LATENCY_WARMUP,
    PAYLOAD,
    PROTOBUF_SCHEMA,
    RICH_EVENT,
    RICH_JSON_SCHEMA,
)
from tidings.pipeline._human import fmt_figure

__all__ = ["EVENT", "FANOUT_SUBS", "PAYLOAD", "SCENARIOS", "Row", "Settings"]


# -- a. durable publish throughput ---------------------------------------------------------


async def publish(s: Settings, batch: int) -> list[Row]:
    from bench.live_plane import alternated, throughput

    name = f"publish-{batch}"
    unit = "events/s"
    timeout = s.seconds + 60

    def fig(d: dict[str, Any]) -> dict[str, float]:
        return {"events/s": d["events_per_s"]}

    # Plain and keyed are measured in alternating slices, on two servers started together
    # (``alternated``): their ratio is what issue 45 asks of keys, and this host's speed
    # moved by tens of percent between two runs one after the other.
    slices = 4 if s.seconds >= 2 else 2
    keyed_of: dict[str, dict[str, Any]] = {}

    async def run_pair(envs: tuple[dict[str, str] | None, dict[str, str] | None], keyed_as: str) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d1, \
                tempfile.TemporaryDirectory(prefix="bench-tidings-") as d2, \
                Server(Path(d1), envs[0]) as plain_srv, Server(Path(d2), envs[1]) as keyed_srv:
            plain, keyed = await alternated(plain_srv, keyed_srv, s.clients, batch, 2 * s.seconds, slices)
        keyed_of[keyed_as] = keyed
        return plain

    async def keyed_run(keyed_as: str) -> dict[str, Any]:
        if keyed_as not in keyed_of:
            raise RuntimeError("its plain pair failed")
        return keyed_of[keyed_as]

    async def run_one_process() -> dict[str, Any]:
        env = {"TIDINGS_WORKERS": "1"}
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d), env) as srv:
            return await throughput(srv, s.clients, batch, s.seconds, event=EVENT)

    how = f"HTTP, {batch} event{'s' if batch > 1 else ''}/request, SQLite synchronous=FULL"
    workers = os.cpu_count() or 1
    alt = f", alternated with the keyed run in {slices} slices"
    rows = [await _guard(name, "tidings", f"{how}, {workers} processes (broker + fronts){alt}", unit, timeout * 2,
                         lambda: run_pair((None, None), "sqlite"), fig)]
    # The same, each event with an idempotency key of its own (docs/wire-format.md): the
    # lookup and the key's columns in the commit of its event.
    rows.append(await _guard(name, "tidings, keyed", f"{how}, {workers} processes, an idempotency key per event{alt}",
                             unit, timeout, lambda: keyed_run("sqlite"), fig))
    if workers > 1:
        rows.append(await _guard(name, "tidings, one process", f"{how}, TIDINGS_WORKERS=1", unit, timeout,
                                 run_one_process, fig))

    async def run_on_postgresql() -> dict[str, Any]:
        # A database each: two servers on one database would be two members of a cluster.
        async with _pg_store() as env_a, _pg_store() as env_b:
            return await run_pair((env_a, env_b), "postgresql")

    how_pg = f"HTTP, {batch} event{'s' if batch > 1 else ''}/request, TIDINGS_STORE=postgresql://, {workers} processes"
    rows.append(await _guard(name, "tidings on PostgreSQL", how_pg + alt, unit, timeout * 2, run_on_postgresql, fig,
                             s.peers["postgres"]))
    rows.append(await _guard(name, "tidings on PostgreSQL, keyed", how_pg + ", an idempotency key per event" + alt,
                             unit, timeout, lambda: keyed_run("postgresql"), fig, s.peers["postgres"]))
    if batch > 1:  # the cost of validating every event against a bound schema
        for fmt, model in (("JSON", JSON_SCHEMA), ("AVRO", AVRO_SCHEMA), ("PROTOBUF", PROTOBUF_SCHEMA)):

            async def run_schema(fmt: str = fmt, model: Any = model) -> dict[str, Any]:
                with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
                    return await throughput(srv, s.clients, batch, s.seconds, event=EVENT, schema=(fmt, model))

            rows.append(await _guard(name, f"tidings + {fmt} schema", how + ", every event validated", unit,
                                     timeout, run_schema, fig))

        async def run_rich(schema: tuple[str, Any] | None) -> dict[str, Any]:
            with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
                return await throughput(srv, s.clients, batch, s.seconds, event=RICH_EVENT, schema=schema)

        rich = f"HTTP, {batch} rich events/request (nested records, a list of 3), SQLite synchronous=FULL"
        rows.append(await _guard(name, "tidings, rich event", rich + ", no schema", unit, timeout,
                                 lambda: run_rich(None), fig))
        rows.append(await _guard(name, "tidings + rich JSON schema", rich + ", every event validated ($refs, "
                                 "pattern, enum)", unit, timeout, lambda: run_rich(("JSON", RICH_JSON_SCHEMA)), fig))
    if batch == 1 and rows[0].figures:
        s.tidings_max_single = rows[0].figures["events/s"]
    for key, (how1, howb, fn) in P.PUBLISH.items():
        peer = s.peers[key]
        how = how1 if batch == 1 else howb.format(b=batch)

        async def run(fn: Callable[..., Awaitable[dict[str, Any]]] = fn) -> dict[str, Any]:
            return await fn(PAYLOAD, s.clients, batch, s.seconds)

        rows.append(await _guard(name, peer.name, how, unit, timeout, run, fig, peer))
    for r in rows:
        r.details.setdefault("clients", s.clients)
    return rows


async def publish_1(s: Settings) -> list[Row]:
    return await publish(s, 1)


async def publish_100(s: Settings) -> list[Row]:
    return await publish(s, 100)


# -- b. fan-out ----------------------------------------------------------------------------


async def fanout(s: Settings) -> list[Row]:
    from bench.subscriptions import fanout as tidings_fanout

    name, unit, fig = "fanout", "notifications/s", notifications_figure
    deadline, timeout = fanout_times(s)

    async def run_tidings() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
            return await tidings_fanout(srv, FANOUT_SUBS, 1.0, s.fanout_events, data=EVENT["data"], timeout=deadline)

    async def run_on_postgresql() -> dict[str, Any]:
        async with _pg_store() as env:
            with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d), env) as srv:
                return await tidings_fanout(srv, FANOUT_SUBS, 1.0, s.fanout_events, data=EVENT["data"],
                                            timeout=deadline)

    how = f"{FANOUT_SUBS} trusted HTTP endpoints (one uvicorn), no filter"
    rows = [await _guard(name, "tidings", how, unit, timeout, run_tidings, fig)]
    rows.append(await _guard(name, "tidings on PostgreSQL", how + ", TIDINGS_STORE=postgresql://", unit, timeout,
                             run_on_postgresql, fig, s.peers["postgres"]))
    for key in P.FANOUT:
        rows.append(await fanout_peer_row(s, name, key, deadline, timeout))
    return mark_incomplete(rows)


# -- c. latency ----------------------------------------------------------------------------


async def latency(s: Settings) -> list[Row]:
    from bench.live_plane import latency as tidings_latency
    from bench.live_plane import throughput

    name, unit = "latency", "ms"
    timeout = 2 * s.seconds + 60
    rate = s.rate
    basis = "--rate"
    if rate is None:
        if s.tidings_max_single is None:
            log("  [latency] measuring tidings' single-event publish rate first (1 s)")
            with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
                s.tidings_max_single = (await throughput(srv, s.clients, 1, 1.0, event=EVENT))["events_per_s"]
        rate = max(10.0, round(s.tidings_max_single / 2))
        basis = f"50% of tidings' {fmt_figure(s.tidings_max_single)} events/s single-event publish"

    async def run_tidings() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
            return await tidings_latency(srv, rate, s.seconds, warmup=LATENCY_WARMUP)

    rows = [await _guard(name, "tidings", f"publish -> SDK Subscriber handler at {fmt_figure(rate)}/s", unit, timeout,
                         run_tidings, _lat_fig)]
    from bench.peers_latency import LATENCY

    for key, (how, fn) in LATENCY.items():
        peer = s.peers[key]

        async def run(fn: Callable[..., Awaitable[dict[str, Any]]] = fn) -> dict[str, Any]:
            return await fn(rate, s.seconds, LATENCY_WARMUP)

        rows.append(await _guard(name, peer.name, f"{how} at {fmt_figure(rate)}/s", unit, timeout, run, _lat_fig, peer))
    for r in rows:
        r.details["rate_basis"] = basis
    return rows


# An event of the publish scenarios is a Map of a Nat and a Text; this filter makes each
# one walk every value of the event for every value of it, and again through nested
# wildcards: the worst a subscriber can register within the parser's bounds.
ADVERSARIAL_FILTER = "*[$.* ~= zz | $.*.* ~= zz | * ~~= zz].x == 1 | *.*.*.* ~= zz | name ~~= zzzz"


async def filter_cost(s: Settings) -> list[Row]:
    """Publish-100 throughput with one subscription whose filter is adversarial, beside the
    same run with a plain filter (goal: within 1.5x, issue 15)."""
    from bench.live_plane import throughput

    def fig(d: dict[str, Any]) -> dict[str, float]:
        return {"events/s": d["events_per_s"]}

    rows = []
    for label, flt in (("plain filter (i == 1)", "i == 1"), ("adversarial filter", ADVERSARIAL_FILTER)):
        async def run(flt: str = flt) -> dict[str, Any]:
            with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
                return await throughput(srv, s.clients, 100, s.seconds, event=EVENT, subscription_filter=flt)

        rows.append(await _guard("filter-cost", "tidings", f"publish-100, one subscription, {label}", "events/s",
                                 s.seconds + 60, run, fig))
    from bench.live_plane import latency as paced

    rate = s.rate or 500.0
    for label, flt in (("plain filter (i == 1)", "i == 1"), ("adversarial filter", ADVERSARIAL_FILTER)):
        async def run_lat(flt: str = flt) -> dict[str, Any]:
            with tempfile.TemporaryDirectory(prefix="bench-tidings-") as d, Server(Path(d)) as srv:
                return await paced(srv, rate, s.seconds, LATENCY_WARMUP, subscription_filter=flt)

        rows.append(await _guard("filter-cost", "tidings", f"publish -> handler at {fmt_figure(rate)}/s, another "
                                 f"subscription with a {label}", "ms", 2 * s.seconds + 60, run_lat, _lat_fig))
    return rows


async def xmpp_latency(s: Settings) -> list[Row]:
    """Publish over HTTP -> an XEP-0021 subscriber's XMPP client, through Prosody."""
    from bench.xmpp import latency as run_xmpp

    rate = s.rate or 200.0

    async def run() -> dict[str, Any]:
        return await run_xmpp(rate, s.seconds, LATENCY_WARMUP)

    at = f"at {fmt_figure(rate)}/s"
    return [await _guard("xmpp-latency", "tidings", f"HTTP publish -> XMPP ENS client via Prosody {at}",
                         "ms", 2 * s.seconds + 90, run, _lat_fig)]


# -- d. placeholders -----------------------------------------------------------------------


async def replay(s: Settings) -> list[Row]:
    """ICRC-77 replay of one namespace to one subscriber, from the hot log and then, once
    archived, from the Parquet archive (pyarrow), with a live event every 5 ms to another
    subscription; its live p99 with no replay is measured first, on the same server."""
    import argparse

    from bench import replay as rp
    from bench.archive import generate

    # A million events: the replay runs for several seconds, so that the live p99 during
    # it is read off about a thousand live events, not the third worst of three hundred.
    events, timeout = (2_000, 300.0) if s.quick else (1_000_000, 1800.0)
    unit = "events/s"

    async def run_all() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-replay-") as d:
            await asyncio.to_thread(generate, Path(d) / "var", events, 1)
            args = argparse.Namespace(events=events, dir=Path(d), live_every_ms=5.0,
                                      baseline_s=2.0 if s.quick else 5.0)
            return {"runs": await rp.run(args)}

    base = await _guard("replay", "tidings", f"{events:,} events", unit, timeout, run_all, lambda d: {})
    if base.skipped:
        return [base]
    rows = []
    for r in rp.against_baselines(base.details["runs"]):
        how = (f"{events:,} events from the {r['source']}; another subscription's live p99 "
               f"{r['live_latency_ms_p99']} ms while it runs, {r['live_latency_ms_p99_without']} ms without "
               f"({r['x_alone']}x), {r['live_latency_ms_p99_spinning']} ms with every core held by idle-class "
               f"spinners ({r['x_spinning']}x)")
        rows.append(Row("replay", "tidings", how, unit, {unit: r["events_per_s"]}, details=r))
    return rows


async def dedup(s: Settings) -> list[Row]:
    """The distributor's atomic marks against Redis beside raw pipelined SADD, then
    replication across three networks (a Redis stream, a JetStream stream, a broker)."""
    from bench import interchain as ic

    checks, events, timeout = (5_000, 200, 120.0) if s.quick else (200_000, 5_000, 600.0)
    how = f"{checks:,} global ids, 500 per call"
    marks = await _guard("dedup", "tidings", f"RedisState.mark (one atomic Lua call per batch), {how}", "checks/s",
                         timeout, lambda: ic.dedup(checks, 500),
                         lambda d: {"checks/s": d["RedisState.mark (SADD)"]}, s.peers.get("redis"))
    rows = [marks]
    if marks.details:
        enqueue = Row("dedup", "tidings", f"mark + outbox enqueue (same Lua call), {how}", "checks/s",
                      {"checks/s": marks.details["RedisState.mark + enqueue (script)"]})
        raw = Row("dedup", "Redis", f"raw redis.asyncio SADD, one command per id, pipelined by 500 ({checks:,})",
                  "checks/s", {"checks/s": marks.details["raw redis.asyncio SADD"]})
        rows += [enqueue, raw]

    async def replicate() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-ied-") as d:
            return {"events_per_s": await ic.replication(events, Path(d))}

    rows.append(await _guard("dedup", "tidings", f"replication of {events:,} events: Redis stream -> JetStream "
                             "+ tidings broker", "events/s", timeout, replicate,
                             lambda d: {"events/s": d["events_per_s"]}, s.peers.get("nats")))
    return rows


# -- e. memory, and the streaming face: bench/memory.py, bench/stream_scenarios.py --------


async def memory(s: Settings) -> list[Row]:
    """Server memory with many events and stopped subscriptions (bench/memory.py)."""
    from bench.memory import scenario

    return await scenario(s)


async def stream_publish(s: Settings) -> list[Row]:
    """Publish over /v1/stream beside JetStream's publish_async (bench/stream_scenarios.py)."""
    from bench.stream_scenarios import publish

    return await publish(s)


async def stream_fanout(s: Settings) -> list[Row]:
    """Fan-out to stream subscribers beside JetStream (bench/stream_scenarios.py)."""
    from bench.stream_scenarios import fanout

    return await fanout(s)


async def stream_latency(s: Settings) -> list[Row]:
    """Publish -> handler over streams on both sides, beside JetStream (bench/stream_scenarios.py)."""
    from bench.stream_scenarios import latency

    return await latency(s)


async def pipeline(s: Settings) -> list[Row]:
    """The archive (hot log to typed Parquet), replay reads from the archive, and the
    statistics job over an archive (``bench/pipeline.py``, a subprocess)."""
    events, stats_events, timeout = (20_000, 50_000, 600.0) if s.quick else (1_000_000, 10_000_000, 3600.0)

    async def run() -> dict[str, Any]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.pipeline", "--events", str(events), "--stats-events", str(stats_events),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"bench.pipeline exited with {proc.returncode}")
        return dict(json.loads(out))

    base = await _guard("pipeline", "tidings", "archive, replay, stats", "", timeout, run, lambda d: {})
    if base.skipped:
        return [base]
    d = base.details
    a, r, st = d["archive"], d["replay"], d["stats"]
    return [
        Row("pipeline", "tidings", f"archive {a['events']:,} events, SQLite -> typed Parquet (job, no Spark)",
            "events/s", {"events/s": a["job_events_per_s"]}, details={**a, "load_average": d["load_average"]}),
        Row("pipeline", "tidings", f"tidings pipeline archive, {a['events']:,} events, whole command",
            "s", {"s": a["command_s"]}, details=a),
        Row("pipeline", "tidings", f"replay read side from the archive, {r['events']:,} events", "events/s",
            {"events/s": r["events_per_s"]}, details=r),
        Row("pipeline", "tidings", f"stats over {st['archived_events']:,} archived events (Spark start apart)",
            "s", {"s": st["job_s"]}, details=st),
    ]


async def cluster(s: Settings) -> list[Row]:
    """Several broadcasters on one PostgreSQL (bench/cluster.py)."""
    from bench.cluster import scenario

    return await scenario(s)


async def tracing(s: Settings) -> list[Row]:
    from bench.tracing_cost import tracing as rows  # tracing off vs. the otel extra installed, unconfigured

    return await rows(s)


SCENARIOS: dict[str, Callable[[Settings], Awaitable[list[Row]]]] = {
    "publish-1": publish_1,
    "publish-100": publish_100,
    "stream-publish": stream_publish,
    "fanout": fanout,
    "stream-fanout": stream_fanout,
    "latency": latency,
    "stream-latency": stream_latency,
    "replay": replay,
    "dedup": dedup,
    "memory": memory,
    "xmpp-latency": xmpp_latency,
    "filter-cost": filter_cost,
    "pipeline": pipeline,
    "cluster": cluster,
    "tracing": tracing,
    "cpu": cpu,
    "stream-cpu": stream_cpu,
}
