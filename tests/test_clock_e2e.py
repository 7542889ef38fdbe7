"""A broadcaster whose wall clock alone is wrong (libfaketime, the monotonic clock left
true) in a cluster under load: skewed by -90 s, stepped to +1 h, back to -1 h, then
+90 s. Nothing it stamps, pushes, trims or expires follows its wall clock, and it says
so in its log, its metrics and ``/readyz`` (docs/semantics.md, "Time")."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tidings.store import PostgresStore

from .conftest import ServerProcess, admin_api, eventually, read_body, respond
from .pg_support import schema_address
from .test_e2e_schemas import ORDER

pytestmark = pytest.mark.e2e

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
FAST = {"workers": "1", "heartbeat_s": "0.25", "lease_s": "1.5", "retry_initial_s": "0.05", "retry_max_s": "0.3",
        "retention_interval_s": "0.5", "max_attempts": "100000"}
BOUND_S = 5.0
"""How far from true time anything may be here: the documented bound is half a heartbeat's
round trip (milliseconds on loopback); this leaves room for a loaded test machine while
staying far below the faults injected (90 s, 1 h)."""


class Failing:
    """Answers 500 (the notifications stay pending, retried), noting the
    ``webhook-timestamp`` of each push minus the true time."""

    def __init__(self) -> None:
        self.skews: list[float] = []
        self.pushing: dict[bytes, int] = {}
        self.overlaps = 0
        """Pushes of one subscription that arrived while another of it was unanswered."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read_body(receive)
        headers = dict(scope["headers"])
        stamp = headers.get(b"webhook-timestamp")
        if stamp is not None:
            self.skews.append(int(stamp) - time.time())
        sub = headers.get(b"x-tidings-subscription", b"")
        self.pushing[sub] = self.pushing.get(sub, 0) + 1
        self.overlaps += self.pushing[sub] > 1
        try:
            await asyncio.sleep(0.01)
        finally:
            self.pushing[sub] -= 1
        await respond(send, 500, b"")


async def _metric(http: aiohttp.ClientSession, s: ServerProcess, name: str) -> float:
    async with http.get(f"{s.url}/metrics") as resp:
        text = await resp.text()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found is not None, text
    return float(found.group(1))


async def _ready(http: aiohttp.ClientSession, s: ServerProcess) -> tuple[int, Any]:
    async with http.get(f"{s.url}/readyz") as resp:
        return resp.status, await resp.json()


@pytest.mark.skipif(not FAKETIME.exists() and not os.environ.get("CI"),
                    reason="libfaketime (the faketime package) is not installed; CI installs it")
async def test_a_member_whose_wall_clock_is_wrong_misdates_trims_and_expires_nothing(
    server_factory: Callable[..., ServerProcess], pg_database: str, endpoints: Any, tmp_path: Path,
) -> None:
    started = time.time_ns()
    store = schema_address(pg_database)
    b0 = server_factory(store=store, broadcaster_id="b0", **FAST)
    d = b0.data_dir.parent / "b1"
    d.mkdir()
    shutil.copy(b0.data_dir / "admin.token", d / "admin.token")
    offset_file = tmp_path / "b1.faketime"
    offset_file.write_text("-90s\n")
    env = {f"TIDINGS_{k.upper()}": v for k, v in {**FAST, "store": store, "broadcaster_id": "b1"}.items()}
    env |= {"LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(offset_file), "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    b1 = ServerProcess(d, env=env)
    ep = await endpoints(Failing())
    published = {"by.b0": 0, "by.b1": 0}
    try:
        async with aiohttp.ClientSession() as http:
            # Kept for one hour; registered before b1 starts, so that b1 loads it (a
            # schema is one truth across running members only with issue 44's points 1-2).
            (schema,) = await admin_api(http, b0, "register_schema", [{"model": json.dumps(ORDER)}])
            sid = schema["Ok"]["id"]
            assert await admin_api(http, b0, "update_schema_retention", [{"id": sid, "retention_s": 3600}]) == [
                {"Ok": True}]
            await asyncio.to_thread(b1.start, new_port_if_taken=True)
            for ns, via in (("by.b0", b0), ("by.b1", b1)):
                (pub,) = await admin_api(http, via, "icrc72_register_publication", [{"namespace": ns, "config": [
                    ["tidings:publication:schema", {"Nat": sid}]]}])
                assert "Ok" in pub, pub
                for _ in range(3):  # some delivered by each broadcaster
                    (sub,) = await admin_api(http, via, "icrc72_register_subscription", [{
                        "namespace": ns, "endpoint": ep.url,
                        "config": [["tidings:subscription:maxAgeMs", {"Nat": 1_800_000}]]}])
                    assert "Ok" in sub, sub
            stop = asyncio.Event()

            async def load(via: ServerProcess) -> None:
                while not stop.is_set():
                    batch = [{"namespace": ns, "data": {"Map": [["amount", {"Nat": 1}]]}}
                             for ns in published for _ in range(5)]
                    answers = await admin_api(http, via, "icrc72_publish", batch)
                    for item, a in zip(batch, answers, strict=True):
                        published[item["namespace"]] += "Ok" in a
                    await asyncio.sleep(0.01)

            loaders = [asyncio.create_task(load(s)) for s in (b0, b1)]
            try:
                for step in ("-90s", "+3600s", "-3600s", "+90s"):
                    offset_file.write_text(step + "\n")
                    seconds = float(step[:-1])
                    await eventually(lambda s=seconds: _near(http, b1, s), timeout=15)
                    status, body = await _ready(http, b1)
                    assert status == 503 and any("b1" in p and "clock" in p for p in body["problems"]), body
                    assert (await _ready(http, b0))[0] == 200
                    assert abs(await _metric(http, b0, "tidings_clock_offset_seconds")) < 0.5
                    await asyncio.sleep(1.0)  # under load at this offset: retention rounds, retries
            finally:
                stop.set()
                await asyncio.gather(*loaders)
            # Taken now: stopping b1 below holds up this process, and the endpoint's
            # reading of what arrives meanwhile, for seconds.
            skews = list(ep.app.skews)
            assert ep.app.overlaps == 0
            run = await admin_api(http, b1, "tidings_apply_retention", None)
            assert all(t["trimmed"] == 0 for t in run["namespaces"]), run
    finally:
        b1.stop()
    log = (d / "server.log").read_text()
    assert re.search(r"clock: the wall clock of b1 reads .* the database's clock reads .* off by [+-]", log), log
    for s in (b0, b1):  # relays signed by the cluster's clock: none late across the skew
        assert "refused a relay" not in (s.data_dir / "server.log").read_text()
    assert all(published.values()), published
    ended = time.time_ns()
    pg = PostgresStore(store)
    await pg.open()
    try:
        for ns, n in published.items():
            events = await pg.read_after(0, [ns], -1)
            assert len(events) == n  # nothing trimmed: none was an hour old
            stamps = [e.timestamp for e in sorted(events, key=lambda e: e.id)]
            assert stamps == sorted(stamps)
            assert all(started - BOUND_S * 1e9 < t < ended + BOUND_S * 1e9 for t in stamps)
        assert await pg.list_dead_letters() == []  # none was 30 min old
    finally:
        await pg.close()
    assert skews and max(abs(s) for s in skews) < BOUND_S, sorted(skews)[::50]


async def _near(http: aiohttp.ClientSession, s: ServerProcess, offset_s: float) -> bool:
    return abs(await _metric(http, s, "tidings_clock_offset_seconds") - offset_s) < BOUND_S

