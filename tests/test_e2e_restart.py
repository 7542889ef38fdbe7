"""Delivery across a killed server, oneshot confirmation, and order under retries.

The ``server`` fixture runs with ``ack_deadline_s=1`` and retries after 0.05-0.2 s.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import msgspec
import pytest

from tidings.client import Admin, EventNotification, Publisher, Subscriber

from .conftest import ServerProcess, eventually, read_body, respond

pytestmark = pytest.mark.e2e

NS = "com.example.orders"
ACK_DEADLINE = 1.0


class Recorder:
    """A subscriber endpoint that records every push (status, notifications) and never confirms.

    ``statuses`` are answered to the first pushes in turn, then 200.
    """

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.pushes: list[tuple[int, list[dict[str, Any]]]] = []
        self.statuses = list(statuses or [])
        self.before_answer: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        batch = json.loads(await read_body(receive))
        status = self.statuses.pop(0) if self.statuses else 200
        self.pushes.append((status, batch))
        if self.before_answer is not None:
            await self.before_answer(batch)
        await respond(send, status)

    def received(self, since: int = 0) -> list[dict[str, Any]]:
        """Notifications of the answered-2xx pushes, from push number ``since`` on."""
        return [n for status, batch in self.pushes[since:] if 200 <= status < 300 for n in batch]


async def api(server: ServerProcess, name: str, arg: Any, token: str | None = None) -> Any:
    headers = {"authorization": f"Bearer {token or server.admin_token}"}
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/{name}", data=json.dumps(arg), headers=headers
    ) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        return body


async def subscribe(server: ServerProcess, endpoint: str, mode: str = "trusted", token: str | None = None) -> int:
    (r,) = await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": endpoint, "mode": mode}],
                     token)
    return int(r["Ok"])


async def confirmations(server: ServerProcess) -> int:
    async with Admin(server.url, server.admin_token) as admin:
        (info,) = await admin.get_subscriptions(namespace=NS)
    return int(dict(info.stats)["icrc72:subscription:stats:confirmations"]["Nat"])


# -- (a) trusted: a backlog for an endpoint that is down survives SIGKILL ----------------------


async def test_trusted_backlog_survives_kill(server: ServerProcess, endpoints: Any) -> None:
    got: list[EventNotification] = []

    async def handle(n: EventNotification) -> None:
        got.append(n)

    sub = Subscriber(handle)
    ep = await endpoints(sub, start=False)  # nothing listens on its port yet
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        await subscribe(server, ep.url)
        assert await pub.publish_many(NS, range(10)) == list(range(1, 11))
        assert [await pub.publish(NS, i) for i in range(10, 20)] == list(range(11, 21))
    await asyncio.sleep(0.3)  # let delivery fail a few times
    assert got == []

    server.kill()
    server.start()
    await ep.start()
    await eventually(lambda: len(got) >= 20)
    assert [n.eventId for n in got] == list(range(1, 21))
    assert [n.data for n in got] == [{"Nat": i} for i in range(20)]
    await eventually(lambda: _eq(confirmations(server), 20))
    # Nothing more comes: every push was confirmed.
    await asyncio.sleep(0.3)
    assert len(got) == 20
    async with Publisher(server.url, server.admin_token) as pub:
        assert await pub.publish(NS, 20) == 21
    await eventually(lambda: len(got) == 21)
    assert got[-1].prev_id == 20
    await sub.close()


async def _eq(value: Any, want: Any) -> bool:
    return await value == want


# -- (b) oneshot: unconfirmed notifications are pushed again, also after SIGKILL ------------------


async def test_oneshot_redelivery_and_confirmation(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    ep = await endpoints(rec)
    async with Publisher(server.url, server.admin_token) as pub, Admin(server.url, server.admin_token) as admin:
        await pub.register_publication(NS)
        bob_token = await admin.create_principal("bob")
        await subscribe(server, ep.url, mode="oneshot")
        assert await pub.publish_many(NS, range(5)) == [1, 2, 3, 4, 5]
    await eventually(lambda: len(rec.received()) >= 5)
    first = {n["eventId"]: n["id"] for n in rec.received()[:5]}
    assert sorted(first) == [1, 2, 3, 4, 5]

    server.kill()
    mark = len(rec.pushes)
    server.start()
    await eventually(lambda: {n["eventId"] for n in rec.received(mark)} >= set(first))
    again = rec.received(mark)
    assert all(n["namespace"] == NS for n in again)
    # The repeat carries the same (namespace, eventId) and, the notification being the same
    # pending one, the same notification id.
    assert {n["eventId"]: n["id"] for n in again} == first
    nids = [first[e] for e in sorted(first)]

    # Someone else's notification is not theirs to confirm, refused like an id never issued
    # (docs/delivery.md: the answer does not tell the two apart).
    answer = await api(server, "icrc72_confirm_notifications", [nids[0], 10**9], token=bob_token)
    assert list(answer) == ["itemized"]
    assert [list(item["Err"]) for item in answer["itemized"]] == [["Unauthorized"], ["Unauthorized"]]
    answer = await api(server, "icrc72_confirm_notifications", [nids[0], 10**9])
    assert [list(item) for item in answer["itemized"]] == [["Ok"], ["Err"]]
    assert list(answer["itemized"][1]["Err"]) == ["Unauthorized"]

    # Confirm the rest, through the SDK and through the alias the draft also uses.
    confirmer = Subscriber(lambda n: None, url=server.url, token=server.admin_token, mode="oneshot")
    result = await confirmer.confirm(nids[1:3])
    assert result.allAccepted is None and result.itemized is msgspec.UNSET
    assert await api(server, "icrc72_confirm_messages", nids[3:]) == {"allAccepted": None}
    assert await api(server, "icrc72_confirm_messages", nids) == {"allAccepted": None}  # idempotent
    await confirmer.close()

    await eventually(lambda: _eq(confirmations(server), 5))
    mark = len(rec.pushes)
    await asyncio.sleep(ACK_DEADLINE * 2 + 0.5)
    assert rec.pushes[mark:] == []


async def test_oneshot_confirmed_before_the_push_is_answered(server: ServerProcess, endpoints: Any) -> None:
    """A subscriber may confirm while the push is still open; it must not be pushed again."""
    rec = Recorder()

    async def confirm_first(batch: list[dict[str, Any]]) -> None:
        answer = await api(server, "icrc72_confirm_notifications", [n["id"] for n in batch])
        assert answer == {"allAccepted": None}

    rec.before_answer = confirm_first
    ep = await endpoints(rec)
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        await subscribe(server, ep.url, mode="oneshot")
        await pub.publish_many(NS, range(3))
    await eventually(lambda: len(rec.received()) >= 3)
    await asyncio.sleep(ACK_DEADLINE * 2 + 0.5)
    assert [n["eventId"] for n in rec.received()] == [1, 2, 3]


async def test_oneshot_sdk_subscriber_is_not_pushed_again(server: ServerProcess, endpoints: Any) -> None:
    got: list[int] = []

    async def handle(n: EventNotification) -> None:
        got.append(n.eventId)

    pushes = 0
    sub = Subscriber(handle, url=server.url, token=server.admin_token, mode="oneshot")

    async def counting(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal pushes
        pushes += scope["type"] == "http"
        await sub(scope, receive, send)

    ep = await endpoints(counting)
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        await sub.subscribe(NS, ep.url)
        for i in range(10):
            await pub.publish(NS, i)
    await eventually(lambda: len(got) == 10)
    await eventually(lambda: _eq(confirmations(server), 10))
    seen = pushes
    await asyncio.sleep(ACK_DEADLINE * 2 + 0.5)
    assert pushes == seen
    assert got == list(range(1, 11))
    await sub.close()


# -- (c) order --------------------------------------------------------------------------------


async def test_order_of_200_events_in_batches(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    ep = await endpoints(rec)
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        await subscribe(server, ep.url)
        ids: list[int] = []
        for b in range(4):
            ids += await pub.publish_many(NS, range(b * 50, (b + 1) * 50))
    assert ids == list(range(1, 201))
    await eventually(lambda: len(rec.received()) >= 200)
    got = rec.received()
    assert [n["eventId"] for n in got] == ids
    assert [n["data"] for n in got] == [{"Nat": i} for i in range(200)]
    assert [n["prev_id"] for n in got] == [None, *ids[:-1]]
    notification_ids = [n["id"] for n in got]
    assert notification_ids == sorted(set(notification_ids))
    await eventually(lambda: _eq(confirmations(server), 200))


async def test_order_kept_through_retries(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder(statuses=[500, 500, 500])
    ep = await endpoints(rec)
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        await subscribe(server, ep.url)
        ids = await pub.publish_many(NS, range(30))
        ids += [await pub.publish(NS, i) for i in range(30, 40)]
    await eventually(lambda: len(rec.received()) >= 40)
    assert [n["eventId"] for n in rec.received()] == ids == list(range(1, 41))
    statuses = [s for s, _ in rec.pushes]
    assert statuses[:4] == [500, 500, 500, 200]
    # The refused batch was sent again as it was, with the same notification ids.
    first = [[(n["id"], n["eventId"]) for n in batch] for _, batch in rec.pushes[:4]]
    assert first[0] == first[1] == first[2] == first[3]
    await eventually(lambda: _eq(confirmations(server), 40))
