"""Subscriptions end to end: filters, configs, skip, stopped, allow and deny lists,
controllers, deleting, namespace patterns and exact statistics (docs/semantics.md).

Every test runs the real server process and a real HTTP endpoint (one ``Recorder``
per test, told apart by the ``x-tidings-subscription`` header). Waiting for what must
*not* arrive uses the order guarantee where it can: delivery is in order per
subscription, so once a later event has arrived, an earlier one that was going to come
would have come first.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import aiohttp
import msgspec
import pytest

from tidings.client import (
    Admin,
    ApiResponseError,
    EventNotification,
    ItemError,
    Principal,
    Publisher,
    Subscriber,
    Value,
    from_python,
    item_result,
)

from .conftest import ServerProcess, eventually, read_body, respond
from .test_e2e_guarantees import parse_metrics

pytestmark = pytest.mark.e2e

FILTER = "icrc72:subscription:filter"
SKIP = "icrc72:subscription:skip"
STOPPED = "icrc72:subscription:stopped"
SUB_CONTROLLERS = "icrc72:subscription:controllers"
PUB_ALLOWED = "icrc72:publication:publishers:allowed:list"
PUB_DENIED = "icrc72:publication:publishers:disallowed:list"
SUBS_ALLOWED = "icrc72:publication:subscribers:allowed:list"
SUBS_DENIED = "icrc72:publication:subscribers:disallowed:list"
PUB_CONTROLLERS = "icrc72:publication:controllers"

_decode_push = msgspec.json.Decoder(list[EventNotification]).decode


# -- helpers ---------------------------------------------------------------------------------


class Recorder:
    """A subscriber endpoint: records every notification per subscription and answers 200.

    ``hold[sub_id]`` (an asyncio.Event) keeps that subscription's pushes waiting until it
    is set; ``arrived[sub_id]`` counts pushes that reached the endpoint.
    """

    def __init__(self) -> None:
        self.by_sub: dict[int, list[EventNotification]] = defaultdict(list)
        self.hold: dict[int, asyncio.Event] = {}
        self.arrived: dict[int, int] = defaultdict(int)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        sub = int(dict(scope["headers"])[b"x-tidings-subscription"])
        self.arrived[sub] += 1
        if sub in self.hold:
            await self.hold[sub].wait()
        self.by_sub[sub].extend(_decode_push(body))
        await respond(send)

    def ids(self, sub: int) -> list[int]:
        return [n.eventId for n in self.by_sub[sub]]

    def keys(self, sub: int) -> list[tuple[str, int]]:
        return [(n.namespace, n.eventId) for n in self.by_sub[sub]]


async def _ignore(n: EventNotification) -> None:
    pass


class World:
    """Principals of one server with their SDK objects, a raw API, and one endpoint."""

    def __init__(self, server: ServerProcess, endpoints: Any) -> None:
        self.server = server
        self._endpoints = endpoints
        self.tokens: dict[str, str] = {"admin": server.admin_token}
        self._clients: list[Any] = []
        self._pubs: dict[str, Publisher] = {}
        self._subs: dict[str, Subscriber] = {}
        self._admins: dict[str, Admin] = {}
        self.rec = Recorder()
        self.url = ""
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.url = (await self._endpoints(self.rec)).url

    def principals(self, *names: str) -> None:
        for name in names:
            self.tokens[name] = self.server.cli("principal", "create", name)

    def pub(self, name: str) -> Publisher:
        if name not in self._pubs:
            self._pubs[name] = Publisher(self.server.url, self.tokens[name])
            self._clients.append(self._pubs[name])
        return self._pubs[name]

    def sub(self, name: str) -> Subscriber:
        """The SDK's subscription calls as ``name`` (its ASGI side is not mounted)."""
        if name not in self._subs:
            self._subs[name] = Subscriber(_ignore, url=self.server.url, token=self.tokens[name])
            self._clients.append(self._subs[name])
        return self._subs[name]

    def admin(self, name: str = "admin") -> Admin:
        if name not in self._admins:
            self._admins[name] = Admin(self.server.url, self.tokens[name])
            self._clients.append(self._admins[name])
        return self._admins[name]

    async def api(self, method: str, arg: Any, as_: str = "admin") -> Any:
        """A raw call; asserts 200 and returns the decoded JSON answer."""
        if self._http is None:
            self._http = aiohttp.ClientSession()
        headers = {"authorization": f"Bearer {self.tokens[as_]}", "content-type": "application/json"}
        async with self._http.post(f"{self.server.url}/v1/{method}", data=json.dumps(arg), headers=headers) as r:
            body = await r.json()
            assert r.status == 200, body
            return body

    async def subscribe(self, name: str, namespace: str, **kw: Any) -> int:
        return await self.sub(name).subscribe(namespace, self.url, **kw)

    async def close(self) -> None:
        for c in self._clients:
            await c.close()
        if self._http is not None:
            await self._http.close()

    # -- statistics ---------------------------------------------------------------------

    async def pub_stats(self) -> dict[str, dict[str, int]]:
        return {p.namespace: _nats(p.stats) for p in await self.admin().get_publications()}

    async def sub_stats(self) -> dict[int, dict[str, int]]:
        return {s.id: _nats(s.stats) for s in await self.admin().get_subscriptions()}

    async def settled(self, timeout: float = 20.0) -> None:
        """Wait until every publication's events are sent and every notification confirmed.

        (Not for a namespace with a stopped subscription: it is sent nothing.)
        """

        async def check() -> bool:
            pubs, subs = await self.pub_stats(), await self.sub_stats()
            return all(
                s["icrc72:publication:stats:events:sent"] == s["icrc72:publication:stats:events"]
                for s in pubs.values()
            ) and all(
                s["icrc72:subscription:stats:confirmations"] == s["icrc72:subscription:stats:notifications"]
                # Confirmations are counted in the background: wait until every notification
                # recorded is settled in the counters too, not only pushed.
                and s.get("tidings:subscription:stats:recorded", 0)
                <= s["icrc72:subscription:stats:confirmations"] + s.get("tidings:subscription:stats:deadLetters", 0)
                for s in subs.values()
            )

        await eventually(check, timeout=timeout)


@pytest.fixture
async def world(server: ServerProcess, endpoints: Any) -> AsyncIterator[World]:
    w = World(server, endpoints)
    await w.start()
    yield w
    await w.close()


def _nats(pairs: Iterable[tuple[str, Any]]) -> dict[str, int]:
    out = {}
    for k, v in pairs:
        assert list(v) == ["Nat"], (k, v)
        out[k] = v["Nat"]
    return out


def code_of(result: dict[str, Any] | None) -> str:
    """``"Ok"`` or the error code of a raw item result."""
    assert result is not None
    if "Ok" in result:
        return "Ok"
    (code,) = result["Err"]
    return code


def detail_of(result: dict[str, Any]) -> str:
    (detail,) = result["Err"].values()
    return str(detail)


async def refused(code: str, call: Any) -> ItemError:
    with pytest.raises(ItemError) as e:
        await call
    assert e.value.code == code, e.value
    return e.value


async def publish_codes(p: Publisher, namespace: str, *data: Any) -> list[str]:
    results = await p.publish_batch([p.event(namespace, d) for d in data])
    return ["Ok" if r is not None and r.Err is msgspec.UNSET else r.Err.code for r in results]  # type: ignore[union-attr]


def cls(**fields: Any) -> Value:
    """An ICRC-16 Class with the given fields."""
    return Value("Class", tuple((k, from_python(v), False) for k, v in fields.items()))


def text(s: str) -> dict[str, str]:
    return {"Text": s}


def nat(n: int) -> dict[str, int]:
    return {"Nat": n}


def nat_array(*ns: int) -> dict[str, list[dict[str, int]]]:
    return {"Array": [nat(n) for n in ns]}


async def quiet() -> None:
    """A short pause for what must not happen to have had the chance to."""
    await asyncio.sleep(0.3)


# -- 1. filters ------------------------------------------------------------------------------

F_AMOUNT = "amount > 100"
F_SHIPPED = "status == shipped & (total >= 100 | priority == high)"
F_SKU = "items[sku == A-17]"
F_TAG = "tags.* == urgent"
F_FLAG = "flag"
F_NOT_SHIPPED = "status != shipped"

# (data, the filters it passes); Map and Class data alike.
FILTER_EVENTS: list[tuple[Any, set[str]]] = [
    ({"amount": 150}, {F_AMOUNT}),
    ({"amount": 100}, set()),
    (cls(amount=101, status="pending"), {F_AMOUNT, F_NOT_SHIPPED}),
    ({"status": "shipped", "total": 120}, {F_SHIPPED}),
    (cls(status="shipped", total=50, priority="high"), {F_SHIPPED}),
    ({"status": "shipped", "total": 50, "priority": "low"}, set()),
    ({"status": "pending", "total": 500}, {F_NOT_SHIPPED}),
    ({"status": "shipped", "total": 100}, {F_SHIPPED}),
    ({"items": [{"sku": "B-2"}, {"sku": "A-17"}]}, {F_SKU}),
    (cls(items=[cls(sku="A-17")]), {F_SKU}),
    ({"items": [{"sku": "A-170"}], "amount": 99}, set()),
    ({"tags": ["low", "urgent"]}, {F_TAG}),
    ({"tags": {"a": "low", "b": "urgent"}}, {F_TAG}),
    (cls(tags=cls(x="urgent"), flag=True), {F_TAG, F_FLAG}),
    ({"tags": ["urgently"]}, set()),
    ({"flag": False}, set()),
    ({"flag": True, "amount": 101.5}, {F_FLAG, F_AMOUNT}),
    (cls(flag=False), set()),
    ({"flag": None}, set()),
    ({"amount": "150"}, set()),  # Text is not a number
    ("shipped", set()),  # not an object: every path leads nowhere, != included
]


async def test_filters_select_events(world: World) -> None:
    w = world
    ns = "com.example.filters"
    w.principals("alice", "bob", "carol")
    await w.pub("alice").register_publication(ns)

    # A bad filter refuses its own item, with the position; the others of the batch register.
    results = await w.api("icrc72_register_subscription", [
        {"namespace": ns, "endpoint": w.url, "filter": F_AMOUNT},
        {"namespace": ns, "endpoint": w.url, "filter": "amount >"},
        {"namespace": ns, "endpoint": w.url, "filter": F_SHIPPED},
        {"namespace": ns, "endpoint": w.url, "config": [[FILTER, text("status == shipped & (total >= 100")]]},
    ], as_="bob")
    assert [code_of(r) for r in results] == ["Ok", "ImproperConfig", "Ok", "ImproperConfig"]
    assert "position 8" in detail_of(results[1]) and FILTER in detail_of(results[1])
    assert "position 33" in detail_of(results[3])
    subs = {F_AMOUNT: results[0]["Ok"], F_SHIPPED: results[2]["Ok"]}
    subs[F_NOT_SHIPPED] = await w.subscribe("bob", ns, filter=F_NOT_SHIPPED)
    for f in (F_SKU, F_TAG):
        subs[f] = await w.subscribe("carol", ns, filter=f)
    subs[F_FLAG] = await w.subscribe("carol", ns, config={FILTER: F_FLAG})
    everything = await w.subscribe("carol", ns)
    assert len(await w.admin().get_subscriptions(namespace=ns)) == 7

    ids = await w.pub("alice").publish_many(ns, [d for d, _ in FILTER_EVENTS])
    await w.settled()
    for f, sub_id in subs.items():
        want = [i for i, (_, passes) in zip(ids, FILTER_EVENTS, strict=True) if f in passes]
        assert w.rec.ids(sub_id) == want, f
        assert {n.filter for n in w.rec.by_sub[sub_id]} == {f}  # the filter is echoed
    assert w.rec.ids(everything) == ids
    assert {n.filter for n in w.rec.by_sub[everything]} == {None}
    # Map and Class data arrive as published.
    assert [n.data for n in w.rec.by_sub[everything]] == [from_python(d).to_wire() for d, _ in FILTER_EVENTS]

    # At update, too: the bad item is refused with the position, the good one applies.
    results = await w.api("icrc72_update_subscription", [
        {"id": subs[F_AMOUNT], "config": [[FILTER, text("amount > 100 &")]]},
        {"id": subs[F_NOT_SHIPPED], "config": [[FILTER, text("amount <= 100")]]},
    ], as_="bob")
    assert [code_of(r) for r in results] == ["ImproperConfig", "Ok"]
    assert "position 14" in detail_of(results[0])
    with pytest.raises(ItemError) as e:
        await w.sub("bob").update(subs[F_SHIPPED], {FILTER: "(status == shipped"})
    assert e.value.code == "ImproperConfig" and "position" in str(e.value.detail)
    big, small = await w.pub("alice").publish_many(ns, [{"amount": 500}, {"amount": 5}])
    await w.settled()
    assert w.rec.ids(subs[F_AMOUNT])[-1] == big
    assert w.rec.by_sub[subs[F_AMOUNT]][-1].filter == F_AMOUNT  # the refused update changed nothing
    assert w.rec.ids(subs[F_NOT_SHIPPED])[-1] == small
    assert w.rec.by_sub[subs[F_NOT_SHIPPED]][-1].filter == "amount <= 100"
    assert small not in w.rec.ids(subs[F_AMOUNT]) and big not in w.rec.ids(subs[F_NOT_SHIPPED])


# -- 2. configs ------------------------------------------------------------------------------


async def test_config_keys_registered_updated_and_refused(world: World) -> None:
    w = world
    ns, ns2 = "com.example.cfg", "com.example.cfg.two"
    w.principals("alice", "bob", "mallory")
    alice = w.pub("alice")

    # -- publications: every key at registration, and an unknown one, kept as given
    pub_config = {
        PUB_ALLOWED: [Principal("alice")],
        SUBS_DENIED: [Principal("mallory")],
        PUB_CONTROLLERS: ["alice"],
        "x-team": "orders",
    }
    await alice.register_publication(ns, pub_config)
    results = await w.api("icrc72_register_publication", [
        {"namespace": "com.example.cfg.bad1", "config": [[PUB_ALLOWED, text("alice")]]},
        {"namespace": "com.example.cfg.bad2", "config": [[SUBS_DENIED, nat_array(5)]]},
        {"namespace": "com.example.cfg.bad3", "config": [[PUB_CONTROLLERS, {"Array": [{"Blob": "/w=="}]}]]},
        {"namespace": "com.example.cfg.bad4", "config": [[SUBS_ALLOWED, {"Map": []}]]},
        {"namespace": ns2, "config": [["x-unknown", nat(1)]]},
    ], as_="alice")
    assert [code_of(r) for r in results] == ["ImproperConfig"] * 4 + ["Ok"]
    for r, key in zip(results, [PUB_ALLOWED, SUBS_DENIED, PUB_CONTROLLERS, SUBS_ALLOWED], strict=False):
        assert key in detail_of(r)
    pubs = {p.namespace: p for p in await w.admin().get_publications()}
    assert sorted(pubs) == [ns, ns2]
    assert pubs[ns].config == [
        (PUB_ALLOWED, {"Array": [{"Principal": "alice"}]}),
        (SUBS_DENIED, {"Array": [{"Principal": "mallory"}]}),
        (PUB_CONTROLLERS, {"Array": [text("alice")]}),
        ("x-team", text("orders")),
    ]
    assert pubs[ns2].config == [("x-unknown", nat(1))]

    # The deny list applies; removing it with null lifts it.
    await refused("Unauthorized", w.subscribe("mallory", ns))
    await alice.update_publication(ns, {"x-team": "billing", "x-new": 7, SUBS_DENIED: None, "x-absent": None})
    (p,) = await w.admin().get_publications(prev="com.example.cf", take=1)
    assert p.config == [
        (PUB_ALLOWED, {"Array": [{"Principal": "alice"}]}),
        (PUB_CONTROLLERS, {"Array": [text("alice")]}),
        ("x-team", text("billing")),  # set in place
        ("x-new", nat(7)),  # appended
    ]
    mallory_sub = await w.subscribe("mallory", ns)
    # Invalid values at update are refused item by item; nothing of a refused item applies.
    results = await w.api("icrc72_update_publication", [
        {"namespace": ns2, "config": [["x-unknown", None]]},
        {"namespace": ns, "config": [["x-team", text("lost")], [PUB_DENIED, nat_array(1)]]},
        {"namespace": ns, "config": [[SUBS_ALLOWED, {"Map": []}]]},
        {"namespace": ns, "config": [[PUB_ALLOWED, {"Array": [{"Bool": True}]}]]},
    ], as_="alice")
    assert [code_of(r) for r in results] == ["Ok", "ImproperConfig", "ImproperConfig", "ImproperConfig"]
    pubs = {p.namespace: p for p in await w.admin().get_publications()}
    assert pubs[ns].config == p.config
    assert pubs[ns2].config == []

    # -- subscriptions: request fields, config pairs, unknown keys
    bob = w.sub("bob")
    by_fields = await w.subscribe("bob", ns, filter="amount > 1", skip=[2, 1], stopped=True)
    by_config = await w.subscribe("bob", ns, config={
        FILTER: "amount > 1", SKIP: 3, STOPPED: "true", "x-note": "keep",
    })
    subs = {s.id: s for s in await w.admin().get_subscriptions()}
    assert subs[by_fields].config == [(FILTER, text("amount > 1")), (SKIP, nat_array(2, 1)), (STOPPED, {"Bool": True})]
    assert subs[by_config].config == [
        (FILTER, text("amount > 1")), (SKIP, nat(3)), (STOPPED, text("true")), ("x-note", text("keep")),
    ]
    (bob_info,) = await w.admin().get_subscribers(prev="alice", take=1)
    assert bob_info.subscriber == "bob"
    assert _nats(bob_info.stats)["icrc72:subscriber:stats:subscriptions"] == 2
    assert _nats(bob_info.stats)["icrc72:subscriber:stats:subscriptions:active"] == 0

    results = await w.api("icrc72_register_subscription", [
        {"namespace": ns, "endpoint": w.url, "config": [[SKIP, text("3")]]},
        {"namespace": ns, "endpoint": w.url, "config": [[SKIP, nat(0)]]},
        {"namespace": ns, "endpoint": w.url, "skip": 0},
        {"namespace": ns, "endpoint": w.url, "skip": [0, 1]},
        {"namespace": ns, "endpoint": w.url, "config": [[STOPPED, nat(1)]]},
        {"namespace": ns, "endpoint": w.url, "config": [[FILTER, nat(5)]]},
        {"namespace": ns, "endpoint": w.url, "config": [[SUB_CONTROLLERS, text("bob")]]},
        {"namespace": ns, "endpoint": w.url, "config": [[SUB_CONTROLLERS, nat_array(1)]]},
        {"namespace": ns, "endpoint": w.url, "config": [["x-other", nat_array(1)]]},
    ], as_="bob")
    assert [code_of(r) for r in results] == ["ImproperConfig"] * 8 + ["Ok"]
    for r, key in zip(results, [SKIP, SKIP, SKIP, SKIP, STOPPED, FILTER, SUB_CONTROLLERS, SUB_CONTROLLERS],
                      strict=False):
        assert key in detail_of(r)
    assert len(await w.admin().get_subscriptions(namespace=ns)) == 4  # mallory's, bob's two, the good one

    results = await w.api("icrc72_update_subscription", [
        {"id": by_fields, "config": [[SKIP, text("2")]]},
        {"id": by_fields, "config": [[STOPPED, nat(0)]]},
        {"id": by_fields, "config": [[SKIP, {"Array": [nat(0), nat(1)]}]]},
        {"id": by_config, "config": [["x-note", None], ["x-more", text("y")]]},
        {"id": by_fields, "config": [["x-lost", nat(1)], [SUB_CONTROLLERS, {"Array": [nat(3)]}]]},
    ], as_="bob")
    assert [code_of(r) for r in results] == ["ImproperConfig", "ImproperConfig", "ImproperConfig", "Ok",
                                             "ImproperConfig"]
    subs = {s.id: s for s in await w.admin().get_subscriptions()}
    assert subs[by_fields].config == [(FILTER, text("amount > 1")), (SKIP, nat_array(2, 1)), (STOPPED, {"Bool": True})]
    assert subs[by_config].config == [
        (FILTER, text("amount > 1")), (SKIP, nat(3)), (STOPPED, text("true")), ("x-more", text("y")),
    ]

    # Changes take effect: start (remove stopped), drop skip, change the filter.
    await bob.update(by_config, {STOPPED: None, SKIP: None, FILTER: "amount > 5"})
    (info,) = [s for s in await w.admin().get_subscriptions() if s.id == by_config]
    assert info.config == [(FILTER, text("amount > 5")), ("x-more", text("y"))]
    # (the last event passes every time: in order, what came before it was decided)
    ids = await alice.publish_many(ns, [{"amount": a} for a in [*range(10), 99]])
    await eventually(lambda: w.rec.ids(by_config)[-1:] == ids[-1:])
    assert w.rec.ids(by_config) == ids[6:]
    # Now every other event by id (skip set again), no filter.
    await bob.update(by_config, {FILTER: None, SKIP: [2, 0]})
    more = await alice.publish_many(ns, [{"amount": 0}] * 7)
    assert more[-1] % 2 == 0
    await eventually(lambda: w.rec.ids(by_config)[-1:] == more[-1:])
    assert w.rec.ids(by_config) == ids[6:] + [i for i in more if i % 2 == 0]
    assert {n.filter for n in w.rec.by_sub[by_config][5:]} == {None}
    await eventually(lambda: w.rec.ids(mallory_sub) == list(range(1, 19)))
    await quiet()
    assert w.rec.ids(by_fields) == []  # still stopped
    (bob_info,) = await w.admin().get_subscribers(prev="alice", take=1)
    assert _nats(bob_info.stats)["icrc72:subscriber:stats:subscriptions:active"] == 2


# -- 3. skip ---------------------------------------------------------------------------------


async def test_skip_selects_by_event_id_after_the_filter(world: World) -> None:
    w = world
    ns = "com.example.skip"
    w.principals("alice", "bob")
    alice = w.pub("alice")
    await alice.register_publication(ns)
    assert await alice.publish_many(ns, range(5)) == [1, 2, 3, 4, 5]  # before the subscriptions

    every3 = await w.subscribe("bob", ns, skip=3)
    mod4 = await w.subscribe("bob", ns, skip=[4, 1])
    mod4_cfg = await w.subscribe("bob", ns, config={SKIP: [4, 5]})  # offset taken mod 4
    both = await w.subscribe("bob", ns, filter="amount >= 50", skip=[2, 0])
    both_cfg = await w.subscribe("bob", ns, config={FILTER: "amount < 50", SKIP: 3})

    amounts = [(k * 37) % 100 for k in range(30)]
    ids = await alice.publish_many(ns, [{"amount": a} for a in amounts])
    assert ids == list(range(6, 36))
    amount_of = dict(zip(ids, amounts, strict=True))
    await w.settled()
    assert w.rec.ids(every3) == [i for i in ids if i % 3 == 0]
    assert w.rec.ids(every3)[:2] == [6, 9]
    assert w.rec.ids(mod4) == [i for i in ids if i % 4 == 1]
    assert w.rec.ids(mod4_cfg) == w.rec.ids(mod4)
    # The filter first, then skip on the event's own id (not "every 2nd match").
    want = [i for i in ids if amount_of[i] >= 50 and i % 2 == 0]
    assert w.rec.ids(both) == want and 0 < len(want) < len([i for i in ids if amount_of[i] >= 50])
    assert w.rec.ids(both_cfg) == [i for i in ids if amount_of[i] < 50 and i % 3 == 0]
    assert {n.filter for n in w.rec.by_sub[both]} == {"amount >= 50"}
    stats = await w.sub_stats()
    assert stats[every3]["icrc72:subscription:stats:notifications"] == len(w.rec.ids(every3))
    assert stats[both]["icrc72:subscription:stats:notifications"] == len(want)


# -- 4. stopped ------------------------------------------------------------------------------


async def test_stopped_subscriptions_receive_nothing_and_resume_at_the_end(world: World) -> None:
    w = world
    ns = "com.example.stopped"
    w.principals("alice", "bob", "carol")
    alice, bob = w.pub("alice"), w.sub("bob")
    await alice.register_publication(ns)

    async def active() -> tuple[int, int]:
        (info,) = [s for s in await w.admin().get_subscribers() if s.subscriber == "bob"]
        st = _nats(info.stats)
        return st["icrc72:subscriber:stats:subscriptions"], st["icrc72:subscriber:stats:subscriptions:active"]

    by_field = await w.subscribe("bob", ns, stopped=True)
    by_config = await w.subscribe("bob", ns, config={STOPPED: True})
    control = await w.subscribe("carol", ns)
    assert await active() == (2, 0)

    assert await alice.publish_many(ns, [1, 2, 3]) == [1, 2, 3]
    await eventually(lambda: w.rec.ids(control) == [1, 2, 3])
    await quiet()
    assert w.rec.ids(by_field) == w.rec.ids(by_config) == []

    await bob.start(by_field)  # icrc72_start_subscription
    await bob.update(by_config, {STOPPED: False})  # or the key
    assert await active() == (2, 2)
    assert await alice.publish_many(ns, [4, 5, 6]) == [4, 5, 6]
    # In order per subscription: 1-3 would have come before 4.
    await eventually(lambda: w.rec.ids(by_field) == [4, 5, 6] and w.rec.ids(by_config) == [4, 5, 6])
    await w.settled()  # every push of 4-6 settled before stopping again

    results = await w.api("icrc72_stop_subscription", [by_field], as_="bob")
    assert [code_of(r) for r in results] == ["Ok"]
    await bob.update(by_config, {STOPPED: "true"})
    assert await active() == (2, 0)
    assert await alice.publish_many(ns, [7, 8]) == [7, 8]
    await eventually(lambda: w.rec.ids(control)[-1] == 8)
    await bob.start(by_field)
    assert await active() == (2, 1)
    assert await alice.publish(ns, 9) == 9
    await eventually(lambda: w.rec.ids(by_field)[-1] == 9)
    await eventually(lambda: w.rec.ids(control)[-1] == 9)
    await quiet()
    assert w.rec.ids(by_field) == [4, 5, 6, 9]  # 7 and 8 passed while it was stopped
    assert w.rec.ids(by_config) == [4, 5, 6]  # still stopped
    assert w.rec.ids(control) == list(range(1, 10))
    # Starting or stopping someone else's subscription is refused.
    results = await w.api("icrc72_start_subscription", [by_config, control], as_="carol")
    assert [code_of(r) for r in results] == ["Unauthorized", "Ok"]
    assert await active() == (2, 1)


async def test_start_resumes_at_the_start_even_when_the_worker_is_busy(world: World) -> None:
    """Events published after the start are delivered, even when the subscription was
    still pushing an earlier batch when it was stopped and started again."""
    w = world
    ns = "com.example.stopped.busy"
    w.principals("alice", "bob")
    alice, bob = w.pub("alice"), w.sub("bob")
    await alice.register_publication(ns)
    sub = await w.subscribe("bob", ns)
    gate = w.rec.hold[sub] = asyncio.Event()
    assert await alice.publish(ns, 1) == 1
    await eventually(lambda: w.rec.arrived[sub] == 1)  # the push of 1 is in flight
    await bob.stop(sub)
    assert await alice.publish(ns, 2) == 2  # while stopped: never delivered
    await bob.start(sub)
    assert await alice.publish_many(ns, [3, 4]) == [3, 4]
    gate.set()
    await eventually(lambda: w.rec.ids(sub)[-1:] == [4])
    await w.settled()
    assert w.rec.ids(sub) == [1, 3, 4]


async def _worker_metrics(server: ServerProcess) -> tuple[int, int]:
    """(tidings_delivery_worker_runs_total, tidings_delivery_workers_running) from /metrics."""
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as r:
        m = parse_metrics(await r.text())
    return int(m["tidings_delivery_worker_runs_total"]), int(m["tidings_delivery_workers_running"])


async def test_stopped_subscriptions_hold_no_worker_from_startup_on(world: World) -> None:
    """A stopped subscription costs no task, also after a restart: its worker starts when
    the subscription does, and then delivers what is published."""
    w = world
    ns = "com.example.stopped.restart"
    w.principals("alice", "bob")
    await w.pub("alice").register_publication(ns)
    stopped = [await w.subscribe("bob", ns, stopped=True) for _ in range(5)]
    running = await w.subscribe("bob", ns)
    await eventually(lambda: _running_is(w.server, 1))
    await w.close()
    w.server.restart()
    assert await _worker_metrics(w.server) == (1, 1)  # only the running subscription's
    bob = Subscriber(_ignore, url=w.server.url, token=w.tokens["bob"])
    try:
        await bob.start(stopped[0])
    finally:
        await bob.close()
    async with Publisher(w.server.url, w.tokens["alice"]) as alice:
        assert await alice.publish(ns, 1) == 1
    await eventually(lambda: w.rec.ids(stopped[0]) == [1] and w.rec.ids(running) == [1])
    assert await _worker_metrics(w.server) == (2, 2)
    assert all(w.rec.ids(s) == [] for s in stopped[1:])


async def _running_is(server: ServerProcess, n: int) -> bool:
    return (await _worker_metrics(server))[1] == n


# -- 5. allow and deny lists -----------------------------------------------------------------


async def test_publisher_lists(world: World) -> None:
    w = world
    open_ns, allow_ns = "com.example.acl.open", "com.example.acl.allow"
    w.principals("alice", "bob", "carol", "dave", "erin")
    alice, bob, carol, dave, erin = (w.pub(n) for n in ("alice", "bob", "carol", "dave", "erin"))

    # Allowed list: items as Principal, Text and Blob (UTF-8 of the name).
    # (alice creates and owns it although the list does not let her publish to it.)
    await alice.register_publication(allow_ns, {PUB_ALLOWED: [Principal("bob"), "carol", b"dave"]})
    await alice.register_publication(open_ns)
    assert await publish_codes(bob, allow_ns, 1) == ["Ok"]  # without registering as a publisher
    assert await publish_codes(carol, allow_ns, 2) == ["Ok"]
    assert await publish_codes(dave, allow_ns, 3) == ["Ok"]
    assert await publish_codes(erin, allow_ns, 4) == ["Unauthorized"]
    assert await publish_codes(alice, allow_ns, 5) == ["Unauthorized"]  # the owner is not listed
    await refused("Unauthorized", erin.register_publication(allow_ns))
    # Item by item in one batch.
    results = await bob.publish_batch([bob.event(allow_ns, 6), bob.event(open_ns, 7), bob.event(allow_ns, 8)])
    assert [r.Err.code if r.Err is not msgspec.UNSET else r.Ok for r in results] == [[4], "Unauthorized", [5]]

    # Disallowed list: refused even when registered (and even when allowed).
    await bob.register_publication(open_ns)
    assert await publish_codes(bob, open_ns, 1) == ["Ok"]
    await alice.update_publication(open_ns, {PUB_DENIED: ["bob"]})
    assert await publish_codes(bob, open_ns, 2) == ["Unauthorized"]
    assert await publish_codes(alice, open_ns, 3) == ["Ok"]
    await alice.update_publication(allow_ns, {PUB_DENIED: [b"carol"]})
    assert await publish_codes(carol, allow_ns, 9) == ["Unauthorized"]
    # A publisher removed from the allowed list can no longer publish.
    await alice.update_publication(allow_ns, {PUB_ALLOWED: [Principal("bob")]})
    assert await publish_codes(dave, allow_ns, 10) == ["Unauthorized"]
    assert await publish_codes(bob, allow_ns, 11) == ["Ok"]
    # Without the lists, the registered publishers may again.
    await alice.update_publication(allow_ns, {PUB_ALLOWED: None, PUB_DENIED: None})
    await alice.update_publication(open_ns, {PUB_DENIED: None})
    assert await publish_codes(alice, allow_ns, 12) == ["Ok"]
    assert await publish_codes(bob, allow_ns, 13) == ["Unauthorized"]  # never registered
    assert await publish_codes(bob, open_ns, 14) == ["Ok"]
    pubs = await w.pub_stats()
    assert pubs[allow_ns]["icrc72:publication:stats:events"] == 7
    assert pubs[open_ns]["icrc72:publication:stats:events"] == 3


async def test_subscriber_lists(world: World) -> None:
    w = world
    ns = "com.example.acl.subs"
    w.principals("alice", "bob", "carol", "dave", "erin")
    alice = w.pub("alice")
    await alice.register_publication(ns, {
        SUBS_ALLOWED: [Principal("alice"), Principal("bob"), "carol", b"dave"],
        SUBS_DENIED: ["dave"],
    })
    await refused("Unauthorized", w.subscribe("erin", ns))  # not allowed
    await refused("Unauthorized", w.subscribe("dave", ns))  # allowed, but denied
    results = await w.api("icrc72_register_subscription", [
        {"namespace": ns, "endpoint": w.url}, {"namespace": ns, "endpoint": w.url, "filter": "x"},
    ], as_="erin")
    assert [code_of(r) for r in results] == ["Unauthorized", "Unauthorized"]
    control = await w.subscribe("alice", ns)
    bob = await w.subscribe("bob", ns)
    carol = await w.subscribe("carol", ns)

    assert await alice.publish_many(ns, [1, 2]) == [1, 2]
    await eventually(lambda: w.rec.ids(bob) == [1, 2] and w.rec.ids(carol) == [1, 2])
    # carol leaves the allowed list: nothing published after the change reaches her.
    await alice.update_publication(ns, {SUBS_ALLOWED: [Principal("alice"), Principal("bob"), b"dave"]})
    assert await alice.publish_many(ns, [3, 4]) == [3, 4]
    await eventually(lambda: w.rec.ids(bob) == [1, 2, 3, 4])
    # bob is denied now: 5 reaches only the control.
    await alice.update_publication(ns, {SUBS_DENIED: ["dave", Principal("bob")]})
    assert await alice.publish(ns, 5) == 5
    # carol is allowed again: from the next event on.
    await alice.update_publication(ns, {SUBS_ALLOWED: None})
    assert await alice.publish(ns, 6) == 6
    await w.settled()
    assert w.rec.ids(control) == [1, 2, 3, 4, 5, 6]
    assert w.rec.ids(bob) == [1, 2, 3, 4]
    assert w.rec.ids(carol) == [1, 2, 6]
    # A subscription refused by the lists is still registered: it just is not sent events.
    assert len(await w.admin().get_subscriptions(namespace=ns)) == 3
    # "sent" is recorded just after the endpoint takes a push: wait for it, not for a race.
    async def sent_three() -> bool:
        return (await w.sub_stats())[carol]["icrc72:subscription:stats:notifications"] == 3

    await eventually(sent_three, timeout=10)


async def test_subscriber_list_change_spares_events_published_before_it(world: World) -> None:
    """Docs: "A change to a list applies from the next event on". Events published before
    the change are still delivered, even when the subscriber is behind when it is made."""
    w = world
    ns = "com.example.acl.behind"
    w.principals("alice", "bob", "carol")
    alice = w.pub("alice")
    await alice.register_publication(ns, {SUBS_ALLOWED: ["bob", "carol"]})
    bob = await w.subscribe("bob", ns)
    carol = await w.subscribe("carol", ns)
    gate = w.rec.hold[carol] = asyncio.Event()

    assert await alice.publish(ns, 1) == 1
    await eventually(lambda: w.rec.arrived[carol] == 1)  # carol's endpoint holds event 1
    assert await alice.publish_many(ns, [2, 3]) == [2, 3]
    await eventually(lambda: w.rec.ids(bob) == [1, 2, 3])
    await alice.update_publication(ns, {SUBS_ALLOWED: ["bob"]})
    assert await alice.publish_many(ns, [4, 5]) == [4, 5]
    await eventually(lambda: w.rec.ids(bob) == [1, 2, 3, 4, 5])
    gate.set()
    await w.settled()
    assert w.rec.ids(carol) == [1, 2, 3]


# -- 6. deleting and controllers ------------------------------------------------------------


async def test_delete_publications_and_subscriptions(world: World) -> None:
    w = world
    ns = "com.example.del.orders"
    w.principals("alice", "bob", "mallory")
    alice = w.pub("alice")
    await alice.register_publication(ns)
    assert await alice.publish_many(ns, [1, 2]) == [1, 2]
    direct = await w.subscribe("bob", ns)
    second = await w.subscribe("bob", ns)
    pattern = await w.subscribe("bob", "com.example.del.*")  # not "exactly that namespace"
    assert await alice.publish(ns, 3) == 3
    await eventually(lambda: all(w.rec.ids(s) == [3] for s in (direct, second, pattern)))

    # -- subscriptions: only their controllers (here the subscriber) delete them
    results = await w.api("icrc72_delete_subscription", [second, 999_999], as_="mallory")
    assert [code_of(r) for r in results] == ["Unauthorized", "NotFound"]
    await refused("Unauthorized", w.sub("alice").unsubscribe(second))  # the publication's owner is not
    await w.sub("bob").unsubscribe(second)
    assert second not in await w.sub_stats()
    assert await alice.publish(ns, 4) == 4
    await eventually(lambda: w.rec.ids(pattern) == [3, 4] and w.rec.ids(direct) == [3, 4])
    await quiet()
    assert w.rec.ids(second) == [3]

    # -- publications: only their controllers (here the owner)
    results = await w.api("icrc72_delete_publication", [ns], as_="mallory")
    assert [code_of(r) for r in results] == ["Unauthorized"]
    await refused("Unauthorized", w.pub("bob").delete_publication(ns))
    await refused("Unauthorized", w.pub("mallory").update_publication(ns, {"x": 1}))
    await alice.delete_publication(ns)
    assert ns not in await w.pub_stats()
    assert set(await w.sub_stats()) == {pattern}  # its subscriptions ended, the pattern's did not
    with pytest.raises(ApiResponseError) as e:
        await alice.publish(ns, 5)
    assert (e.value.status, e.value.code) == (404, "namespace_not_found")
    with pytest.raises(ApiResponseError) as e:
        await alice.delete_publication(ns)
    assert e.value.code == "namespace_not_found"

    # Registered again (by someone else, who owns it now): the id chain continues.
    await w.pub("bob").register_publication(ns)
    assert await w.pub("bob").publish(ns, 5) == 5
    await eventually(lambda: w.rec.ids(pattern) == [3, 4, 5])
    assert w.rec.by_sub[pattern][-1].prev_id == 4
    await quiet()
    assert w.rec.ids(direct) == [3, 4]
    await refused("Unauthorized", alice.delete_publication(ns))
    assert _nats((await w.admin().get_publications())[0].stats)["icrc72:publication:stats:publishers"] == 1


async def test_controllers(world: World) -> None:
    w = world
    ns = "com.example.ctl"
    w.principals("alice", "bob", "carol", "mallory")
    alice = w.pub("alice")
    await alice.register_publication(ns)

    # -- a subscription's controllers list replaces the subscriber as controller
    sub = await w.subscribe("bob", ns, config={SUB_CONTROLLERS: [Principal("carol")]})
    await refused("Unauthorized", w.sub("bob").update(sub, {SKIP: 2}))
    await refused("Unauthorized", w.sub("bob").stop(sub))
    await refused("Unauthorized", w.sub("mallory").update(sub, {SKIP: 2}))
    await refused("Unauthorized", w.sub("alice").update(sub, {SKIP: 2}))  # owning the publication is not enough
    await w.sub("carol").update(sub, {SKIP: 2, "x-by": "carol"})
    await w.sub("carol").stop(sub)
    await w.sub("carol").start(sub)
    await w.sub("admin").update(sub, {"x-by": "admin"})  # admins may change anything
    await w.sub("carol").update(sub, {SUB_CONTROLLERS: ["bob", "carol"]})
    await w.sub("bob").update(sub, {SKIP: None})
    (info,) = await w.admin().get_subscriptions(namespace=ns)
    assert info.config == [
        (SUB_CONTROLLERS, {"Array": [text("bob"), text("carol")]}),
        ("x-by", text("admin")),
        (STOPPED, {"Bool": False}),
    ]
    await refused("Unauthorized", w.sub("mallory").unsubscribe(sub))
    await w.sub("carol").unsubscribe(sub)
    assert await w.sub_stats() == {}
    other = await w.subscribe("bob", ns)
    await w.sub("admin").unsubscribe(other)
    assert await w.sub_stats() == {}

    # -- a publication's controllers list replaces the owner as controller
    await alice.update_publication(ns, {PUB_CONTROLLERS: [b"carol"]})
    await refused("Unauthorized", alice.update_publication(ns, {"x": 1}))
    await refused("Unauthorized", alice.delete_publication(ns))
    await refused("Unauthorized", w.pub("mallory").update_publication(ns, {"x": 1}))
    await w.pub("carol").update_publication(ns, {"x-by": "carol"})
    await w.pub("admin").update_publication(ns, {"x-by": "admin"})
    (p,) = await w.admin().get_publications()
    assert p.config == [(PUB_CONTROLLERS, {"Array": [{"Blob": base64.b64encode(b"carol").decode()}]}),
                        ("x-by", text("admin"))]
    # alice is still the owner and a publisher: publishing is not controlling.
    assert await alice.publish(ns, 1) == 1
    await refused("Unauthorized", w.pub("mallory").delete_publication(ns))
    await w.pub("carol").delete_publication(ns)
    assert await w.pub_stats() == {}
    await alice.register_publication(ns)
    await w.pub("admin").delete_publication(ns)
    assert await w.pub_stats() == {}


# -- 7. namespace patterns -------------------------------------------------------------------


async def test_namespace_patterns(world: World) -> None:
    w = world
    base, eu, paid, us, other = (
        "com.example.orders", "com.example.orders.eu", "com.example.orders.eu.paid",
        "com.example.orders.us", "com.example.other",
    )
    w.principals("alice", "bob", "carol")
    alice = w.pub("alice")
    for ns in (base, eu, paid):
        await alice.register_publication(ns)
    await alice.register_publication("com.examplex.orders.eu")

    results = await w.api("icrc72_register_subscription", [
        {"namespace": "com.**.x", "endpoint": w.url},
        {"namespace": "com.example.orders.*", "endpoint": w.url},
        {"namespace": "com..x", "endpoint": w.url},
        {"namespace": "com.example.**", "endpoint": w.url},
        {"namespace": "com.example.ord*", "endpoint": w.url},
        {"namespace": "**", "endpoint": w.url, "filter": "n >= 0"},
    ], as_="bob")
    # A catch-all pattern takes an admin (docs/semantics.md).
    assert [code_of(r) for r in results] == [
        "ImproperConfig", "Ok", "ImproperConfig", "Ok", "ImproperConfig", "Unauthorized"
    ]
    (everything,) = await w.api(
        "icrc72_register_subscription", [{"namespace": "**", "endpoint": w.url, "filter": "n >= 0"}]
    )
    one, many, anything = results[1]["Ok"], results[3]["Ok"], everything["Ok"]
    carol = await w.subscribe("carol", "com.example.orders.*")

    # Registered after the subscriptions; carol may not subscribe to it.
    await alice.register_publication(us, {SUBS_DENIED: ["carol"]})
    await alice.register_publication(other)
    await refused("Unauthorized", w.subscribe("carol", us))

    order = [base, eu, paid, us, eu, other, us, base, paid, eu, "com.examplex.orders.eu"]
    results = await alice.publish_batch([alice.event(ns, {"n": k}) for k, ns in enumerate(order)])
    published = [(ns, item_result(r)[0]) for ns, r in zip(order, results, strict=True)]
    await w.settled()

    def matching(pred: Callable[[str], bool]) -> list[tuple[str, int]]:
        return [(ns, i) for ns, i in published if pred(ns)]

    # In the order published, across namespaces.
    assert w.rec.keys(one) == matching(lambda ns: ns in (eu, us))
    assert w.rec.keys(many) == matching(lambda ns: ns.startswith("com.example."))
    assert w.rec.keys(anything) == published
    assert w.rec.keys(carol) == matching(lambda ns: ns == eu)  # us's subscriber list applies
    assert {n.filter for n in w.rec.by_sub[anything]} == {"n >= 0"}

    # A pattern subscription is listed under its pattern.
    assert [s.id for s in await w.admin().get_subscriptions(namespace="com.example.orders.*")] == [one, carol]


# -- 8. statistics ---------------------------------------------------------------------------


async def test_statistics_are_exact_under_concurrent_load(world: World) -> None:
    w = world
    A, B, C = "com.example.stats.a", "com.example.stats.b", "com.example.stats.c"
    w.principals("p1", "p2", "p3", "s1", "s2", "s3")
    for p, namespaces in (("p1", (A, B)), ("p2", (A, B)), ("p3", (A, C))):
        for ns in namespaces:
            await w.pub(p).register_publication(ns)

    s1_a = await w.subscribe("s1", A)
    s1_b = await w.subscribe("s1", B)
    s2_a = await w.subscribe("s2", A, filter="amount > 100")
    s2_c = await w.subscribe("s2", C, stopped=True)
    s3_ab = await w.subscribe("s3", "com.example.stats.*", skip=[3, 1])

    calls, per_call = 20, 10

    async def one_call(p: str, k: int) -> list[tuple[str, int, int]]:
        pub = w.pub(p)
        events = []
        for j in range(per_call):
            ns = A if p == "p3" or (k + j) % 2 else B
            events.append((ns, (k * 31 + j * 17 + int(p[1]) * 7) % 200))
        results = await pub.publish_batch([pub.event(ns, {"amount": amount}) for ns, amount in events])
        return [(ns, item_result(r)[0], amount) for (ns, amount), r in zip(events, results, strict=True)]

    batches = await asyncio.gather(*(one_call(p, k) for k in range(calls) for p in ("p1", "p2", "p3")))
    published = [e for batch in batches for e in batch]
    by_ns: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for ns, i, amount in published:
        by_ns[ns].append((i, amount))
    n_a, n_b = len(by_ns[A]), len(by_ns[B])
    assert n_a + n_b == 3 * calls * per_call and n_b > 0
    assert sorted(i for i, _ in by_ns[A]) == list(range(1, n_a + 1))
    assert sorted(i for i, _ in by_ns[B]) == list(range(1, n_b + 1))

    big_a = sum(1 for _, amount in by_ns[A] if amount > 100)
    assert 0.3 < big_a / n_a < 0.7  # the filter matches about half
    skip_a = sum(1 for i, _ in by_ns[A] if i % 3 == 1)
    skip_b = sum(1 for i, _ in by_ns[B] if i % 3 == 1)
    notified = {s1_a: n_a, s1_b: n_b, s2_a: big_a, s2_c: 0, s3_ab: skip_a + skip_b}

    want_pubs = {
        A: {"publishers": 3, "events": n_a, "events:sent": n_a,
            "notifications": n_a + big_a + skip_a, "confirmations": n_a + big_a + skip_a},
        B: {"publishers": 2, "events": n_b, "events:sent": n_b,
            "notifications": n_b + skip_b, "confirmations": n_b + skip_b},
        C: {"publishers": 1, "events": 0, "events:sent": 0, "notifications": 0, "confirmations": 0},
    }
    want_pubs = {ns: {f"icrc72:publication:stats:{k}": v for k, v in d.items()} for ns, d in want_pubs.items()}
    events_of = {p: sum(1 for batch in batches[i::3] for _ in batch) for i, p in enumerate(("p1", "p2", "p3"))}
    assert events_of == {"p1": 200, "p2": 200, "p3": 200}
    want_publishers = {
        p: {"icrc72:publisher:stats:publications": n, "icrc72:publisher:stats:events": events_of[p],
            "icrc72:publisher:stats:cyclesReceived": 0}
        for p, n in (("p1", 2), ("p2", 2), ("p3", 2))
    }

    def subscriber(subs: int, active: int, notes: int) -> dict[str, int]:
        return {"icrc72:subscriber:stats:subscriptions": subs,
                "icrc72:subscriber:stats:subscriptions:active": active,
                "icrc72:subscriber:stats:notifications": notes,
                "icrc72:subscriber:stats:confirmations": notes,
                "icrc72:subscriber:stats:cyclesPaid": 0}

    want_subscribers = {
        "s1": subscriber(2, 2, n_a + n_b),
        "s2": subscriber(2, 1, big_a),
        "s3": subscriber(1, 1, skip_a + skip_b),
    }
    want_subscriptions = {
        i: {"icrc72:subscription:stats:notifications": n, "icrc72:subscription:stats:confirmations": n,
            "icrc72:subscription:stats:cyclesPaid": 0}
        for i, n in notified.items()
    }

    async def current() -> tuple[Any, ...]:
        admin = w.admin()
        pubs = {p.namespace: _nats(p.stats) for p in await admin.get_publications()}
        publishers = {p.publisher: _nats(p.stats) for p in await admin.get_publishers()}
        subscribers = {s.subscriber: _nats(s.stats) for s in await admin.get_subscribers()}
        subs = {s.id: _nats(s.stats) for s in await admin.get_subscriptions()}
        (b,) = await admin.get_broadcasters(stats_filter=["icrc72:broadcaster:stats:"])
        return (
            {ns: {k: d[k] for k in want_pubs[ns]} for ns, d in pubs.items()},
            {p: {k: d[k] for k in want_publishers[p]} for p, d in publishers.items()},
            {s: {k: d[k] for k in want_subscribers[s]} for s, d in subscribers.items()},
            {i: {k: d[k] for k in want_subscriptions[i]} for i, d in subs.items()},
            _nats(b.stats)["icrc72:broadcaster:stats:events"],
        )

    want = (want_pubs, want_publishers, want_subscribers, want_subscriptions, n_a + n_b)
    with contextlib.suppress(AssertionError):
        await eventually(lambda: _eq(current(), want), timeout=30)
    assert await current() == want

    # What arrived is exactly what the counts say, each namespace in id order.
    by_id = {ns: dict(pairs) for ns, pairs in by_ns.items()}
    assert w.rec.ids(s1_a) == list(range(1, n_a + 1))
    assert w.rec.ids(s1_b) == list(range(1, n_b + 1))
    assert w.rec.ids(s2_a) == [i for i in range(1, n_a + 1) if by_id[A][i] > 100]
    assert w.rec.ids(s2_c) == []
    got = w.rec.keys(s3_ab)
    assert sorted(got) == sorted((ns, i) for ns in (A, B) for i in by_id[ns] if i % 3 == 1)
    for ns in (A, B):
        assert [i for n, i in got if n == ns] == sorted(i for n, i in got if n == ns)
    assert {n.source for n in w.rec.by_sub[s1_a]} == {"p1", "p2", "p3"}

    # -- statsFilter: exact keys, and prefixes ending with ':'
    admin = w.admin()
    pubs = await admin.get_publications(stats_filter=["icrc72:publication:stats:events"])
    assert [(p.namespace, p.stats) for p in pubs] == [
        (A, [("icrc72:publication:stats:events", nat(n_a))]),
        (B, [("icrc72:publication:stats:events", nat(n_b))]),
        (C, [("icrc72:publication:stats:events", nat(0))]),
    ]
    (p,) = await admin.get_publications(prev=A, take=1, stats_filter=["icrc72:publication:stats:events:"])
    assert p.stats == [("icrc72:publication:stats:events:sent", nat(n_b))]
    (p,) = await admin.get_publications(take=1, stats_filter=["icrc72:publication:stats:"])
    assert _nats(p.stats) == want_pubs[A]
    subscribers = await admin.get_subscribers(stats_filter=[
        "icrc72:subscriber:stats:subscriptions:", "icrc72:subscriber:stats:notifications",
    ])
    for s in subscribers:
        assert sorted(k for k, _ in s.stats) == [
            "icrc72:subscriber:stats:notifications", "icrc72:subscriber:stats:subscriptions:active",
        ]
        assert _nats(s.stats) == {k: want_subscribers[s.subscriber][k] for k, _ in s.stats}
    publishers = await admin.get_publishers(stats_filter=["icrc72:publisher:"])
    assert {p.publisher: _nats(p.stats) for p in publishers} == want_publishers
    subs = await admin.get_subscriptions(stats_filter=["icrc72:subscription:stats:confirmations", "nothing:"])
    assert {s.id: _nats(s.stats) for s in subs} == {
        i: {"icrc72:subscription:stats:confirmations": n} for i, n in notified.items()
    }


async def _eq(value: Any, want: Any) -> bool:
    return await value == want
