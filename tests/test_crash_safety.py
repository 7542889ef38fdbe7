"""Crash safety: SIGKILL the server repeatedly while events are published and delivered.

Several publishers publish batches to two namespaces and retry a batch that got no
answer (a kill) until it is answered; four trusted-mode subscriptions record every push.
After the last restart, once delivery has settled, the durability and delivery promises
of docs/semantics.md are checked:

* every event answered ``Ok`` reached every subscription whose filter matches it, with
  the data it was published with;
* nothing is delivered that no publisher sent;
* first deliveries are in event-id order per namespace and subscription;
* a repeat carries the same ``(namespace, eventId)`` and the same data as the first;
* each namespace's ids are gap-free, 1..N.

A publish that got no answer may have been stored (and a retry of it stored again under
other ids): events are therefore tracked by a ``uid`` in their data, not by their answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, admin_api, read_body, respond

pytestmark = pytest.mark.e2e

NS_A = "com.example.crash.a"
NS_B = "com.example.crash.b"
NAMESPACES = (NS_A, NS_B)
PATTERN = "com.example.crash.*"
FILTER = "color == red"

PUBLISHERS = 5
BATCHES_PER_PUBLISHER = 40
BATCH = 50
TOTAL = PUBLISHERS * BATCHES_PER_PUBLISHER * BATCH  # 10,000
KILLS_WHILE_PUBLISHING = 3
DEADLINE_S = 75.0


class Recorder:
    """A trusted-mode endpoint: records every notification in arrival order, answers 200."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.got: list[tuple[str, int, int, Any]] = []
        """(namespace, eventId, notification id, data) in arrival order."""
        self.sub_ids: set[str] = set()
        self.pushes = 0
        self.last_arrival = 0.0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = dict(scope["headers"])
        self.sub_ids.add(headers.get(b"x-tidings-subscription", b"").decode())
        self.pushes += 1
        self.last_arrival = time.monotonic()
        for n in json.loads(body):
            self.got.append((n["namespace"], n["eventId"], n["id"], n["data"]))
        await respond(send)


def fields(data: Any) -> dict[str, Any]:
    """The Map this test publishes, as {key: plain value}."""
    return {k: next(iter(v.values())) for k, v in data["Map"]}


def make_data(uid: str, color: str, n: int) -> dict[str, Any]:
    return {"Map": [["uid", {"Text": uid}], ["color", {"Text": color}], ["n", {"Nat": n}]]}


def nat_stats(stats: list[Any]) -> dict[str, int]:
    return {k: int(v["Nat"]) for k, v in stats}


class Run:
    """What the publishers sent and what was answered."""

    def __init__(self) -> None:
        self.sent: dict[str, tuple[str, Any]] = {}
        """uid -> (namespace, data) of everything any publisher sent."""
        self.ok: dict[tuple[str, int], str] = {}
        """(namespace, eventId) answered Ok -> uid."""
        self.ok_uids: set[str] = set()
        self.unexpected: list[Any] = []
        self.transport_errors = 0
        self.retried_batches = 0
        self.publishing = True


async def publisher(
    p: int, server: ServerProcess, run: Run, rng: random.Random, deadline: float
) -> None:
    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for b in range(BATCHES_PER_PUBLISHER):
            ns = NAMESPACES[(p + b) % 2]
            items = []
            for i in range(BATCH):
                uid = f"p{p}-b{b}-i{i}"
                data = make_data(uid, rng.choice(("red", "blue")), (b * BATCH + i))
                run.sent[uid] = (ns, data)
                items.append((uid, {"namespace": ns, "data": data}))
            # Publish the batch until every item is answered Ok; a batch that got no answer
            # is sent again as it was (it may have been stored: the uids tell).
            todo = items
            first = True
            while todo:
                assert time.monotonic() < deadline, f"publisher {p} could not publish batch {b} in time"
                if not first:
                    run.retried_batches += 1
                    await asyncio.sleep(0.05)
                first = False
                try:
                    async with http.post(
                        f"{server.url}/v1/icrc72_publish", data=json.dumps([e for _, e in todo]),
                        headers={"authorization": f"Bearer {server.admin_token}"},
                    ) as resp:
                        raw = await resp.read()
                        status = resp.status
                except (aiohttp.ClientError, TimeoutError, OSError):
                    run.transport_errors += 1
                    continue
                if status >= 500:
                    continue
                if status != 200:
                    run.unexpected.append((status, raw[:300]))
                    return
                results = json.loads(raw)
                assert len(results) == len(todo), results
                again = []
                for (uid, event), r in zip(todo, results, strict=True):
                    if r is not None and "Ok" in r:
                        (eid,) = r["Ok"]
                        key = (event["namespace"], int(eid))
                        assert key not in run.ok, f"{key} answered Ok twice ({run.ok[key]}, {uid})"
                        run.ok[key] = uid
                        run.ok_uids.add(uid)
                    elif r is None or next(iter(r["Err"])) in ("Busy", "GenericBatchError"):
                        again.append((uid, event))
                    else:
                        run.unexpected.append((uid, r))
                todo = again


async def kill_front(server: ServerProcess, rng: random.Random) -> None:
    """SIGKILL one front process (the broker starts another)."""
    for _ in range(200):
        fronts = server.children()
        if fronts:
            os.kill(rng.choice(fronts), signal.SIGKILL)
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the server has no front process to kill")


async def killer(server: ServerProcess, run: Run, rng: random.Random, kills: list[str], victim: str) -> None:
    """Kill the server (or one of its front processes) at about 15 %, 40 % and 65 % of the
    Ok answers, a little later each time, and once more just after the second restart."""
    for k in range(KILLS_WHILE_PUBLISHING):
        threshold = TOTAL * (0.15 + 0.25 * k)
        while len(run.ok) < threshold and run.publishing:
            await asyncio.sleep(0.005)
        await asyncio.sleep(rng.uniform(0.0, 0.15))
        kills.append(f"{victim} at {len(run.ok)} Ok{' (publishing)' if run.publishing else ''}")
        if victim == "front":
            await kill_front(server, rng)
            if k == 1:
                await asyncio.sleep(rng.uniform(0.3, 0.6))  # the new one, right after it started
                kills.append(f"front again, at {len(run.ok)} Ok")
                await kill_front(server, rng)
            continue
        await asyncio.to_thread(server.kill)
        await asyncio.sleep(rng.uniform(0.05, 0.4))
        await asyncio.to_thread(server.start)
        if k == 1:
            # Once, kill it again right after it came back, while it is recovering.
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            kills.append(f"just after a restart, at {len(run.ok)} Ok{' (publishing)' if run.publishing else ''}")
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(rng.uniform(0.05, 0.2))
            await asyncio.to_thread(server.start)


async def wait_settled(
    http: aiohttp.ClientSession, server: ServerProcess, recorders: list[Recorder], timeout: float
) -> bool:
    """Every event passed to every subscription, every push confirmed, and quiet for 0.5 s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pubs = await admin_api(http, server, "icrc72_get_publications", {})
        subs = await admin_api(http, server, "icrc72_get_subscriptions", {})
        pub_stats = [nat_stats(p["stats"]) for p in pubs if p["namespace"] in NAMESPACES]
        sub_stats = [nat_stats(s["stats"]) for s in subs]
        quiet = all(time.monotonic() - r.last_arrival > 0.5 for r in recorders)
        if (
            quiet
            and all(s["icrc72:publication:stats:events:sent"] == s["icrc72:publication:stats:events"]
                    for s in pub_stats)
            and all(s["icrc72:subscription:stats:notifications"] == s["icrc72:subscription:stats:confirmations"]
                    for s in sub_stats)
        ):
            return True
        await asyncio.sleep(0.2)
    return False


@pytest.mark.parametrize("victim", ["broker", "front"])
async def test_sigkill_during_publish_and_delivery(
    server_factory: Callable[..., ServerProcess], endpoints: Any, victim: str
) -> None:
    """``broker``: the whole server (its fronts die with it); ``front``: one of the front
    processes that parse and stamp publishes (docs/scaling.md), the broker living on."""
    t0 = time.monotonic()
    deadline = t0 + DEADLINE_S
    seed = random.randrange(2**32)
    print(f"\nseed {seed}")
    rng = random.Random(seed)
    server = server_factory(retry_initial_s="0.05", retry_max_s="0.5", workers="2")

    rec_all = Recorder("all (pattern)")
    rec_a = Recorder("a")
    rec_b = Recorder("b")
    rec_red = Recorder("red (pattern, filtered)")
    recorders = [rec_all, rec_a, rec_b, rec_red]
    eps = [await endpoints(r) for r in recorders]
    specs = [
        (rec_all, {"namespace": PATTERN}),
        (rec_a, {"namespace": NS_A}),
        (rec_b, {"namespace": NS_B}),
        (rec_red, {"namespace": PATTERN, "filter": FILTER}),
    ]
    wants: dict[str, Callable[[str, Any], bool]] = {
        rec_all.name: lambda ns, data: True,
        rec_a.name: lambda ns, data: ns == NS_A,
        rec_b.name: lambda ns, data: ns == NS_B,
        rec_red.name: lambda ns, data: fields(data)["color"] == "red",
    }

    run = Run()
    kills: list[str] = []
    async with aiohttp.ClientSession() as http:
        for ns in NAMESPACES:
            (r,) = await admin_api(http, server, "icrc72_register_publication", [{"namespace": ns, "config": []}])
            assert "Ok" in r, r
        sub_ids = {}
        for (rec, spec), ep in zip(specs, eps, strict=True):
            (r,) = await admin_api(http, server, "icrc72_register_subscription",
                                   [{**spec, "endpoint": ep.url, "mode": "trusted"}])
            assert "Ok" in r, r
            sub_ids[rec.name] = str(r["Ok"])

        kill_task = asyncio.create_task(killer(server, run, rng, kills, victim))
        pubs = [
            asyncio.create_task(publisher(p, server, run, random.Random(rng.random()), deadline))
            for p in range(PUBLISHERS)
        ]
        try:
            await asyncio.gather(*pubs)
        finally:
            run.publishing = False
            for t in pubs:
                t.cancel()
            await asyncio.gather(*pubs, return_exceptions=True)
            await kill_task
        t_published = time.monotonic() - t0

        # One more kill while delivery is still catching up, if it is.
        if any(time.monotonic() - r.last_arrival < 0.2 for r in recorders):
            await asyncio.sleep(rng.uniform(0.0, 0.2))
            kills.append("while delivering")
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            await asyncio.to_thread(server.start)

        settled = await wait_settled(http, server, recorders, max(5.0, deadline - time.monotonic()))
        pubs_info = await admin_api(http, server, "icrc72_get_publications", {})
        stored = {
            p["namespace"]: nat_stats(p["stats"])["icrc72:publication:stats:events"]
            for p in pubs_info if p["namespace"] in NAMESPACES
        }

    elapsed = time.monotonic() - t0
    dups = {r.name: len(r.got) - len({(ns, e) for ns, e, _, _ in r.got}) for r in recorders}
    print(
        f"published {len(run.sent)} events ({TOTAL} distinct), Ok answered {len(run.ok)}, "
        f"stored {stored}, batch retries {run.retried_batches}, transport errors {run.transport_errors}, "
        f"kills {kills}, duplicates per subscription {dups}, "
        f"pushes {[r.pushes for r in recorders]}, publishing took {t_published:.1f} s, total {elapsed:.1f} s"
    )

    assert run.unexpected == []
    assert len(kills) >= KILLS_WHILE_PUBLISHING
    assert len(run.sent) == TOTAL
    # Every publish was eventually answered Ok (the retries go on until it is).
    assert run.ok_uids == set(run.sent)
    for rec in recorders:
        assert rec.sub_ids == {sub_ids[rec.name]}, (rec.name, rec.sub_ids)

    # The delivered data of each (namespace, eventId), across every subscription.
    data_of: dict[tuple[str, int], Any] = {}
    for rec in recorders:
        first_index: dict[tuple[str, int], Any] = {}
        last_id: dict[str, int] = defaultdict(int)
        for ns, eid, _nid, data in rec.got:
            key = (ns, eid)
            # (b) nothing appears that was not published, and to the namespace it was sent to.
            uid = fields(data)["uid"]
            assert uid in run.sent, f"{rec.name}: {key} carries uid {uid!r} that no publisher sent"
            assert run.sent[uid] == (ns, data), f"{rec.name}: {key} is not what {uid} was published as"
            assert wants[rec.name](ns, data), f"{rec.name}: {key} does not match the subscription"
            if key in first_index:
                # (d) a repeat is the same event.
                assert first_index[key] == data, f"{rec.name}: repeat of {key} carries other data"
                continue
            first_index[key] = data
            # (c) first deliveries in event-id order per namespace.
            assert eid > last_id[ns], f"{rec.name}: {key} first arrived after {ns} event {last_id[ns]}"
            last_id[ns] = eid
            # The same event has the same data on every subscription.
            assert data_of.setdefault(key, data) == data, f"{key} delivered with different data"

    # (e) per namespace the ids are gap-free 1..N, N the count the server reports.
    for ns in NAMESPACES:
        ids = sorted({eid for n, eid, _, _ in rec_all.got if n == ns})
        assert ids == list(range(1, len(ids) + 1)), f"{ns}: delivered ids have gaps"
        assert len(ids) == stored[ns], f"{ns}: {len(ids)} delivered, {stored[ns]} stored"
        assert {eid for n, eid, _, _ in (rec_a if ns == NS_A else rec_b).got if n == ns} == set(ids)

    # (a) every event answered Ok reached every subscription that matches it, as published.
    for rec in recorders:
        have = {(ns, eid) for ns, eid, _, _ in rec.got}
        missing = []
        for key, uid in run.ok.items():
            ns, data = run.sent[uid]
            if wants[rec.name](ns, data):
                if key not in have:
                    missing.append(key)
                else:
                    assert data_of[key] == data, f"{rec.name}: {key} was answered Ok for {uid}, delivered otherwise"
        assert not missing, f"{rec.name}: {len(missing)} Ok events never delivered, e.g. {sorted(missing)[:5]}"
    # Every stored event was delivered to every matching subscription (not only the Ok ones).
    for rec in recorders:
        have = {(ns, eid) for ns, eid, _, _ in rec.got}
        want = {key for key, data in data_of.items() if wants[rec.name](key[0], data)}
        assert want <= have, f"{rec.name}: {len(want - have)} stored events never delivered"

    assert settled, "delivery did not settle (events:sent < events, or unconfirmed notifications)"
