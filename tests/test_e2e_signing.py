"""Signed pushes through the real server: Standard Webhooks headers, rotation, the SDK's 401."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import msgspec
import pytest

from tidings.client import Admin, EventNotification, ItemError, Publisher, Subscriber
from tidings.core.webhooks import encode_secret, mask, sign, verify

from .conftest import ServerProcess, eventually, read_body, respond

pytestmark = pytest.mark.e2e

NS = "com.example.signed"
OLD = encode_secret(b"o" * 32)


async def _ignore(n: EventNotification) -> None:
    pass


async def _asgi_post(app: Any, scope: dict[str, Any], body: bytes) -> int:
    """Hand one request to an ASGI app in-process; its status."""
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(msg: dict[str, Any]) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]

    await app(scope, receive, send)
    return status


class Tee:
    """An endpoint that records each push and hands it, as it came, to ``apps`` (SDK
    Subscribers holding different secrets), noting their statuses; it answers 200."""

    def __init__(self, *apps: Any) -> None:
        self.apps = list(apps)
        self.pushes: list[tuple[dict[str, str], bytes, list[int]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        statuses = [await _asgi_post(app, scope, body) for app in self.apps]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.pushes.append((headers, body, statuses))
        await respond(send)


async def api(server: ServerProcess, name: str, arg: Any) -> Any:
    headers = {"authorization": f"Bearer {server.admin_token}"}
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/{name}", data=json.dumps(arg), headers=headers
    ) as resp:
        assert resp.status == 200
        return await resp.json()


def _signatures(headers: dict[str, str]) -> list[str]:
    return headers["webhook-signature"].split(" ")


async def test_pushes_are_signed_and_a_rotation_overlaps(server: ServerProcess, endpoints: Any) -> None:
    got_old: list[int] = []
    got_new: list[int] = []

    async def on_old(n: EventNotification) -> None:
        got_old.append(n.eventId)

    async def on_new(n: EventNotification) -> None:
        got_new.append(n.eventId)

    old_only = Subscriber(on_old, secret=OLD)
    tee = Tee(old_only)
    ep = await endpoints(tee)
    owner = Subscriber(_ignore, url=server.url, token=server.admin_token, secret=OLD)
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        sub_id = await owner.subscribe(NS, ep.url)  # registered with OLD
        assert await owner.secrets(sub_id) == [mask(OLD)]

        await pub.publish(NS, 1)
        await eventually(lambda: len(tee.pushes) == 1)
        headers, body, statuses = tee.pushes[0]
        assert statuses == [200] and got_old == [1]
        assert headers["webhook-id"] and abs(int(headers["webhook-timestamp"]) - time.time()) < 60
        assert len(_signatures(headers)) == 1
        verify([OLD], headers, body, int(time.time()))

        # Rotate: for the overlap, every push carries both signatures, and either secret accepts it.
        new = await owner.rotate_secret(sub_id, overlap_s=2)
        assert new.startswith("whsec_") and new != OLD
        assert await owner.secrets(sub_id) == [mask(new), mask(OLD)]
        new_only = Subscriber(on_new, secret=new)
        tee.apps.append(new_only)
        await pub.publish(NS, 2)
        await eventually(lambda: len(tee.pushes) == 2)
        headers, body, statuses = tee.pushes[1]
        assert len(_signatures(headers)) == 2
        assert statuses == [200, 200] and got_old == [1, 2] and got_new == [2]
        verify([new], headers, body, int(time.time()))
        verify([OLD], headers, body, int(time.time()))

        # After the overlap only the new secret signs: a receiver holding only the old one refuses.
        await asyncio.sleep(2.1)
        assert await owner.secrets(sub_id) == [mask(new)]
        await pub.publish(NS, 3)
        await eventually(lambda: len(tee.pushes) == 3)
        headers, body, statuses = tee.pushes[2]
        assert len(_signatures(headers)) == 1
        assert statuses == [401, 200] and got_old == [1, 2] and got_new == [2, 3]
    await owner.close()


async def test_default_subscriber_verifies_and_refuses_forged_or_stale_pushes(
    server: ServerProcess, endpoints: Any
) -> None:
    got: list[int] = []

    async def handle(n: EventNotification) -> None:
        got.append(n.eventId)

    sub = Subscriber(handle, url=server.url, token=server.admin_token)  # no secret given
    ep = await endpoints(sub)
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        sub_id = await sub.subscribe(NS, ep.url)
        await pub.publish(NS, "signed")
        await eventually(lambda: got == [1])
        (shown,) = await sub.secrets(sub_id)
        assert shown.startswith("whsec_") and shown.endswith("…")  # masked once handed out
        # The secret itself is shown again only by a rotation, which the Subscriber keeps.
        secret = await sub.rotate_secret(sub_id, overlap_s=0)
        assert secret.startswith("whsec_") and mask(secret) == (await sub.secrets(sub_id))[0]

    body = msgspec.json.encode([EventNotification(
        id=99, eventId=99, prev_id=None, timestamp=1, namespace=NS, data={"Nat": 1}, source="mallory",
    )])
    now = int(time.time())
    base = {"content-type": "application/json", "x-tidings-subscription": str(sub_id)}
    forged = [
        base,  # unsigned
        {**base, **sign([encode_secret(b"m" * 32)], "m1", now, body)},  # someone else's secret
        {**base, **sign([secret], "m1", now - 301, body)},  # stale
        {**base, **sign([secret], "m1", now + 301, body)},  # from the future
        {**base, **sign([secret], "m1", now, body + b" ")},  # another body
        {**base, "x-tidings-subscription": "12345", **sign([secret], "m1", now, body)},  # unknown subscription
    ]
    async with aiohttp.ClientSession() as http:
        for headers in forged:
            async with http.post(ep.url, data=body, headers=headers) as resp:
                assert resp.status == 401, headers
                assert (await resp.json())["error"]["code"] == "invalid_signature"
        assert got == [1]  # the handler was not called
        async with http.post(ep.url, data=body, headers={**base, **sign([secret], "m1", now, body)}) as resp:
            assert resp.status == 200
        assert got == [1, 99]
    await sub.close()


async def test_secrets_survive_a_restart(server: ServerProcess, endpoints: Any) -> None:
    got: list[int] = []

    async def handle(n: EventNotification) -> None:
        got.append(n.eventId)

    sub = Subscriber(handle, url=server.url, token=server.admin_token)
    ep = await endpoints(sub)
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        sub_id = await sub.subscribe(NS, ep.url)
        before = await sub.secrets(sub_id)
    server.restart()
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.publish(NS, 1)
        await eventually(lambda: got == [1])
    assert await sub.secrets(sub_id) == before
    await sub.close()


async def test_secret_methods_check_callers_and_values(server: ServerProcess) -> None:
    async with Admin(server.url, server.admin_token) as admin, Publisher(server.url, server.admin_token) as pub:
        bob = await admin.create_principal("bob")
        carol = await admin.create_principal("carol")
        await pub.register_publication(NS)
    bobs = Subscriber(_ignore, url=server.url, token=bob)
    carols = Subscriber(_ignore, url=server.url, token=carol)
    admins = Subscriber(_ignore, url=server.url, token=server.admin_token)

    async def refused(code: str, call: Any) -> None:
        with pytest.raises(ItemError) as e:
            await call
        assert e.value.code == code

    try:
        sub_id = await bobs.subscribe(NS, "http://127.0.0.1:9/")
        (bob_secret,) = await bobs.secrets(sub_id)
        await refused("Unauthorized", carols.secrets(sub_id))
        await refused("Unauthorized", carols.rotate_secret(sub_id))
        await refused("NotFound", bobs.secrets(sub_id + 100))
        await refused("NotFound", bobs.rotate_secret(sub_id + 100))
        await refused("ImproperConfig", bobs.rotate_secret(sub_id, overlap_s=-1))
        # Admins may; a rotation with the default overlap keeps the old secret.
        new = await admins.rotate_secret(sub_id)
        assert await bobs.secrets(sub_id) == [mask(new), bob_secret]
        # A subscription's controllers may too.
        await bobs.update(sub_id, {"icrc72:subscription:controllers": ["carol", "bob"]})
        assert await carols.secrets(sub_id) == [mask(new), bob_secret]

        # A registration's own secret must have the format; the SDK checks whsec_ ones at once.
        for bad in ["whsec_!!", encode_secret(b"x" * 8), "short", "has spaces in it, twenty-four+"]:
            (r,) = await api(server, "icrc72_register_subscription",
                             [{"namespace": NS, "endpoint": "http://x/", "secret": bad}])
            assert list(r["Err"]) == ["ImproperConfig"], r
        for bad in ["whsec_!!", encode_secret(b"x" * 8), ""]:
            with pytest.raises(ValueError):
                Subscriber(_ignore, secret=bad)
        raw = "a-raw-secret-for-interop-1234"
        (r,) = await api(server, "icrc72_register_subscription",
                         [{"namespace": NS, "endpoint": "http://x/", "secret": raw}])
        assert await admins.secrets(r["Ok"]) == [mask(raw)]
        # Deleting a subscription takes its secrets along.
        await bobs.unsubscribe(sub_id)
        await refused("NotFound", admins.secrets(sub_id))
    finally:
        for s in (bobs, carols, admins):
            await s.close()


async def test_a_broker_made_secret_is_revealed_to_its_controllers_and_verifies_with_standard_webhooks(
    server: ServerProcess, endpoints: Any
) -> None:
    """A subscription registered without a secret is signed with one the broker made: its
    controllers obtain it in full by asking for it, a Standard Webhooks library verifies
    the pushes with it, listings stay masked, and another principal gets nothing."""
    from standardwebhooks import Webhook, WebhookVerificationError

    verified: list[int] = []
    refusals: list[str] = []
    holder: dict[str, Webhook] = {}

    async def receiver(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        try:
            notes = holder["hook"].verify(body, headers)
        except (KeyError, WebhookVerificationError) as e:
            refusals.append(repr(e))
            await respond(send, 401)
            return
        verified.extend(n["eventId"] for n in notes)
        await respond(send)

    ep = await endpoints(receiver)
    async with Admin(server.url, server.admin_token) as admin, Publisher(server.url, server.admin_token) as pub:
        alice = await admin.create_principal("alice")
        mallory = await admin.create_principal("mallory")
        await pub.register_publication(NS)

    async def call(token: str, method: str, arg: Any) -> tuple[int, dict[str, str], Any]:
        async with aiohttp.ClientSession() as http, http.post(
            f"{server.url}/v1/{method}", data=json.dumps(arg), headers={"authorization": f"Bearer {token}"}
        ) as resp:
            return resp.status, dict(resp.headers), await resp.json()

    _, _, [r] = await call(alice, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}])
    sub_id = r["Ok"]
    status, headers, [shown] = await call(alice, "tidings_reveal_subscription_secrets", [sub_id])
    assert status == 200 and headers.get("Cache-Control") == "no-store"
    (secret,) = shown["Ok"]
    assert secret.startswith("whsec_") and not secret.endswith("…")
    _, _, [listed] = await call(alice, "tidings_get_subscription_secrets", [sub_id])
    assert listed["Ok"] == [mask(secret)]  # listings stay masked
    _, _, subs = await call(alice, "icrc72_get_subscriptions", {})
    assert secret not in json.dumps(subs)
    # Another principal: refused, and nothing of the secret in the answer.
    for method in ("tidings_reveal_subscription_secrets", "tidings_get_subscription_secrets"):
        status, _, [theirs] = await call(mallory, method, [sub_id])
        assert status == 200 and list(theirs["Err"]) == ["Unauthorized"], theirs
        assert secret[6:12] not in json.dumps(theirs)
    _, _, [unknown] = await call(alice, "tidings_reveal_subscription_secrets", [sub_id + 100])
    assert list(unknown["Err"]) == ["NotFound"]

    holder["hook"] = Webhook(secret)
    async with Publisher(server.url, server.admin_token) as pub:
        ids = [await pub.publish(NS, i) for i in range(3)]
        await eventually(lambda: sorted(verified) == ids, timeout=15)
    assert refusals == []

    # The SDK: a Subscriber that did not register the subscription learns its secrets by
    # revealing them, then verifies its pushes (and refuses one signed otherwise).
    got: list[int] = []

    async def handle(n: EventNotification) -> None:
        got.append(n.eventId)

    sdk = Subscriber(handle, url=server.url, token=alice)
    mallorys = Subscriber(_ignore, url=server.url, token=mallory)
    sdk_ep = await endpoints(sdk)
    try:
        assert await sdk.reveal_secrets(sub_id) == [secret]
        await sdk.update(sub_id, endpoint=sdk_ep.url)
        async with Publisher(server.url, server.admin_token) as pub:
            later = await pub.publish(NS, "via the SDK")
        await eventually(lambda: got == [later], timeout=15)
        body = msgspec.json.encode([EventNotification(
            id=99, eventId=99, prev_id=None, timestamp=1, namespace=NS, data={"Nat": 1}, source="mallory",
        )])
        forged = {"content-type": "application/json", "x-tidings-subscription": str(sub_id),
                  **sign([encode_secret(b"m" * 32)], "m1", int(time.time()), body)}
        async with aiohttp.ClientSession() as http, http.post(sdk_ep.url, data=body, headers=forged) as resp:
            assert resp.status == 401
        # Mallory's SDK cannot learn it.
        with pytest.raises(ItemError) as e:
            await mallorys.reveal_secrets(sub_id)
        assert e.value.code == "Unauthorized"
    finally:
        await sdk.close()
        await mallorys.close()
