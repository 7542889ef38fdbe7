"""The Spark reconciliation job finds what each network lacks, repairs it, and reports."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import msgspec
import redis.asyncio as aioredis

from tidings.client import Publisher
from tidings.core.interchain import DltPublish
from tidings.interchain import NetworkContext
from tidings.interchain.adapters import BrokerNetwork, DltNetwork, RedisStreamNetwork
from tidings.interchain.reconcile import reconcile
from tidings.interchain.state import SQLiteState

from .conftest import ServerProcess
from .interchain_support import DltTestNetwork, event
from .test_interchain_e2e import broker_gids

# Spark's Python workers (the tidings source's planner) must import tidings.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


async def test_reconcile_finds_and_repairs_differences(spark: Any, tmp_path: Path, server: ServerProcess) -> None:
    stream = f"test:dlt:{uuid.uuid4().hex[:10]}"
    r = aioredis.Redis()
    a = DltTestNetwork("A")
    await a.start()
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    ctx = NetworkContext(public_url="http://127.0.0.1:1", state=state)
    networks = [
        DltNetwork("A", {"url": a.url}, ctx),
        RedisStreamNetwork("R", {"stream": stream}, ctx),
        BrokerNetwork("T", {"url": server.url, "token": server.admin_token, "data_dir": str(server.data_dir)}, ctx),
    ]
    try:
        for n in networks:
            await n.open()
        # Differences injected with no distributor running: each network's own publishers.
        async with Publisher(server.url, server.admin_token) as pub:
            await pub.register_publication("dlt.events")
            for gid in ("only-T", "all"):
                await pub.publish("dlt.events", event(gid))
        for gid in ("only-R", "all"):
            await r.xadd(stream, {"event": json.dumps(event(gid))})
        for gid in ("only-A", "all"):
            await networks[0].publish(msgspec.convert(event(gid), DltPublish))

        report = await reconcile(networks, state, spark)
        by = {n.name: n for n in report.networks}
        assert report.total == 4
        assert {n: (by[n].events, sorted(by[n].missing)) for n in by} == {
            "A": (2, ["only-R", "only-T"]), "R": (2, ["only-A", "only-T"]), "T": (2, ["only-A", "only-R"])}
        assert all(sorted(n.fixed) == sorted(n.missing) and n.error is None for n in report.networks)
        text = report.text()
        assert "fixed on A: only-R, only-T" in text and "4 distinct events over 3 networks" in text

        want = ["all", "only-A", "only-R", "only-T"]
        assert sorted(a.gids()) == want
        assert sorted(json.loads(f[b"event"])["dataLocation"].rsplit("hl=", 1)[1]
                      for _, f in await r.xrange(stream)) == want
        assert sorted(broker_gids(server)) == want
        assert await state.members("publishedEvents:T") == {"only-A", "only-R"}

        again = await reconcile(networks, state, spark)
        assert [(n.events, n.missing) for n in again.networks] == [(4, [])] * 3
    finally:
        for n in networks:
            await n.close()
        await a.close()
        await state.close()
        await r.delete(stream)
        await r.aclose()
