"""Several broadcasters on one PostgreSQL database (docs/scaling.md): who delivers what,
the ICRC-72 broadcaster queries, and failover when a broadcaster is killed."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from tidings.client import Admin, Publisher

from .conftest import ServerProcess, admin_api, eventually, read_body, respond
from .pg_support import schema_address
from .test_console_feeds import events

pytestmark = pytest.mark.e2e

NS = "com.example.cluster"
STOP = "tidings:command:subscription:stop"
FAST = {"workers": "1", "heartbeat_s": "0.25", "lease_s": "1.5", "retry_initial_s": "0.05", "retry_max_s": "0.3"}


@contextlib.contextmanager
def nodes(
    server_factory: Callable[..., ServerProcess], pg_database: str, n: int = 3, **settings: str
) -> Iterator[list[ServerProcess]]:
    """``n`` broadcasters on one database; the first makes the admin, the others share its token."""
    store = schema_address(pg_database)
    first = server_factory(store=store, broadcaster_id="b0", **FAST, **settings)
    out = [first]
    try:
        for i in range(1, n):
            d = first.data_dir.parent / f"b{i}"
            d.mkdir()
            shutil.copy(first.data_dir / "admin.token", d / "admin.token")
            named = {**FAST, **settings, "store": store, "broadcaster_id": f"b{i}"}
            s = ServerProcess(d, env={f"TIDINGS_{k.upper()}": v for k, v in named.items()})
            out.append(s)
            s.start(new_port_if_taken=True)
        yield out
    finally:
        for s in out[1:]:
            s.stop()


@pytest.fixture
def cluster(server_factory: Callable[..., ServerProcess], pg_database: str) -> Iterator[list[ServerProcess]]:
    """Three broadcasters on one database."""
    with nodes(server_factory, pg_database) as out:
        yield out


class Recorder:
    """A subscriber endpoint: every eventId pushed to each subscription, in arrival order."""

    def __init__(self) -> None:
        self.got: dict[int, list[int]] = defaultdict(list)
        self.first_at: dict[tuple[int, int], float] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await read_body(receive)
        sub = int(dict(scope["headers"])[b"x-tidings-subscription"])
        for n in json.loads(body):
            self.got[sub].append(n["eventId"])
            self.first_at.setdefault((sub, n["eventId"]), time.monotonic())
        await respond(send)


async def setup(servers: list[ServerProcess], endpoint_url: str, n_subs: int) -> list[int]:
    s0 = servers[0]
    async with Publisher(s0.url, s0.admin_token) as pub:
        await pub.register_publication(NS)
    async with aiohttp.ClientSession() as http:
        ids = []
        for i in range(n_subs):
            s = servers[i % len(servers)]  # registered through every broadcaster
            async with http.post(
                f"{s.url}/v1/icrc72_register_subscription",
                json=[{"namespace": NS, "config": [], "endpoint": endpoint_url}],
                headers={"authorization": f"Bearer {s.admin_token}"},
            ) as r:
                (item,) = answer = await r.json()
                assert "Ok" in item, answer
                ids.append(item["Ok"])
    return ids


async def holders(servers: list[ServerProcess]) -> dict[int, str]:
    """Subscription id -> the broadcaster delivering it, as each broadcaster reports itself."""
    out: dict[int, str] = {}
    for i, s in enumerate(servers):
        if s.proc is None:
            continue
        async with Admin(s.url, s.admin_token) as admin:
            for info in await admin.get_broadcaster_subscriptions():
                assert info.id not in out, f"subscription {info.id} is delivered twice"
                out[info.id] = f"b{i}"
    return out


async def test_broadcasters_share_the_subscriptions_and_show_it(
    cluster: list[ServerProcess], endpoints: Any
) -> None:
    servers = cluster
    rec = Recorder()
    ep = await endpoints(rec)
    sub_ids = await setup(servers, ep.url, 30)

    # Every subscription is delivered by exactly one broadcaster, and more than one works.
    async def settled() -> dict[int, str] | None:
        h = await holders(servers)
        return h if sorted(h) == sorted(sub_ids) else None

    by = await eventually(settled, timeout=20)
    assert len(set(by.values())) >= 2

    async def shown() -> bool:
        """What the admin methods show agrees with one settled reading of the holders (on
        a loaded machine a share may move between two readings: then look again)."""
        before = await settled()
        if before is None or len(set(before.values())) < 2:
            return False
        async with Admin(servers[1].url, servers[1].admin_token) as admin:
            infos = await admin.get_broadcasters()
            assert [b.broadcaster for b in infos] == ["b0", "b1", "b2"]
            stats = {b.broadcaster: dict(b.stats) for b in infos}
            assert stats["b2"]["tidings:broadcaster:url"] == {"Text": f"http://127.0.0.1:{servers[2].port}"}
            # The publication, and each broadcaster's own control-plane namespace.
            assert {k: s["tidings:broadcaster:publications"]["Nat"] for k, s in stats.items()} == {
                k: 1 + (k == owner) for k, owner in zip(stats, [await owner_of(admin, NS)] * 3, strict=True)
            }
            assert [b.broadcaster for b in await admin.get_broadcasters(prev="b0", take=1)] == ["b1"]
            serving = await admin.get_publication_broadcasters(NS)
            roles = {b.broadcaster: dict(b.stats)["tidings:broadcaster:role"]["Text"] for b in serving}
            assert list(roles.values()).count("owner") == 1
            counts = {b.broadcaster: dict(b.stats)["tidings:broadcaster:publication:subscriptions"]["Nat"]
                      for b in serving}
            with pytest.raises(Exception, match="namespace"):
                await admin.get_publication_broadcasters("com.example.nothing")
            assert await owner_of(admin, "icrc72:broadcaster:sys:b2") == "b2"
            named = await admin.get_broadcaster_subscriptions("b0")
        return (
            await settled() == before
            and sum(s["tidings:broadcaster:subscriptions"]["Nat"] for s in stats.values()) == 30
            and set(roles) >= set(before.values()) and sum(counts.values()) == 30
            and {s.id for s in named} == {i for i, b in before.items() if b == "b0"}
        )

    await eventually(shown, timeout=30, interval=0.3)

    # Each broadcaster recorded what it took on its control-plane namespace; an admin
    # tails it, nobody registers or publishes to it, and only admins subscribe to it. (A
    # heartbeat records what it took once it has taken its whole share, so the last
    # record may come a moment after the subscription shows as held.)
    async def recorded() -> dict[int, str]:
        log = [e for k, s in enumerate(servers) for e in await control_events(s, f"icrc72:broadcaster:sys:b{k}")]
        out: dict[int, str] = {}
        for e in sorted(log, key=lambda e: e["seq"]):
            for _ns, _subscriber, sub_id in e["data"].get("icrc72:broadcaster:subscriber:remove", []):
                assert out.pop(sub_id) == e["source"]
            for ns, subscriber, sub_id in e["data"].get("icrc72:broadcaster:subscriber:add", []):
                assert (ns, subscriber) == (NS, "admin")
                out[sub_id] = e["source"]
        return out

    async def recorded_all() -> bool:
        # Against the holders as they are at each look: on a loaded machine a share may
        # still move after the first settled reading, and the log follows it.
        now = await holders(servers)
        return sorted(now) == sorted(sub_ids) and await recorded() == now

    await eventually(recorded_all, timeout=30, interval=0.2)
    alice = servers[0].cli("principal", "create", "alice")
    async with aiohttp.ClientSession() as http:
        for method, arg in (
            ("icrc72_register_publication", [{"namespace": "icrc72:broadcaster:sys:b9"}]),
            ("icrc72_register_subscription", [{"namespace": "icrc72:broadcaster:sys:b0", "endpoint": ep.url}]),
            ("icrc72_publish", [{"namespace": "icrc72:broadcaster:sys:b0", "data": {"Nat": 1}}]),
        ):
            async with http.post(f"{servers[1].url}/v1/{method}", json=arg,
                                 headers={"authorization": f"Bearer {alice}"}) as r:
                (item,) = await r.json()
                assert "Err" in item, (method, item)
        async with http.post(f"{servers[1].url}/v1/icrc72_publish", json=[
            {"namespace": "icrc72:broadcaster:sys:b0", "data": {"Nat": 1}}
        ], headers={"authorization": f"Bearer {servers[1].admin_token}"}) as r:
            (item,) = await r.json()
            assert "Err" in item  # not even an admin writes the service's own log

    # Events published through any broadcaster reach every subscription once, in order.
    for i, s in enumerate(servers):
        async with Publisher(s.url, s.admin_token) as pub:
            await pub.publish_many(NS, range(i * 10, i * 10 + 10))
    await eventually(lambda: all(len(rec.got[i]) >= 30 for i in sub_ids), timeout=20)
    for i in sub_ids:
        assert rec.got[i] == list(range(1, 31)), i

    # A publisher that follows owners publishes to the publication's owner, whichever
    # broadcaster it was given; when the owner is down, through the one it was given.
    async with Admin(servers[0].url, servers[0].admin_token) as admin:
        owner = await owner_of(admin, NS)

        async def counted() -> dict[str, int]:
            infos = await admin.get_broadcasters(stats_filter=["icrc72:broadcaster:stats:events"])
            return {b.broadcaster: dict(b.stats)["icrc72:broadcaster:stats:events"]["Nat"] for b in infos}

        before = await counted()
        given = next(s for k, s in enumerate(servers) if f"b{k}" != owner)
        async with Publisher(given.url, given.admin_token, follow_owners=True) as pub:
            await pub.publish_many(NS, range(5))
        after = await counted()
        assert {k: after[k] - before[k] for k in after} == {k: 5 * (k == owner) for k in after}

        # A publisher that does not follow owners: the broadcaster it reaches forwards the
        # events to the owner (icrc72_publish_relay), which stores and counts them.
        async with Publisher(given.url, given.admin_token) as pub:
            assert await pub.publish_many(NS, range(5)) == list(range(36, 41))
        again = await counted()
        assert {k: again[k] - after[k] for k in after} == {k: 5 * (k == owner) for k in after}
    await relay_is_for_peers_only(given)  # it publishes event 41
    await eventually(lambda: all(len(rec.got[i]) >= 41 for i in sub_ids), timeout=20)

    # The publications listed are the users' (not the control plane's), and a
    # publication's events count as sent once every subscription has them, wherever it
    # is delivered (the others' stored cursors).
    async with Admin(servers[2].url, servers[2].admin_token) as admin:

        async def all_sent() -> bool:
            pubs = {p.namespace: dict(p.stats) for p in await admin.get_publications()}
            assert list(pubs) == [NS]
            got = {k: v["Nat"] for k, v in pubs[NS].items() if k.startswith("icrc72:publication:stats:events")}
            return got == {"icrc72:publication:stats:events": 41, "icrc72:publication:stats:events:sent": 41}

        await eventually(all_sent, timeout=20)

    # A change made through one broadcaster holds on the one delivering: a subscription
    # stopped through another gets nothing more.
    target = sub_ids[0]
    other = next(s for k, s in enumerate(servers) if f"b{k}" != by[target])
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{other.url}/v1/icrc72_stop_subscription", json=[target],
            headers={"authorization": f"Bearer {other.admin_token}"},
        ) as r:
            assert await r.json() == [{"Ok": True}]
    # The stop also travelled as a command on the log: to the namespace of the
    # broadcaster delivering it, from the one it was made through.
    made_through, deliverer = f"b{servers.index(other)}", by[target]

    async def stop_command() -> bool:
        got = await control_events(servers[int(deliverer[1:])], f"icrc72:broadcaster:sys:{deliverer}")
        return any(
            e["source"] == made_through and [NS, "admin", target] in e["data"].get(STOP, []) for e in got
        )

    await eventually(stop_command, timeout=10)
    async with Publisher(servers[0].url, servers[0].admin_token) as pub:
        await pub.publish(NS, 99)
    await eventually(lambda: all(len(rec.got[i]) >= 42 for i in sub_ids if i != target), timeout=20)
    assert len(rec.got[target]) == 41
    # Asked through a broadcaster that does not deliver it, the stopped subscription
    # still holds the publication's sent count back, as it would where it is delivered.
    async with Admin(other.url, other.admin_token) as admin:
        (pub_info,) = await admin.get_publications()
        got = {k: v["Nat"] for k, v in pub_info.stats if k.startswith("icrc72:publication:stats:events")}
        assert got == {"icrc72:publication:stats:events": 42, "icrc72:publication:stats:events:sent": 41}

    # A publication registered through one broadcaster takes events through another at
    # once, from callers publishing at the same moment.
    async with Publisher(servers[1].url, servers[1].admin_token) as pub:
        await pub.register_publication("com.example.fresh")
    async with Publisher(servers[2].url, servers[2].admin_token) as pub:
        got = await asyncio.gather(*(pub.publish("com.example.fresh", k) for k in range(8)))
    assert sorted(got) == list(range(1, 9))

    # The owner down: a publisher that follows owners publishes through the one it was given.
    dead = servers[int(owner[1:])]
    dead.kill()
    given = next(s for s in servers if s is not dead)
    async with Publisher(given.url, given.admin_token, follow_owners=True) as pub:
        assert await pub.publish(NS, 7) == 43


async def test_a_killed_broadcaster_s_subscriptions_move_and_nothing_acknowledged_is_lost(
    cluster: list[ServerProcess], endpoints: Any
) -> None:
    """Three broadcasters; publishers publish through all of them while each in turn is
    killed with SIGKILL and started again. Every event answered Ok reaches every
    subscription, in order (repeats allowed), and a killed broadcaster's subscriptions
    are delivered again within 10 s."""
    servers = cluster
    rec = Recorder()
    ep = await endpoints(rec)
    sub_ids = await setup(servers, ep.url, 12)
    await eventually(lambda: _all_held(servers, sub_ids), timeout=20)

    acked: list[int] = []
    stop = asyncio.Event()

    async def publish() -> None:
        k = 0
        async with aiohttp.ClientSession() as http:
            for s in itertools.cycle(servers):
                if stop.is_set():
                    return
                if s.proc is None:
                    continue
                try:
                    async with http.post(
                        f"{s.url}/v1/icrc72_publish", json=[{"namespace": NS, "data": {"Nat": k}}],
                        headers={"authorization": f"Bearer {s.admin_token}"},
                        timeout=aiohttp.ClientTimeout(total=5),
                    ) as r:
                        if r.status == 200:
                            (item,) = await r.json()
                            if item and "Ok" in item:
                                acked.extend(item["Ok"])
                except (TimeoutError, aiohttp.ClientError):
                    pass  # not acknowledged: it may or may not be delivered
                k += 1
                await asyncio.sleep(0.01)

    failovers: list[float] = []
    task = asyncio.create_task(publish())
    try:
        for victim in servers:
            await asyncio.sleep(1.0)
            theirs = [i for i, b in (await holders(servers)).items() if b == f"b{servers.index(victim)}"]
            victim.kill()
            killed_at = time.monotonic()
            mark = max(acked, default=0)
            if theirs:
                # Delivery of what is published after the kill resumes for each of its subscriptions.
                async def resumed(subs: list[int] = theirs, mark: int = mark) -> bool:
                    return all(any(e > mark for e in rec.got[i]) for i in subs)

                await eventually(resumed, timeout=15)
                firsts = [min(t for (s, e), t in rec.first_at.items() if s == i and e > mark) for i in theirs]
                failovers.append(max(firsts) - killed_at)
            victim.start()
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await task

    assert len(acked) > 100
    assert failovers and max(failovers) <= 10, failovers
    await eventually(lambda: all(set(acked) <= set(rec.got[i]) for i in sub_ids), timeout=30)
    for i in sub_ids:
        firsts = list(dict.fromkeys(rec.got[i]))
        assert firsts == sorted(firsts), f"subscription {i} saw events out of order"


async def relay_is_for_peers_only(server: ServerProcess) -> None:
    """``icrc72_publish_relay`` stores events as their publisher only when signed with the
    secret the broadcasters share: not unsigned, not with a forged or stale signature,
    not with a body other than the one signed."""
    import asyncpg
    import msgspec

    from tidings.broker.cluster import RELAY_HEADER, RelayBatch, Relayed, sign
    from tidings.core.ingest import PublishBatch, prepare
    from tidings.core.wire import Event

    database, schema = server.env["TIDINGS_STORE"].split("?search_path=")
    conn = await asyncpg.connect(database)
    try:
        secret = bytes(await conn.fetchval(f"SELECT value FROM {schema}.cluster_secrets WHERE name = 'peer'"))
    finally:
        await conn.close()
    now = time.time_ns()
    rows, _ = prepare([Event(namespace=NS, data={"Nat": 5})], now)
    body = msgspec.msgpack.encode(RelayBatch("admin", PublishBatch(1, now, rows, [])))
    ms = now // 1_000_000
    url = f"{server.url}/v1/icrc72_publish_relay"
    async with aiohttp.ClientSession() as http:
        for headers, data in (
            ({}, body),
            ({RELAY_HEADER: sign(b"guessed", body, ms)}, body),
            ({RELAY_HEADER: sign(secret, body, ms - 120_000)}, body),  # captured two minutes ago
            ({RELAY_HEADER: sign(secret, body, ms)}, body.replace(b"admin", b"alice")),
            ({RELAY_HEADER: "t=1,v1=" + "0" * 64}, body),
        ):
            async with http.post(url, data=data, headers=headers) as r:
                assert r.status == 403, (headers, await r.text())
                assert (await r.json())["error"]["code"] == "forbidden"
        # Signed, but not a relay: 400, whatever the body (garbage, empty, positions out of range).
        bad_index = msgspec.structs.replace(rows[0], index=7)
        for data in (b"\xff" * 64, b"", msgspec.msgpack.encode(["admin"]),
                     msgspec.msgpack.encode(RelayBatch("admin", PublishBatch(1, now, [bad_index], []))),
                     msgspec.msgpack.encode(RelayBatch("admin", PublishBatch(2**64 - 1, now, rows, [])))):
            async with http.post(url, data=data, headers={RELAY_HEADER: sign(secret, data, ms)}) as r:
                assert r.status == 400, (data[:40], await r.text())
        async with http.post(url, data=body, headers={RELAY_HEADER: sign(secret, body, ms)}) as r:
            assert r.status == 200
            (item,) = msgspec.msgpack.decode(await r.read(), type=Relayed).results
            assert item is not None and item.Ok


async def owner_of(admin: Admin, namespace: str) -> str:
    (owner,) = [b.broadcaster for b in await admin.get_publication_broadcasters(namespace)
                if dict(b.stats)["tidings:broadcaster:role"] == {"Text": "owner"}]
    return owner


async def control_events(server: ServerProcess, namespace: str) -> list[dict[str, Any]]:
    """The recent events of a namespace, through the console's tail feed, as the admin."""
    out: list[dict[str, Any]] = []
    feed = events(server, f"tail?namespace={namespace}", server.admin_token)
    async with contextlib.aclosing(feed):
        async for name, data in feed:
            if name == "ready":
                break
            if name == "event":
                out.append(data)
    return out


async def _at_least(count: Any, n: int) -> bool:
    return int(await count) >= n


async def _all_held(servers: list[ServerProcess], sub_ids: list[int]) -> bool:
    return sorted(await holders(servers)) == sorted(sub_ids)


async def test_a_broadcaster_that_missed_signals_catches_up(
    cluster: list[ServerProcess], pg_database: str, endpoints: Any
) -> None:
    """The connections the broadcasters hear each other on are cut (as a database restart
    or a network fault would): they listen again and read what they missed, so
    subscriptions registered meanwhile through one of them are delivered by all."""
    import asyncpg

    servers = cluster
    conn = await asyncpg.connect(pg_database)
    listening = "FROM pg_stat_activity WHERE query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()"
    try:
        await eventually(lambda: _at_least(conn.fetchval(f"SELECT count(*) {listening}"), 3), timeout=10)
        await conn.fetch(f"SELECT pg_terminate_backend(pid) {listening}")
    finally:
        await conn.close()
    rec = Recorder()
    ep = await endpoints(rec)
    sub_ids = await setup(servers[:1], ep.url, 30)  # all through b0
    await eventually(lambda: _all_held(servers, sub_ids), timeout=20)
    assert len(set((await holders(servers)).values())) >= 2
    async with Publisher(servers[2].url, servers[2].admin_token) as pub:
        await pub.publish(NS, 1)
    await eventually(lambda: all(rec.got[i] == [1] for i in sub_ids), timeout=20)


async def test_the_replay_limits_count_the_replays_of_every_broadcaster(
    server_factory: Callable[..., ServerProcess], pg_database: str, endpoints: Any
) -> None:
    """``replay_max_concurrent`` is one limit for the cluster: a replay registered through
    a broadcaster that does not deliver its subscription (it runs where the subscription
    is delivered) still counts there, and everywhere else."""
    hold = asyncio.Event()

    async def subscriber(scope: Any, receive: Any, send: Any) -> None:
        body = json.loads(await read_body(receive))
        if any(k == "icrc77:replay:id" for n in body for k, _ in n.get("headers") or []):
            await hold.wait()  # the replay stays running
        await respond(send)

    ep = await endpoints(subscriber)
    with nodes(server_factory, pg_database, 2, replay_max_concurrent="1") as servers:
        sub_ids = await setup(servers[:1], ep.url, 6)
        await eventually(lambda: _all_held(servers, sub_ids), timeout=20)
        where = await holders(servers)
        assert set(where.values()) == {"b0", "b1"}, where
        async with Publisher(servers[0].url, servers[0].admin_token) as pub:
            for k in range(5):
                await pub.publish(NS, k)
        elsewhere = next(i for i in sub_ids if where[i] == "b1")

        async def replay(server: ServerProcess, sub: int) -> dict[str, Any]:
            async with aiohttp.ClientSession() as http:
                (item,) = await admin_api(http, server, "icrc77_register_replay", [{
                    "namespace": NS, "range": [1, None], "config": [["icrc77:replay:subscription", {"Nat": sub}]],
                }])
            return dict(item)

        assert "Ok" in await replay(servers[0], elsewhere)  # registered at b0, run by b1
        for server in servers:
            for sub in sub_ids[:2]:
                busy = await replay(server, sub)
                assert busy["Err"]["GenericError"]["error_code"] == 7702, busy
        hold.set()
