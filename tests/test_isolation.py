"""A subscriber that never answers slows only its own subscription.

Three subscriptions of a namespace push to an endpoint that holds every request open;
one more pushes to an endpoint that answers at once. While 200 events are published
over about two seconds, the healthy subscription gets each one promptly, and each
hanging subscription has at most one push open at a time (one batch in flight per
subscription, docs/semantics.md "Delivery").
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, admin_api, eventually, read_body, respond

pytestmark = pytest.mark.e2e

NS = "com.example.isolation"
EVENTS = 200
HANGING = 3
PROMPT_S = 1.5


class Hanging:
    """Holds every push open until ``release`` is set; counts open pushes per subscription."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.open: dict[str, int] = defaultdict(int)
        self.most_open: dict[str, int] = defaultdict(int)
        self.total_open = 0
        self.most_total_open = 0
        self.pushes: dict[str, int] = defaultdict(int)
        self.first_push_at: dict[str, float] = {}
        self.got: dict[str, list[int]] = defaultdict(list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        sub = dict(scope["headers"]).get(b"x-tidings-subscription", b"").decode()
        self.open[sub] += 1
        self.total_open += 1
        self.most_open[sub] = max(self.most_open[sub], self.open[sub])
        self.most_total_open = max(self.most_total_open, self.total_open)
        self.pushes[sub] += 1
        self.first_push_at.setdefault(sub, time.monotonic())
        try:
            batch = json.loads(await read_body(receive))
            await self.release.wait()
            self.got[sub] += [n["eventId"] for n in batch]
            await respond(send)
        finally:
            self.open[sub] -= 1
            self.total_open -= 1


class Healthy:
    """Answers every push at once and notes when each event arrived."""

    def __init__(self) -> None:
        self.arrived: dict[int, float] = {}
        self.order: list[int] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        batch = json.loads(await read_body(receive))
        now = time.monotonic()
        for n in batch:
            self.arrived.setdefault(n["eventId"], now)
            self.order.append(n["eventId"])
        await respond(send)


async def test_hanging_subscriber_does_not_hold_up_others(
    server_factory: Callable[..., ServerProcess], endpoints: Any
) -> None:
    server = server_factory(push_timeout_s="30", retry_initial_s="0.05", retry_max_s="0.5")
    hanging, healthy = Hanging(), Healthy()
    hang_ep = await endpoints(hanging)
    ok_ep = await endpoints(healthy)
    answered: dict[int, float] = {}
    try:
        async with aiohttp.ClientSession() as http:
            (r,) = await admin_api(http, server, "icrc72_register_publication", [{"namespace": NS, "config": []}])
            assert "Ok" in r, r
            hang_subs = []
            for _ in range(HANGING):
                (r,) = await admin_api(http, server, "icrc72_register_subscription",
                                       [{"namespace": NS, "endpoint": hang_ep.url, "mode": "trusted"}])
                hang_subs.append(str(r["Ok"]))
            (r,) = await admin_api(http, server, "icrc72_register_subscription",
                                   [{"namespace": NS, "endpoint": ok_ep.url, "mode": "trusted"}])
            assert "Ok" in r, r

            t0 = time.monotonic()
            for i in range(EVENTS):
                (r,) = await admin_api(http, server, "icrc72_publish", [{"namespace": NS, "data": {"Nat": i}}])
                answered[r["Ok"][0]] = time.monotonic()
                # About 2 s in all, whatever a publish costs.
                await asyncio.sleep(max(0.0, t0 + (i + 1) * 2.0 / EVENTS - time.monotonic()))
            assert sorted(answered) == list(range(1, EVENTS + 1))

            await eventually(lambda: len(healthy.arrived) >= EVENTS, timeout=5)
            await asyncio.sleep(0.3)  # room for a second push to a hanging subscription, if one were sent
            lateness = {e: healthy.arrived[e] - answered[e] for e in answered}
            worst = max(lateness, key=lambda e: lateness[e])
            print(f"\nworst delivery after the publish answer: event {worst}, {lateness[worst] * 1000:.0f} ms; "
                  f"hanging pushes {dict(hanging.pushes)}, most open at once {hanging.most_total_open}")

            # The healthy subscription got everything, in order, each within PROMPT_S of its answer.
            assert healthy.order == list(range(1, EVENTS + 1))
            late = {e: round(t, 3) for e, t in lateness.items() if t > PROMPT_S}
            assert not late, f"events delivered more than {PROMPT_S} s after their publish answer: {late}"

            # Every hanging subscription had a push open through (almost) the whole stream...
            assert set(hanging.first_push_at) == set(hang_subs)
            assert all(t < answered[20] for t in hanging.first_push_at.values()), hanging.first_push_at
            assert hanging.got == {}, "a hanging push was answered before release"
            # ...and never more than one: one batch in flight per subscription.
            assert dict(hanging.pushes) == dict.fromkeys(hang_subs, 1)
            assert dict(hanging.most_open) == dict.fromkeys(hang_subs, 1)
            assert hanging.most_total_open == HANGING
    finally:
        hanging.release.set()

    # Released, the hanging subscriptions catch up, in order, still one push at a time.
    await eventually(lambda: all(len(set(hanging.got[s])) >= EVENTS for s in hang_subs), timeout=10)
    for s in hang_subs:
        assert hanging.got[s] == list(range(1, EVENTS + 1)), s
    assert dict(hanging.most_open) == dict.fromkeys(hang_subs, 1)
