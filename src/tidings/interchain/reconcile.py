"""Reconciliation on Spark: find what each network lacks and repair it.

The live distributor replicates event by event; this job checks the result in bulk, for
after outages longer than anyone waited, events published while no distributor ran, or
a network restored from a backup. Each network's events become a DataFrame
``(network, gid, payload)`` (the broker read by Spark from its log through the
``tidings`` source, the other networks collected through their adapters); the expected
pairs are every network crossed with every global id seen anywhere, and an anti-join
with what is there leaves what is missing. Each missing event is published to its
network (``network`` stripped, the payload of one network that has it); then every
network that was repaired is read again, and only the events found there count as
fixed (and are marked in its published set). A network can acknowledge a publish and
store nothing (a deduplication window, a stream that discards), so an acknowledgement
alone is never reported as a repair; what is still missing is reported per network.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..core.interchain import DltPublish, InvalidEvent, global_id, publish_body_of
from ..core.undecodable import UNDECODABLE
from .adapters import Network
from .config import DistributorConfig
from .errors import InterchainError
from .state import Mark, State, published_set

__all__ = ["NetworkReport", "Report", "reconcile", "run"]

_encode = msgspec.json.Encoder().encode
_decode_publish = msgspec.json.Decoder(DltPublish).decode


@dataclass
class NetworkReport:
    name: str
    events: int = 0
    """Distinct global ids found on the network."""
    missing: list[str] = field(default_factory=list)
    """Global ids the network lacked."""
    fixed: list[str] = field(default_factory=list)
    """Of those, the ones republished to it and read back from it."""
    still_missing: list[str] = field(default_factory=list)
    """Of those, the ones it still lacks after the repair (not read back)."""
    duplicates: int = 0
    """Global ids the network holds more than once (after the repair, if it was
    repaired): reported, not repaired (a network's log is not rewritten)."""
    error: str | None = None
    """Why the network could not be read or repaired, if so."""


@dataclass
class Report:
    total: int
    """Distinct global ids over all networks."""
    networks: list[NetworkReport]

    def text(self) -> str:
        lines = [f"{self.total} distinct events over {len(self.networks)} networks",
                 f"{'network':<20} {'events':>8} {'missing':>8} {'fixed':>8} {'still':>8} {'repeated':>8}"]
        for n in self.networks:
            lines.append(f"{n.name:<20} {n.events:>8} {len(n.missing):>8} {len(n.fixed):>8}"
                         f" {len(n.still_missing):>8} {n.duplicates:>8}" + (f"  error: {n.error}" if n.error else ""))
        for n in self.networks:
            if n.fixed:
                lines.append(f"fixed on {n.name}: {', '.join(sorted(n.fixed))}")
        for n in self.networks:
            if n.still_missing:
                lines.append(f"still missing on {n.name} after the repair: {len(n.still_missing)} "
                             f"({', '.join(sorted(n.still_missing)[:20])}"
                             + (", ..." if len(n.still_missing) > 20 else "") + ")")
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        """Every network was read, and holds every event (or all it lacked was repaired
        and read back)."""
        return all(n.error is None and not n.still_missing and len(n.fixed) == len(n.missing)
                   for n in self.networks)


def _rows(network: Network, events: list[Any]) -> list[tuple[str, str, str]]:
    rows = []
    for n in events:
        try:
            body = publish_body_of(n)
            rows.append((network.name, global_id(body.dataLocation), _encode(body).decode()))
        except InvalidEvent:
            continue
    return rows


def _missing(spark: Any, frames: list[Any], names: list[str]) -> tuple[
        int, dict[str, int], dict[str, int], list[tuple[str, str, str]]]:
    """Per network its distinct count and its count of ids held more than once, and every
    (network, gid, payload) missing."""
    from pyspark.sql import functions as F

    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    held = union.groupBy("network", "gid").count()
    dupes = {r["network"]: r["count"] for r in held.where(F.col("count") > 1).groupBy("network").count().collect()}
    present = union.select("network", "gid").distinct().cache()
    ids = union.groupBy("gid").agg(F.min("payload").alias("payload"))
    nets = spark.createDataFrame([(n,) for n in names], "network string")
    expected = nets.crossJoin(ids)
    missing = expected.join(present, ["network", "gid"], "left_anti")
    counts = {r["network"]: r["count"] for r in present.groupBy("network").count().collect()}
    total = ids.count()
    rows = [(r["network"], r["gid"], r["payload"]) for r in missing.orderBy("network", "gid").collect()]
    present.unpersist()
    return total, counts, dupes, rows


async def reconcile(networks: list[Network], state: State, spark: Any, *, repair: bool = True) -> Report:
    """Read every network, anti-join, republish what is missing (unless ``repair`` is
    False) and return the report. A network that cannot be read is left out of the
    comparison and reported with its error."""
    reports = {n.name: NetworkReport(n.name) for n in networks}
    frames: list[Any] = []
    readable: list[Network] = []
    schema = "network string, gid string, payload string"
    for net in networks:
        try:
            frame = net.frame(spark)
            if frame is not None:
                from pyspark.sql import functions as F

                frame = frame.select(F.lit(net.name).alias("network"), "gid", "payload")
            else:
                rows = _rows(net, await net.events())
                frame = spark.createDataFrame(rows, schema)
        except Exception as e:  # unreachable or unreadable: reported, left out of the comparison
            reports[net.name].error = str(e) if isinstance(e, InterchainError) else repr(e)
            continue
        frames.append(frame)
        readable.append(net)
    if not frames:
        return Report(0, list(reports.values()))
    names = [n.name for n in readable]
    total, counts, dupes, missing = await asyncio.to_thread(_missing, spark, frames, names)
    by_name = {n.name: n for n in readable}
    for name in names:
        reports[name].events = counts.get(name, 0)
        reports[name].duplicates = dupes.get(name, 0)
    sent: dict[str, list[str]] = {}
    for name, gid, payload in missing:
        rep = reports[name]
        rep.missing.append(gid)
        if not repair or rep.error is not None:
            continue
        try:
            body = _body(payload)
            await by_name[name].publish(body)
        except (InterchainError, InvalidEvent) as e:
            rep.error = str(e)
            continue
        sent.setdefault(name, []).append(gid)
    for name, gids in sent.items():
        await _verify(by_name[name], reports[name], gids, state, spark)
    return Report(total, list(reports.values()))


async def _verify(net: Network, rep: NetworkReport, sent: list[str], state: State, spark: Any) -> None:
    """Read ``net`` again: of the ids republished to it, those now there are fixed (and
    marked published, so the live distributor does not send them again), the others
    still missing."""
    try:
        present = await _held(net, spark)
    except Exception as e:  # the repair went out but cannot be confirmed: not counted
        rep.error = f"reading back the repair failed: {e if isinstance(e, InterchainError) else repr(e)}"
        rep.still_missing = list(sent)
        return
    rep.fixed = [g for g in sent if g in present]
    rep.still_missing = [g for g in sent if g not in present]
    rep.duplicates = sum(1 for n in present.values() if n > 1)
    if rep.fixed:
        await state.mark([Mark(published_set(net.name), g) for g in rep.fixed])


async def _held(net: Network, spark: Any) -> dict[str, int]:
    """How many times the network holds each global id."""
    frame = net.frame(spark)
    if frame is None:
        return dict(Counter(gid for _, gid, _ in _rows(net, await net.events())))
    rows = await asyncio.to_thread(lambda: frame.groupBy("gid").count().collect())
    return {r["gid"]: r["count"] for r in rows}


def _body(payload: str) -> DltPublish:
    try:
        return _decode_publish(payload)
    except UNDECODABLE as e:
        raise InvalidEvent(f"cannot republish {payload[:200]!r}: {e}") from e


async def run(config: DistributorConfig, spark_factory: Callable[[], Any], *, repair: bool = True) -> Report:
    """The ``tidings distributor reconcile`` job: open what the config names, reconcile, close."""
    state = config.make_state()
    await state.open()
    networks = config.make_networks(state)
    try:
        for n in networks:
            await n.open()
        spark = await asyncio.to_thread(spark_factory)
        return await reconcile(networks, state, spark, repair=repair)
    finally:
        for n in networks:
            await n.close()
        await state.close()
