"""Publishing, ids, headers, permissions, info queries and principals, end to end."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import time
from collections import defaultdict
from typing import Any

import aiohttp
import msgspec
import pytest

from tidings.api.methods import METHODS
from tidings.client import (
    Admin,
    ApiResponseError,
    Event,
    EventNotification,
    ItemError,
    Publisher,
    Subscriber,
    SyncAdmin,
    SyncPublisher,
    item_result,
)

from .conftest import ServerProcess, eventually

pytestmark = pytest.mark.e2e

A = "com.example.a"
B = "com.example.b"


class Inbox:
    """A trusted subscriber's handler: keeps every notification per namespace."""

    def __init__(self) -> None:
        self.by_ns: dict[str, list[EventNotification]] = defaultdict(list)

    async def __call__(self, n: EventNotification) -> None:
        self.by_ns[n.namespace].append(n)

    def count(self, ns: str) -> int:
        return len(self.by_ns[ns])


async def subscribed_inbox(server: ServerProcess, endpoints: Any, *namespaces: str) -> tuple[Inbox, Subscriber]:
    inbox = Inbox()
    sub = Subscriber(inbox, url=server.url, token=server.admin_token)
    ep = await endpoints(sub)
    for ns in namespaces:
        await sub.subscribe(ns, ep.url)
    return inbox, sub


def assert_chain(notes: list[EventNotification], n: int) -> None:
    assert [x.eventId for x in notes] == list(range(1, n + 1))
    assert [x.prev_id for x in notes] == [None, *range(1, n)]


async def test_ids_are_gap_free_per_namespace(server: ServerProcess, endpoints: Any) -> None:
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(A)
        await pub.register_publication(B)
        inbox, sub = await subscribed_inbox(server, endpoints, A, B)
        assert [await pub.publish(A, i) for i in range(5)] == [1, 2, 3, 4, 5]
        assert await pub.publish_many(B, range(3)) == [1, 2, 3]
        # A batch across namespaces: each continues its own chain.
        results = await pub.publish_batch([pub.event(A, "x"), pub.event(B, "y"), pub.event(A, "z")])
        assert [item_result(r) for r in results] == [[6], [4], [7]]
        await eventually(lambda: inbox.count(A) == 7 and inbox.count(B) == 4)
        assert_chain(inbox.by_ns[A], 7)
        assert_chain(inbox.by_ns[B], 4)
        # A namespace registered later starts at 1, whatever the others are at.
        await pub.register_publication("com.example.c")
        assert await pub.publish("com.example.c", 0) == 1
    await sub.close()


async def test_concurrent_publishes_stay_gap_free(server: ServerProcess, endpoints: Any) -> None:
    calls, per_call = 20, 10
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(A)
        await pub.register_publication(B)
        inbox, sub = await subscribed_inbox(server, endpoints, A, B)

        async def one_call(k: int) -> list[tuple[str, int]]:
            # Calls mix the two namespaces differently so their batches interleave.
            events = [pub.event(A if (k + j) % 3 else B, {"call": k, "j": j}) for j in range(per_call)]
            results = await pub.publish_batch(events)
            return [(e.namespace, item_result(r)[0]) for e, r in zip(events, results, strict=True)]

        got: dict[str, list[int]] = defaultdict(list)
        for pairs in await asyncio.gather(*(one_call(k) for k in range(calls))):
            ids_in_call: dict[str, list[int]] = defaultdict(list)
            for ns, i in pairs:
                got[ns].append(i)
                ids_in_call[ns].append(i)
            for ids in ids_in_call.values():  # one call's events keep their order
                assert ids == sorted(ids)
        n_a, n_b = len(got[A]), len(got[B])
        assert n_a + n_b == calls * per_call and n_a and n_b
        assert sorted(got[A]) == list(range(1, n_a + 1))
        assert sorted(got[B]) == list(range(1, n_b + 1))
        await eventually(lambda: inbox.count(A) == n_a and inbox.count(B) == n_b)
        assert_chain(inbox.by_ns[A], n_a)
        assert_chain(inbox.by_ns[B], n_b)
        async with Admin(server.url, server.admin_token) as admin:
            stats = {p.namespace: dict(p.stats) for p in await admin.get_publications()}
        assert stats[A]["icrc72:publication:stats:events"] == {"Nat": n_a}
        assert stats[B]["icrc72:publication:stats:events"] == {"Nat": n_b}
    await sub.close()


async def test_timestamps_and_broadcaster_headers(server: ServerProcess, endpoints: Any) -> None:
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(A)
        inbox, sub = await subscribed_inbox(server, endpoints, A)
        before = time.time_ns()
        # A publisher-supplied timestamp is not the event's: the broadcaster stamps it.
        stamped = Event(namespace=A, data={"Text": "t"}, timestamp=1, headers=[("z-first", {"Nat": 1})])
        (r,) = await pub.publish_batch([stamped])
        assert item_result(r) == [1]
        await pub.publish(A, {"order": 7, "items": [1, 2]}, headers={"x-b": "two", "x-a": 1})
        await pub.publish(A, 3)  # no headers of its own
        after = time.time_ns()
        await eventually(lambda: inbox.count(A) == 3)
    await sub.close()

    # On PostgreSQL the stamp is the cluster's clock, the database's as the last heartbeat
    # measured it: within half that round trip (and the drift since) of this process's
    # wall clock (docs/semantics.md, "Time"), not exactly on it.
    slack = 50_000_000
    for n in inbox.by_ns[A]:
        assert before - slack <= n.timestamp <= after + slack
        keys = [k for k, _ in n.headers]
        reserved = ["icrc72:broadcaster:received", "icrc72:eventData:hash", "icrc72:broadcaster:sent"]
        assert keys[-3:] == reserved
        h = dict(n.headers)
        assert h["icrc72:broadcaster:received"] == {"Nat": n.timestamp}
        sent = h["icrc72:broadcaster:sent"]["Nat"]
        assert n.timestamp <= sent <= time.time_ns()
        digest = base64.b64decode(h["icrc72:eventData:hash"]["Blob"], validate=True)
        assert len(digest) == 32
        assert digest == hashlib.sha256(msgspec.json.encode(n.data)).digest()
    first, second, third = inbox.by_ns[A]
    assert [k for k, _ in first.headers][:-3] == ["z-first"]
    # The publisher's own headers keep their order and values, ahead of the reserved ones.
    assert second.headers[:2] == [("x-b", {"Text": "two"}), ("x-a", {"Nat": 1})]
    assert len(third.headers) == 3
    assert first.timestamp <= second.timestamp <= third.timestamp


async def test_only_registered_publishers_may_publish(server: ServerProcess) -> None:
    async with Admin(server.url, server.admin_token) as admin:
        bob_token = await admin.create_principal("bob")
        async with Publisher(server.url, server.admin_token) as owner, Publisher(server.url, bob_token) as bob:
            await owner.register_publication(A, {"icrc72:publication:mode": "fifo"})
            assert await owner.publish(A, 1) == 1
            (r,) = await bob.publish_batch([bob.event(A, 2)])
            with pytest.raises(ItemError) as e:
                item_result(r)
            assert e.value.code == "Unauthorized"
            # Joining with a different config is refused; joining without one makes bob a publisher.
            with pytest.raises(ItemError) as e:
                await bob.register_publication(A, {"icrc72:publication:mode": "other"})
            assert e.value.code == "ImproperConfig"
            (r,) = await bob.publish_batch([bob.event(A, 2)])
            assert r is not None and r.Err is not msgspec.UNSET and r.Err.code == "Unauthorized"
            await bob.register_publication(A)
            await bob.register_publication(A)  # idempotent
            assert await bob.publish(A, 2) == 2  # the refused attempts left no gap
            assert await owner.publish(A, 3) == 3
        (info,) = await admin.get_publications()
        stats = dict(info.stats)
        assert stats["icrc72:publication:stats:publishers"] == {"Nat": 2}
        assert stats["icrc72:publication:stats:events"] == {"Nat": 3}
        assert info.config == [("icrc72:publication:mode", {"Text": "fifo"})]


async def subs_delivered(admin: Admin, n: int) -> bool:
    return len(await admin.get_broadcaster_subscriptions()) == n


async def test_info_queries_page_and_filter(server: ServerProcess, endpoints: Any) -> None:
    async def sink(n: EventNotification) -> None:
        pass

    async with Admin(server.url, server.admin_token) as admin:
        bob_token = await admin.create_principal("bob")
        carol_token = await admin.create_principal("carol")
        namespaces = ["com.example.q1", "com.example.q2", "com.example.q3"]
        async with Publisher(server.url, server.admin_token) as pub, Publisher(server.url, bob_token) as bob:
            for ns in namespaces:
                await pub.register_publication(ns)
            await bob.register_publication("com.example.q2")
            bob_sub = Subscriber(sink, url=server.url, token=bob_token)
            carol_sub = Subscriber(sink, url=server.url, token=carol_token)
            sink_app = Subscriber(sink)
            ep = await endpoints(sink_app)
            s1 = await bob_sub.subscribe("com.example.q1", ep.url)
            s2 = await carol_sub.subscribe("com.example.q2", ep.url + "carol")
            s3 = await bob_sub.subscribe("com.example.q2", ep.url, stopped=True)
            await pub.publish_many("com.example.q1", range(4))
            await bob.publish("com.example.q2", "b")

        # -- publications, ordered by namespace, paged with prev/take
        pubs = await admin.get_publications()
        assert [p.namespace for p in pubs] == namespaces
        assert [p.namespace for p in await admin.get_publications(take=2)] == namespaces[:2]
        assert [p.namespace for p in await admin.get_publications(prev=namespaces[0])] == namespaces[1:]
        assert [p.namespace for p in await admin.get_publications(prev=namespaces[0], take=1)] == namespaces[1:2]
        assert await admin.get_publications(prev=namespaces[-1]) == []
        assert await admin.get_publications(take=0) == []
        stats = {p.namespace: dict(p.stats) for p in pubs}
        assert stats["com.example.q1"]["icrc72:publication:stats:events"] == {"Nat": 4}
        assert stats["com.example.q2"]["icrc72:publication:stats:publishers"] == {"Nat": 2}
        assert stats["com.example.q3"]["icrc72:publication:stats:events"] == {"Nat": 0}
        only = await admin.get_publications(stats_filter=["icrc72:publication:stats:events"])
        assert all([k for k, _ in p.stats] == ["icrc72:publication:stats:events"] for p in only)
        prefixed = await admin.get_publications(stats_filter=["icrc72:publication:stats:"])
        # (delivery goes on meanwhile: compare the keys, and the counts that are settled)
        # tidings' own counters (recorded, retries...) are not under the prefix.
        assert [[k for k, _ in p.stats] for p in prefixed] == [
            [k for k in stats[ns] if k.startswith("icrc72:")] for ns in namespaces
        ]
        assert len(prefixed[0].stats) == 5  # publishers, events, events:sent, notifications, confirmations
        assert all(p.stats == [] for p in await admin.get_publications(stats_filter=[]))

        # -- publishers, ordered by principal
        publishers = await admin.get_publishers()
        assert [p.publisher for p in publishers] == ["admin", "bob"]
        pstats = {p.publisher: dict(p.stats) for p in publishers}
        assert pstats["admin"]["icrc72:publisher:stats:publications"] == {"Nat": 3}
        assert pstats["admin"]["icrc72:publisher:stats:events"] == {"Nat": 4}
        assert pstats["bob"]["icrc72:publisher:stats:publications"] == {"Nat": 1}
        assert pstats["bob"]["icrc72:publisher:stats:events"] == {"Nat": 1}
        assert [p.publisher for p in await admin.get_publishers(prev="admin")] == ["bob"]
        assert [p.publisher for p in await admin.get_publishers(take=1)] == ["admin"]
        (p,) = await admin.get_publishers(take=1, stats_filter=["icrc72:publisher:stats:events"])
        assert p.stats == [("icrc72:publisher:stats:events", {"Nat": 4})]

        # -- subscribers
        subscribers = await admin.get_subscribers()
        assert [s.subscriber for s in subscribers] == ["bob", "carol"]
        sstats = {s.subscriber: dict(s.stats) for s in subscribers}
        assert sstats["bob"]["icrc72:subscriber:stats:subscriptions"] == {"Nat": 2}
        assert sstats["bob"]["icrc72:subscriber:stats:subscriptions:active"] == {"Nat": 1}
        assert sstats["carol"]["icrc72:subscriber:stats:subscriptions"] == {"Nat": 1}
        assert [s.subscriber for s in await admin.get_subscribers(prev="bob")] == ["carol"]
        assert [s.subscriber for s in await admin.get_subscribers(take=1)] == ["bob"]

        # -- subscriptions, ordered by id, optionally of one namespace
        subs = await admin.get_subscriptions()
        assert [s.id for s in subs] == sorted([s1, s2, s3])
        assert [s.id for s in await admin.get_subscriptions(namespace="com.example.q2")] == sorted([s2, s3])
        assert [s.id for s in await admin.get_subscriptions(prev=subs[0].id)] == [s.id for s in subs[1:]]
        assert [s.id for s in await admin.get_subscriptions(take=1)] == [subs[0].id]
        assert await admin.get_subscriptions(namespace="com.example.q3") == []
        by_id = {s.id: s for s in subs}
        assert by_id[s1].subscriber == "bob" and by_id[s1].namespace == "com.example.q1"
        assert by_id[s1].mode == "trusted"
        assert ("icrc72:subscription:stopped", {"Bool": True}) in by_id[s3].config
        (only_sub,) = await admin.get_subscriptions(
            namespace="com.example.q1", stats_filter=["icrc72:subscription:stats:notifications"]
        )
        assert [k for k, _ in only_sub.stats] == ["icrc72:subscription:stats:notifications"]
        # Endpoints are shown to the admin and to the subscriber, hidden from others.
        assert by_id[s2].endpoint == ep.url + "carol"
        async with Admin(server.url, bob_token) as as_bob:
            seen = {s.id: s.endpoint for s in await as_bob.get_subscriptions()}
        assert seen[s1] == ep.url and seen[s3] == ep.url and seen[s2] is None

        # -- broadcasters: this one
        (b,) = await admin.get_broadcasters()
        # On PostgreSQL the default name becomes <host>:<port> (docs/operations.md).
        me = f"{socket.gethostname()}:{server.port}" if "TIDINGS_STORE" in server.env else "tidings-broadcaster-1"
        assert b.broadcaster == me
        assert dict(b.stats)["icrc72:broadcaster:stats:events"] == {"Nat": 5}
        assert await admin.get_broadcasters(prev=b.broadcaster) == []
        assert await admin.get_broadcasters(take=0) == []
        (b,) = await admin.get_broadcasters(stats_filter=["nothing:"])
        assert b.stats == []
        # Alone, it owns every publication and delivers every subscription (docs/scaling.md);
        # on PostgreSQL, once its next heartbeat has taken their leases.
        await eventually(lambda: subs_delivered(admin, 3), timeout=5)
        (b,) = await admin.get_publication_broadcasters("com.example.q2")
        assert b.broadcaster == me
        assert dict(b.stats)["tidings:broadcaster:role"] == {"Text": "owner"}
        assert dict(b.stats)["tidings:broadcaster:publication:subscriptions"] == {"Nat": 2}
        assert [s.id for s in await admin.get_broadcaster_subscriptions()] == sorted([s1, s2, s3])
        assert await admin.get_broadcaster_subscriptions("another") == []
        async with Admin(server.url, bob_token) as as_bob:
            seen = {s.id: s.endpoint for s in await as_bob.get_broadcaster_subscriptions()}
        assert seen[s1] == ep.url and seen[s2] is None
    for s in (bob_sub, carol_sub, sink_app):
        await s.close()


async def test_principals(server: ServerProcess) -> None:
    alice_token = server.cli("principal", "create", "alice")
    assert alice_token.startswith("tid_")
    async with Admin(server.url, alice_token) as alice:
        assert await alice.whoami() == "alice"
        with pytest.raises(ApiResponseError) as e:
            await alice.create_principal("eve")
        assert (e.value.status, e.value.code) == (403, "forbidden")
    # A further token for the same principal works too; the first one still does.
    second = server.cli("principal", "token", "alice")
    assert second != alice_token
    async with Admin(server.url, second) as alice2, Admin(server.url, alice_token) as alice1:
        assert await alice2.whoami() == await alice1.whoami() == "alice"
    # Creating a duplicate from the command line fails and prints no token.
    proc = await asyncio.create_subprocess_exec(
        *_cli(server, "principal", "create", "alice"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **server.env},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 1 and out == b"" and b"already exists" in err
    assert "alice" in server.cli("principal", "list").split()

    async with Admin(server.url, server.admin_token) as admin:
        dave_token = await admin.create_principal("dave")
        async with Admin(server.url, dave_token) as dave:
            assert await dave.whoami() == "dave"
        for name in ("dave", "alice", "admin"):
            with pytest.raises(ApiResponseError) as e:
                await admin.create_principal(name)
            assert (e.value.status, e.value.code) == (400, "already_exists")
        with pytest.raises(ApiResponseError) as e:
            await admin.create_principal("no spaces allowed")
        assert (e.value.status, e.value.code) == (400, "invalid_argument")
        # An admin made through the API may create principals itself.
        root_token = await admin.create_principal("root", admin=True)
        async with Admin(server.url, root_token) as root:
            frank = await root.create_principal("frank")
        async with Admin(server.url, frank) as f:
            assert await f.whoami() == "frank"


def _cli(server: ServerProcess, *args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "tidings", *args, "--data-dir", str(server.data_dir)]


async def test_openapi_lists_every_method(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url + "/openapi.json") as resp:
            assert resp.status == 200
            doc = await resp.json()
        async with http.get(server.url + "/healthz") as resp:
            assert resp.status == 200
    assert doc["openapi"].startswith("3.")
    assert {p for p in doc["paths"] if p.startswith("/v1/")} == {f"/v1/{name}" for name in METHODS}
    # The Confluent-compatible face is in the document too, every verb of it.
    from tidings.api.confluent import ENDPOINTS

    for verb, pattern, _ in ENDPOINTS:
        found = [p for p, ops in doc["paths"].items() if p.split("/")[1] == pattern[0] and verb.lower() in ops
                 and len(p.strip("/").split("/")) == len(pattern)]
        assert found, (verb, pattern)
    for name in METHODS:
        op = doc["paths"][f"/v1/{name}"]["post"]
        assert op["operationId"] == name
        assert "200" in op["responses"]


async def test_sync_faces_work_from_a_thread(server: ServerProcess) -> None:
    url, token = server.url, server.admin_token

    def script() -> tuple[list[int], str, list[str], str]:
        with SyncAdmin(url, token) as admin:
            sam_token = admin.create_principal("sam")
            me = admin.whoami()
        pub = SyncPublisher(url, sam_token)
        try:
            pub.register_publication(A)
            ids = [pub.publish(A, {"n": 1}), *pub.publish_many(A, [2, 3])]
            try:
                pub.publish("com.example.unknown", 1)
            except ApiResponseError as e:
                assert e.code == "namespace_not_found"
            else:
                raise AssertionError("publishing to an unknown namespace succeeded")
        finally:
            pub.close()
        admin = SyncAdmin(url, sam_token)
        try:
            namespaces = [p.namespace for p in admin.get_publications()]
            who = admin.whoami()
        finally:
            admin.close()
        return ids, me, namespaces, who

    ids, me, namespaces, who = await asyncio.to_thread(script)
    assert ids == [1, 2, 3]
    assert me == "admin" and who == "sam"
    assert namespaces == [A]
