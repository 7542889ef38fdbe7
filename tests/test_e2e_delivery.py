"""Publish to delivery to confirmation through the real server process and real HTTP."""

from __future__ import annotations

from tidings.client import Admin, EventNotification, Publisher, Subscriber, to_python

from .conftest import eventually


async def test_publish_is_pushed_and_confirmed(server, endpoints):
    got: list[EventNotification] = []

    async def handle(n: EventNotification) -> None:
        got.append(n)

    sub = Subscriber(handle, url=server.url, token=server.admin_token)
    ep = await endpoints(sub)
    async with Publisher(server.url, server.admin_token) as pub, Admin(server.url, server.admin_token) as admin:
        await pub.register_publication("com.example.orders")
        sub_id = await sub.subscribe("com.example.orders", ep.url)
        ids = [await pub.publish("com.example.orders", {"order": i}) for i in range(5)]
        assert ids == [1, 2, 3, 4, 5]
        await eventually(lambda: len(got) == 5)
        assert [n.eventId for n in got] == ids
        assert [to_python(n.data) for n in got] == [{"order": i} for i in range(5)]
        assert got[1].prev_id == 1 and got[0].prev_id is None
        assert all(n.source == "admin" for n in got)

        async def confirmed() -> bool:
            (info,) = await admin.get_subscriptions(namespace="com.example.orders")
            return dict(info.stats)["icrc72:subscription:stats:confirmations"] == {"Nat": 5}

        await eventually(confirmed)
        (info,) = await admin.get_subscriptions()
        assert info.id == sub_id
    await sub.close()
