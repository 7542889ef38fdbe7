"""The Spark reconciliation job finds what each network lacks, repairs it, and reports."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.js.errors
import redis.asyncio as aioredis

from tidings.client import Publisher
from tidings.core.interchain import DltPublish, global_id
from tidings.interchain import NetworkContext
from tidings.interchain.adapters import BrokerNetwork, DltNetwork, JetStreamNetwork, Network, RedisStreamNetwork
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


def _at(location: str, n: str) -> dict[str, Any]:
    return {**event(n), "dataLocation": location}


# Global ids that need escaping, the escape first, in the middle, last, alone; and one
# event present everywhere but spelled differently on each network.
_ONLY = {
    "A": ["https://m.example/e/1?hl=%20lead", "https://m.example/e/2?x=1&hl=mid+dle&y=2"],
    "R": ["https://m.example/e/3?hl=trail%26", "https://m.example/e/4?h%6C=100%"],
    "J": ["https://m.example/e/5?hl=%EF%BF%BD", "https://m.example/e/6?hl=a%3Db%23c#frag"],
    "T": ["https://m.example/e/7?hl=%C3%A9", "https://m.example/e/8?hl=&hl=%27%22%5C%60"],
}
_SAME = {"A": "https://m.example/s?h%6C=caf%C3%A9%20x", "R": "https://m.example/s?hl=caf%c3%a9%20x",
         "J": "https://m.example/s?x=1&hl=caf%C3%A9+x#f", "T": "https://m.example/s?hl=café+x"}


async def test_reconcile_twice_republishes_nothing_with_escaped_ids(spark: Any, tmp_path: Path,
                                                                     server: ServerProcess) -> None:
    """Escaped ids agree between the reconciler's Spark side (the broker read by Spark) and
    its Python side (the other networks), so a second run finds nothing missing anywhere."""
    tag = uuid.uuid4().hex[:10]
    stream, js_stream, js_subject = f"test:dlt:{tag}", f"TEST_REC_{tag}", f"test.rec.{tag}"
    r = aioredis.Redis()
    nc = await nats.connect("nats://127.0.0.1:4222")
    a = DltTestNetwork("A")
    await a.start()
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    ctx = NetworkContext(public_url="http://127.0.0.1:1", state=state)
    namespace = f"dlt.rec{tag}"
    networks: dict[str, Network] = {
        "A": DltNetwork("A", {"url": a.url}, ctx),
        "R": RedisStreamNetwork("R", {"stream": stream}, ctx),
        "J": JetStreamNetwork("J", {"stream": js_stream, "subject": js_subject}, ctx),
        "T": BrokerNetwork("T", {"url": server.url, "token": server.admin_token, "data_dir": str(server.data_dir),
                                 "namespace": namespace}, ctx),
    }
    try:
        for n in networks.values():
            await n.open()
        for name, net in networks.items():
            for i, loc in enumerate([*_ONLY[name], _SAME[name]]):
                await net.publish(msgspec.convert(_at(loc, f"{name}{i}"), DltPublish))

        everything = {global_id(loc) for locs in _ONLY.values() for loc in locs} | {"café x"}
        assert len(everything) == 9 and len({global_id(loc) for loc in _SAME.values()}) == 1

        first = await reconcile(list(networks.values()), state, spark)
        assert first.total == 9
        for rep in first.networks:
            lacks = everything - {"café x"} - {global_id(loc) for loc in _ONLY[rep.name]}
            assert (rep.events, set(rep.missing), set(rep.fixed), rep.error) == (3, lacks, lacks, None), rep

        counts = {name: len(await net.events()) for name, net in networks.items()}
        assert counts == dict.fromkeys(networks, 9)
        for name, net in networks.items():
            assert {global_id(n.dataLocation) for n in await net.events()} == everything, name

        again = await reconcile(list(networks.values()), state, spark)
        assert [(n.name, n.events, n.missing, n.fixed, n.error) for n in again.networks] == [
            (name, 9, [], [], None) for name in networks]
        assert {name: len(await net.events()) for name, net in networks.items()} == counts
    finally:
        for n in networks.values():
            await n.close()
        await a.close()
        await state.close()
        await r.delete(stream)
        await r.aclose()
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await nc.jetstream().delete_stream(js_stream)
        await nc.close()


async def test_reconcile_reads_the_archive_too(spark: Any, tmp_path: Path, server: ServerProcess) -> None:
    """Events the archive job moved out of the broker's hot log still count as present on
    the broker: archiving and trimming make reconciliation republish nothing."""
    from tidings.pipeline.archive import archive

    tag = uuid.uuid4().hex[:10]
    stream, namespace = f"test:dlt:{tag}", f"dlt.arch{tag}"
    r = aioredis.Redis()
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    ctx = NetworkContext(public_url="http://127.0.0.1:1", state=state)
    networks: list[Network] = [
        RedisStreamNetwork("R", {"stream": stream}, ctx),
        BrokerNetwork("T", {"url": server.url, "token": server.admin_token, "data_dir": str(server.data_dir),
                            "namespace": namespace}, ctx),
    ]
    try:
        for n in networks:
            await n.open()
        for i in range(6):
            for n in networks:
                await n.publish(msgspec.convert(event(f"e{i}"), DltPublish))
        run = archive(data_dir=server.data_dir, archive_dir=server.data_dir / "archive", older_than_s=0,
                      namespaces=[namespace])
        assert run.events == 6 and run.namespaces[0].trimmed >= 5  # out of the hot log
        report = await reconcile(networks, state, spark)
        assert [(n.name, n.events, n.missing, n.error) for n in report.networks] == [
            ("R", 6, [], None), ("T", 6, [], None)]
    finally:
        for n in networks:
            await n.close()
        await state.close()
        await r.delete(stream)
        await r.aclose()


class _ForgetfulDlt(DltTestNetwork):
    """A DLT network that answers 201 to a publish of the ids in ``drop`` and stores
    nothing: an acknowledgement that is not a store."""

    def __init__(self, name: str, drop: set[str]) -> None:
        super().__init__(name)
        self.drop = drop
        kept = self.endpoint.app

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"] == "/api/v1/publishEvent":
                before = len(self.ledger)
                await kept(scope, receive, send)
                if len(self.ledger) > before and self.ledger[-1]["dataLocation"].rsplit("hl=", 1)[1] in self.drop:
                    self.ledger.pop()
                return
            await kept(scope, receive, send)

        self.endpoint.app = app


async def test_reconcile_verifies_repairs_inside_the_duplicate_window(spark: Any, tmp_path: Path) -> None:
    """Events deleted from a JetStream stream and from a Redis stream while JetStream's
    duplicate window still remembers their ids: the repair is counted only once read
    back, and afterwards every network holds every event exactly once. A network that
    acknowledges a republish without storing it is reported as still missing it."""
    tag = uuid.uuid4().hex[:10]
    stream, js_stream, js_subject = f"test:rep:{tag}", f"TEST_REP_{tag}", f"test.rep.{tag}"
    r = aioredis.Redis()
    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    gone_from_a = {"e7", "e8"}
    a = _ForgetfulDlt("A", drop=set(gone_from_a))
    await a.start()
    state = SQLiteState(tmp_path / "state.db")
    await state.open()
    ctx = NetworkContext(public_url="http://127.0.0.1:1", state=state)
    networks: list[Network] = [
        JetStreamNetwork("J", {"stream": js_stream, "subject": js_subject}, ctx),
        RedisStreamNetwork("R", {"stream": stream}, ctx),
        DltNetwork("A", {"url": a.url}, ctx),
    ]
    every = [f"e{i}" for i in range(10)]
    try:
        for n in networks:
            await n.open()
        for gid in every:
            for n in networks:
                if not (n.name == "A" and gid in gone_from_a):
                    await n.publish(msgspec.convert(event(gid), DltPublish))
        await networks[2].publish(msgspec.convert(event("e0"), DltPublish))  # A holds e0 twice
        assert (await js.stream_info(js_stream)).config.duplicate_window >= 60  # the deletes fall inside it
        # The outage: events lost from each stream while the window remembers them.
        js_gone, r_gone = {"e1", "e4", "e9"}, {"e2", "e4"}
        for msg in [m for m in await networks[0].events() if global_id(m.dataLocation) in js_gone]:
            await js.delete_msg(js_stream, int(msg.id))
        for entry_id, fields in await r.xrange(stream):
            if json.loads(fields[b"event"])["dataLocation"].rsplit("hl=", 1)[1] in r_gone:
                await r.xdel(stream, entry_id)

        report = await reconcile(networks, state, spark)
        by = {n.name: n for n in report.networks}
        assert {n: (sorted(by[n].missing), sorted(by[n].fixed), sorted(by[n].still_missing), by[n].error)
                for n in by} == {
            "J": (sorted(js_gone), sorted(js_gone), [], None),
            "R": (sorted(r_gone), sorted(r_gone), [], None),
            "A": (sorted(gone_from_a), [], sorted(gone_from_a), None),
        }
        assert not report.ok  # the CLI exits 1
        assert "still missing on A after the repair: 2 (e7, e8)" in report.text()
        assert [(n.name, n.duplicates) for n in report.networks] == [("J", 0), ("R", 0), ("A", 1)]
        assert await state.members("publishedEvents:J") == js_gone  # marked only once read back

        for n in networks[:2]:  # exactly once each
            assert sorted(global_id(m.dataLocation) for m in await n.events()) == every, n.name

        a.drop.clear()
        again = await reconcile(networks, state, spark)
        assert [(n.name, n.missing, n.fixed, n.still_missing) for n in again.networks] == [
            ("J", [], [], []), ("R", [], [], []), ("A", sorted(gone_from_a), sorted(gone_from_a), [])]
        assert again.ok
        assert [(n.name, n.duplicates) for n in again.networks] == [("J", 0), ("R", 0), ("A", 1)]
        for n in networks:
            want = sorted([*every, "e0"]) if n.name == "A" else every  # reported, not rewritten
            assert sorted(global_id(m.dataLocation) for m in await n.events()) == want, n.name
    finally:
        for n in networks:
            await n.close()
        await a.close()
        await state.close()
        await r.delete(stream)
        await r.aclose()
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(js_stream)
        await nc.close()


async def test_reconcile_command_exits_1_with_a_count_per_network(tmp_path: Path) -> None:
    """`tidings distributor reconcile` on a network that answers 201 and stores nothing:
    the report counts what is still missing there, and the command exits 1."""
    import asyncio

    tag = uuid.uuid4().hex[:10]
    stream = f"test:rep-cli:{tag}"
    r = aioredis.Redis()
    a = _ForgetfulDlt("A", drop={"c1"})
    await a.start()
    for gid in ("c0", "c1"):
        await r.xadd(stream, {"event": json.dumps(event(gid))})
    config = tmp_path / "ied.json"
    config.write_text(json.dumps({"sqlite": str(tmp_path / "state.db"), "networks": [
        {"name": "A", "kind": "dlt", "url": a.url}, {"name": "R", "kind": "redis", "stream": stream}]}))
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", "distributor", "reconcile", "--config", str(config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        out, err = await asyncio.wait_for(proc.communicate(), 300)
        text = out.decode()
        assert proc.returncode == 1, (text, err.decode()[-2000:])
        assert "still missing on A after the repair: 1 (c1)" in text and "fixed on A: c0" in text, text
        assert sorted(a.gids()) == ["c0"]
    finally:
        await a.close()
        await r.delete(stream)
        await r.aclose()
