"""ICRC-77 replays through the real server: methods, lifecycle, delivery, limits, pricing,
restart, and live traffic during a large replay.

The ``server`` fixture runs with ``ack_deadline_s=1`` and retries after 0.05-0.2 s.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, eventually, read_body, respond

pytestmark = pytest.mark.e2e


@pytest.fixture
def server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    """Replay pushes of 100, as these tests count them (the default is larger)."""
    return server_factory(retry_initial_s="0.05", retry_max_s="0.2", ack_deadline_s="1", replay_batch_size="100")

NS = "com.example.orders"
RID = "icrc77:replay:id"
END = "icrc77:replay:end_id"


class Recorder:
    """A subscriber endpoint that records every notification in arrival order.

    While ``hold`` is set and ``hold_after`` replayed notifications have come, a push
    holding replayed notifications waits for it to clear.
    """

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.hold: asyncio.Event | None = None
        self.hold_after = 0
        self.replay_pushes = 0
        self.replay_sizes: list[int] = []
        self.fail_replays = False
        """Answer 500 to pushes of replayed notifications."""
        self.gone = False
        """Answer 410 Gone to pushes of replayed notifications."""
        self.refuse_once: set[int] = set()
        """Event ids of replayed notifications to answer ``Err`` for, the first time only."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        batch = json.loads(await read_body(receive))
        if any(replay_id(n) is not None for n in batch):
            self.replay_pushes += 1
            self.replay_sizes.append(len(batch))
            if self.hold is not None and len(self.replayed()) >= self.hold_after:
                await self.hold.wait()
            if self.fail_replays or self.gone:
                await respond(send, 410 if self.gone else 500)
                return
            if self.refuse_once & {n["eventId"] for n in batch}:
                refused = {n["eventId"] for n in batch} & self.refuse_once
                self.refuse_once -= refused
                self.got.extend(n for n in batch if n["eventId"] not in refused)
                answer = [{"Err": "later"} if n["eventId"] in refused else {"Ok": None} for n in batch]
                await respond(send, 200, json.dumps(answer).encode())
                return
        self.got.extend(batch)
        await respond(send, 200)

    def replayed(self, rid: int | None = None) -> list[dict[str, Any]]:
        return [n for n in self.got if replay_id(n) is not None and (rid is None or replay_id(n) == rid)]

    def live(self) -> list[dict[str, Any]]:
        return [n for n in self.got if replay_id(n) is None]


def headers(n: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in n["headers"]}


def replay_id(n: dict[str, Any]) -> int | None:
    h = headers(n).get(RID)
    return None if h is None else int(h["Nat"])


async def api(server: ServerProcess, name: str, arg: Any, token: str | None = None) -> Any:
    headers = {"authorization": f"Bearer {token or server.admin_token}"}
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/{name}", data=json.dumps(arg), headers=headers
    ) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        return body


async def principal(server: ServerProcess, name: str) -> str:
    return str((await api(server, "tidings_create_principal", {"name": name}))["token"])


async def setup(
    server: ServerProcess, endpoint: str, n: int, *, config: list[Any] | None = None, mode: str = "trusted",
    token: str | None = None, sub_config: list[Any] | None = None,
) -> int:
    """Register NS (admin), publish ``n`` events ``{"n": i}`` (ids 1..n), subscribe ``endpoint``."""
    (r,) = await api(server, "icrc72_register_publication", [{"namespace": NS, "config": config or []}])
    assert "Ok" in r, r
    for lo in range(0, n, 5000):
        events = [{"namespace": NS, "data": {"Map": [["n", {"Nat": i}]]}} for i in range(lo + 1, min(n, lo + 5000) + 1)]
        results = await api(server, "icrc72_publish", events)
        assert all("Ok" in x for x in results)
    (s,) = await api(server, "icrc72_register_subscription", [
        {"namespace": NS, "endpoint": endpoint, "mode": mode, "config": sub_config or []}
    ], token)
    return int(s["Ok"])


async def register(server: ServerProcess, start: int, end: int | None, config: list[Any] | None = None,
                   token: str | None = None, ns: str = NS) -> dict[str, Any]:
    (r,) = await api(server, "icrc77_register_replay", [{"namespace": ns, "range": [start, end],
                                                          "config": config or []}], token)
    return dict(r)


async def status(server: ServerProcess, rid: int, token: str | None = None) -> dict[str, Any]:
    for s in await api(server, "icrc77_get_replays", {"prev": rid - 1, "take": 1}, token):
        if s["replayId"] == rid:
            s["stats"] = {k: v["Nat"] for k, v in s["stats"] if "Nat" in v}
            return dict(s)
    raise AssertionError(f"no replay {rid}")


async def done(server: ServerProcess, rid: int, timeout: float = 30.0) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        s = await status(server, rid)
        return s if not {"pending", "running"} & set(s["status"]) else None

    result: dict[str, Any] = await eventually(check, timeout=timeout, interval=0.05)
    return result


async def _sent(server: ServerProcess, rid: int, n: int) -> dict[str, Any] | None:
    s = await status(server, rid)
    return s if s["stats"]["icrc77:replay:stats:sent"] == n else None


def err(result: dict[str, Any]) -> str:
    assert "Err" in result, result
    return str(next(iter(result["Err"])))


# -- 1, 2, 3: methods, lifecycle, delivery ---------------------------------------------------


async def test_replay_sends_the_range_once_with_headers_then_completes(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    ep = await endpoints(rec)
    await setup(server, ep.url, 30)
    assert rec.got == []  # subscribed after the events: nothing live
    r = await register(server, 10, 20)
    rid = r["Ok"]
    s = await done(server, rid)
    assert s["status"] == {"completed": 10}
    assert s["range"] == [10, 20] and s["namespace"] == NS
    assert s["stats"]["icrc77:replay:stats:sent"] == 10
    assert s["stats"]["icrc77:replay:stats:expected"] == 10
    assert s["stats"]["icrc77:replay:stats:confirmed"] == 10
    got = rec.replayed(rid)
    assert [n["eventId"] for n in got] == list(range(10, 20))
    assert all(END not in headers(n) for n in got)
    assert [n["data"] for n in got] == [{"Map": [["n", {"Nat": i}]]} for i in range(10, 20)]
    assert got[0]["prev_id"] == 9

    # No end: up to the last event now, announced on every notification.
    r2 = (await register(server, 28, None))["Ok"]
    assert (await done(server, r2))["status"] == {"completed": 3}
    got2 = rec.replayed(r2)
    assert [n["eventId"] for n in got2] == [28, 29, 30]
    assert {headers(n)[END]["Nat"] for n in got2} == {30}
    # New notification ids from the same sequence: none repeats.
    ids = [n["id"] for n in rec.got]
    assert len(set(ids)) == len(ids)
    await asyncio.sleep(0.3)
    assert len(rec.got) == 13  # trusted: the 2xx confirmed each, nothing is resent


async def test_filter_and_skip_are_the_live_rules(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    ep = await endpoints(rec)
    await setup(server, ep.url, 40, sub_config=[["icrc72:subscription:filter", {"Text": "n > 30"}]])
    # The subscription's filter applies when the request has none.
    a = (await register(server, 1, None))["Ok"]
    s = await done(server, a)
    assert s["status"] == {"completed": 10}
    assert s["stats"]["icrc77:replay:stats:skipped"] == 30
    assert [n["eventId"] for n in rec.replayed(a)] == list(range(31, 41))
    # The request's own filter and skip replace it.
    b = (await register(server, 1, 41, [
        ["icrc72:subscription:filter", {"Text": "n <= 10"}],
        ["icrc72:subscription:skip", {"Array": [{"Nat": 3}, {"Nat": 1}]}],
    ]))["Ok"]
    assert (await done(server, b))["status"] == {"completed": 4}
    assert [n["eventId"] for n in rec.replayed(b)] == [1, 4, 7, 10]
    assert {n["eventId"] for n in rec.replayed(b)} <= {i for i in range(1, 41) if i % 3 == 1}
    bad = await register(server, 1, 5, [["icrc72:subscription:filter", {"Text": "n >"}]])
    assert err(bad) == "ImproperConfig"
    bad = await register(server, 1, 5, [["icrc72:subscription:skip", {"Text": "every other"}]])
    assert err(bad) == "ImproperConfig"


async def test_oneshot_replay_needs_normal_confirmation(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    ep = await endpoints(rec)
    await setup(server, ep.url, 5, mode="oneshot")
    rid = (await register(server, 1, 6))["Ok"]
    s = await done(server, rid)
    assert s["status"] == {"completed": 5}
    assert s["stats"]["icrc77:replay:stats:pending"] == 5
    # Unconfirmed past the ack deadline (1 s): sent again, same notification ids.
    first = [n["id"] for n in rec.replayed(rid)]
    await eventually(lambda: len(rec.replayed(rid)) >= 10, timeout=10)
    again = [n["id"] for n in rec.replayed(rid)[5:10]]
    assert again == first
    assert all(replay_id(n) == rid for n in rec.replayed(rid)[5:10])  # headers kept on the resend
    result = await api(server, "icrc72_confirm_notifications", first)
    assert result == {"allAccepted": None}
    s = await status(server, rid)
    assert (s["stats"]["icrc77:replay:stats:pending"], s["stats"]["icrc77:replay:stats:confirmed"]) == (0, 5)


@pytest.mark.parametrize("priced", [False, True], ids=["pushed-then-recorded", "recorded-then-pushed"])
async def test_cancel_stops_enqueuing_and_what_was_sent_stays_sent(
    server: ServerProcess, endpoints: Any, priced: bool
) -> None:
    """A replay with no price to a trusted subscription records a batch once it is
    confirmed; a priced one records (and charges) before it pushes. Either way a cancel
    stops what is not yet pushed, and what was pushed counts."""
    rec = Recorder()
    rec.hold = asyncio.Event()
    ep = await endpoints(rec)
    await setup(server, ep.url, 1000, config=[["icrc77:pricing", _per_event(1)]] if priced else None)
    if priced:
        await api(server, "tidings_fund_replay_credit", [{"principal": "admin", "amount": 1000}])
    bob = await principal(server, "bob")
    rid = (await register(server, 1, 1001))["Ok"]
    await eventually(lambda: rec.replay_pushes >= 1)  # the first batch is in flight, held
    if priced:
        # The next batch is recorded meanwhile, then the replay waits for the push in flight.
        s = await eventually(lambda: _sent(server, rid, 200))
    else:
        await asyncio.sleep(0.3)  # the next batch is read meanwhile, and waits
        s = await status(server, rid)
        assert s["stats"]["icrc77:replay:stats:sent"] == 0  # nothing confirmed yet
    assert rec.replay_pushes == 1
    assert s["status"] == {"running": None}
    assert s["stats"]["icrc77:replay:stats:expected"] == 1000
    (c,) = await api(server, "icrc77_cancel_replay", [rid], bob)
    assert err(c) == "Unauthorized"
    cancel = asyncio.create_task(api(server, "icrc77_cancel_replay", [rid]))
    if not priced:
        # The batch in flight counts once answered: the cancel answers after it, so the
        # count it leads to is final.
        await asyncio.sleep(0.3)
        assert not cancel.done()
        rec.hold.set()
    assert await cancel == [{"Ok": rid}]
    sent = 200 if priced else 100
    assert (await status(server, rid))["status"] == {"canceled": sent}
    (again, missing) = await api(server, "icrc77_cancel_replay", [rid, 999])
    assert (err(again), err(missing)) == ("CannotCancel", "NotFound")
    rec.hold.set()
    await eventually(lambda: len(rec.replayed(rid)) >= sent)
    await asyncio.sleep(0.5)
    assert [n["eventId"] for n in rec.replayed(rid)] == list(range(1, sent + 1))
    assert (await status(server, rid))["status"] == {"canceled": sent}


async def test_a_cancel_waits_only_a_moment_for_a_slow_endpoint(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    rec.hold = asyncio.Event()
    ep = await endpoints(rec)
    await setup(server, ep.url, 300)
    rid = (await register(server, 1, 301))["Ok"]
    await eventually(lambda: rec.replay_pushes >= 1)  # held: the endpoint does not answer
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await api(server, "icrc77_cancel_replay", [rid]) == [{"Ok": rid}]
    assert loop.time() - started < 5  # about a second; the push's own limit is 10 s
    assert (await status(server, rid))["status"] == {"canceled": 0}  # nothing answered yet
    rec.hold.set()

    async def counted() -> bool:  # the batch in flight counts once answered
        return (await status(server, rid))["status"] == {"canceled": 100}

    await eventually(counted)
    await asyncio.sleep(0.3)
    assert [n["eventId"] for n in rec.replayed(rid)] == list(range(1, 101))


def _per_event(price: int) -> dict[str, Any]:
    return {"Class": [{"name": "perEvent", "value": {"Nat": price}, "immutable": False},
                      {"name": "currency", "value": {"Text": "credits"}, "immutable": False}]}


async def test_register_errors(server_factory: Callable[..., ServerProcess], endpoints: Any) -> None:
    server = server_factory(replay_max_range="50")
    rec = Recorder()
    ep = await endpoints(rec)
    alice = await principal(server, "alice")
    carol = await principal(server, "carol")
    await setup(server, ep.url, 60, config=[
        ["icrc72:publication:subscribers:disallowed:list", {"Array": [{"Text": "carol"}]}],
    ])
    assert err(await register(server, 1, 5, ns="com.example.nothing")) == "PublicationNotFound"
    assert err(await register(server, 1, 5, token=alice)) == "SubscriptionNotFound"
    denied = await register(server, 1, 5, token=carol)
    assert denied["Err"] == {"UnauthorizedSubscriber": {"namespace": NS}}
    assert err(await register(server, 5, 5)) == "ImproperConfig"
    assert err(await register(server, 1, 62)) == "ImproperConfig"  # past the last event
    too_large = await register(server, 1, 52)
    assert err(too_large) == "RangeTooLarge"
    assert "at most 50" in too_large["Err"]["RangeTooLarge"]
    # alice subscribes; the admin's subscription is not hers to replay to
    (s,) = await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}], alice)
    assert err(await register(server, 1, 5, [["icrc77:replay:subscription", {"Nat": 1}]], alice)) == "Unauthorized"
    assert err(await register(server, 1, 5, [["icrc77:replay:subscription", {"Nat": 99}]], alice)) == (
        "SubscriptionNotFound"
    )
    ok = await register(server, 1, 5, [["icrc77:replay:subscription", {"Nat": s["Ok"]}]], alice)
    assert (await done(server, ok["Ok"]))["subscription"] == s["Ok"]


async def test_limits_per_principal_and_concurrent(
    server_factory: Callable[..., ServerProcess], endpoints: Any
) -> None:
    server = server_factory(replay_max_per_principal="1", replay_max_concurrent="2")
    rec = Recorder()
    rec.hold = asyncio.Event()
    ep = await endpoints(rec)
    await setup(server, ep.url, 300)
    bob = await principal(server, "bob")
    carol = await principal(server, "carol")
    for token in (bob, carol):
        await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}], token)
    first = (await register(server, 1, 300))["Ok"]
    busy = await register(server, 1, 10)
    assert busy["Err"]["GenericError"]["error_code"] == 7701
    second = (await register(server, 1, 300, token=bob))["Ok"]
    busy = await register(server, 1, 10, token=carol)
    assert busy["Err"]["GenericError"]["error_code"] == 7702
    rec.hold.set()
    await done(server, first)
    await done(server, second)
    assert "Ok" in await register(server, 1, 10, token=carol)


async def test_replayed_notifications_are_retried_dead_lettered_and_redriven(
    server_factory: Callable[..., ServerProcess], endpoints: Any
) -> None:
    server = server_factory(max_attempts="3", retry_initial_s="0.02", retry_max_s="0.05")
    rec = Recorder()
    rec.fail_replays = True
    ep = await endpoints(rec)
    await setup(server, ep.url, 10)
    rid = (await register(server, 2, 5))["Ok"]
    s = await done(server, rid)
    assert s["status"] == {"completed": 3}
    assert rec.replay_pushes == 3  # three tries of the one batch, with back-off
    assert s["stats"]["icrc77:replay:stats:deadLettered"] == 3
    letters = await api(server, "tidings_get_dead_letters", {})
    assert [d["eventId"] for d in letters] == [2, 3, 4]
    rec.fail_replays = False
    assert await api(server, "tidings_redrive_dead_letters", [d["id"] for d in letters]) == [{"Ok": True}] * 3
    await eventually(lambda: len(rec.replayed(rid)) == 3)
    # Resent as themselves: same notification ids, the replay headers kept.
    assert [n["id"] for n in rec.replayed(rid)] == [d["id"] for d in letters]

    async def settled() -> bool:  # the 2xx answer settles them just after the endpoint has them
        stats = (await status(server, rid))["stats"]
        return (stats["icrc77:replay:stats:deadLettered"], stats["icrc77:replay:stats:confirmed"]) == (0, 3)

    await eventually(settled)


async def test_items_answered_err_in_a_replay_push_are_pushed_again_under_their_ids(
    server: ServerProcess, endpoints: Any
) -> None:
    rec = Recorder()
    rec.refuse_once = {3, 150, 151, 299}
    ep = await endpoints(rec)
    await setup(server, ep.url, 300)
    rid = (await register(server, 1, 301))["Ok"]
    s = await done(server, rid)
    assert s["status"] == {"completed": 300}

    async def settled() -> dict[str, Any] | None:
        st = (await status(server, rid))["stats"]
        return st if st["icrc77:replay:stats:confirmed"] == 300 else None

    stats = await eventually(settled)
    assert (stats["icrc77:replay:stats:sent"], stats["icrc77:replay:stats:deadLettered"]) == (300, 0)
    got = rec.replayed(rid)
    assert sorted(n["eventId"] for n in got) == list(range(1, 301))  # each taken once
    ids = {n["eventId"]: n["id"] for n in got}
    assert len(set(ids.values())) == 300
    # The ids follow the events, those pushed again included: event k is base + k - 1.
    assert {ids[k] - k for k in ids} == {ids[1] - 1}
    assert rec.refuse_once == set()
    await asyncio.sleep(0.3)
    assert len(rec.replayed(rid)) == 300


async def test_a_replay_push_answered_410_ends_the_subscription_after_one_push(
    server: ServerProcess, endpoints: Any
) -> None:
    rec = Recorder()
    rec.gone = True
    ep = await endpoints(rec)
    sub = await setup(server, ep.url, 5)
    rid = (await register(server, 1, 6))["Ok"]
    s = await done(server, rid)
    assert s["status"] == {"errored": f"subscription {sub} ended"}
    assert rec.replay_pushes == 1  # the 410 ends it: not pushed again
    letters = await api(server, "tidings_get_dead_letters", {})
    assert [(d["eventId"], d["reason"], d["attempts"]) for d in letters] == [
        (i, "endpoint_gone", 1) for i in range(1, 6)
    ]
    subs = await api(server, "icrc72_get_subscriptions", {"filter": None, "prev": None, "take": None, "stats": None})
    assert sub not in [x["subscriptionId"] for x in subs]


# -- 6: pricing ---------------------------------------------------------------------------


async def test_pricing_needs_credit_and_debits_what_is_sent(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    ep = await endpoints(rec)
    pricing = {"Class": [{"name": "perEvent", "value": {"Nat": 2}, "immutable": False},
                         {"name": "currency", "value": {"Text": "credits"}, "immutable": False}]}
    await setup(server, ep.url, 20, config=[["icrc77:pricing", pricing]])
    bob = await principal(server, "bob")
    await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}], bob)
    refused = await register(server, 1, 11, token=bob)
    assert err(refused) == "PaymentRequired"
    assert "costs up to 20 credits" in refused["Err"]["PaymentRequired"]
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/tidings_fund_replay_credit", data=json.dumps([{"principal": "bob", "amount": 5}]),
        headers={"authorization": f"Bearer {bob}"},
    ) as resp:
        assert (resp.status, (await resp.json())["error"]["code"]) == (403, "forbidden")  # admin-only
    assert await api(server, "tidings_fund_replay_credit", [{"principal": "bob", "amount": 15}]) == [{"Ok": 15}]
    assert err(await register(server, 1, 11, token=bob)) == "PaymentRequired"
    assert await api(server, "tidings_fund_replay_credit", [{"principal": "bob", "amount": 10}]) == [{"Ok": 25}]
    # Only what is sent is charged: the filter lets 5 of the 10 through.
    rid = (await register(server, 1, 11, [["icrc72:subscription:filter", {"Text": "n > 5"}]], bob))["Ok"]
    s = await done(server, rid)
    assert s["status"] == {"completed": 5}
    assert s["stats"]["icrc77:replay:stats:charged"] == 10
    (balance,) = await api(server, "tidings_get_replay_credit", ["bob"], bob)
    assert balance == {"Ok": {"principal": "bob", "balance": 15, "reserved": 0}}
    (other,) = await api(server, "tidings_get_replay_credit", ["admin"], bob)
    assert err(other) == "Unauthorized"
    # A bad pricing is refused when the publication is configured.
    (bad,) = await api(server, "icrc72_update_publication", [
        {"namespace": NS, "config": [["icrc77:pricing", {"Map": [["perEvent", {"Text": "2"}]]}]]}
    ])
    assert err(bad) == "ImproperConfig"


# -- status updates and queries -------------------------------------------------------------


async def test_get_replays_pages_filters_and_status_updates(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    ep = await endpoints(rec)
    await setup(server, ep.url, 10)
    bob = await principal(server, "bob")
    await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}], bob)
    ids = [(await register(server, 1, 3))["Ok"] for _ in range(3)]
    for rid in ids:
        await done(server, rid)
    page1 = await api(server, "icrc77_get_replays", {"take": 2})
    page2 = await api(server, "icrc77_get_replays", {"prev": page1[-1]["replayId"], "take": 2})
    assert [s["replayId"] for s in page1 + page2] == ids
    assert all(set(s) >= {"replayId", "namespace", "config", "stats", "range", "status"} for s in page1)
    assert await api(server, "icrc77_get_replays", {"filter": {"state": "running"}}) == []
    assert len(await api(server, "icrc77_get_replays", {"filter": {"state": "completed", "namespace": NS}})) == 3
    assert await api(server, "icrc77_get_replays", {}, bob) == []  # bob sees his own only
    rec.hold = asyncio.Event()
    mine = (await register(server, 1, 11, token=bob))["Ok"]
    assert [s["replayId"] for s in await api(server, "icrc77_get_replays", {}, bob)] == [mine]
    # icrc77_replay_status: only publishers of the namespace (or admins) report on a replay.
    update = {"replayId": mine, "status": {"errored": "history unavailable"}}
    (refused,) = await api(server, "icrc77_replay_status", [update], bob)
    assert err(refused) == "Unauthorized"
    (not_ours,) = await api(server, "icrc77_replay_status", [{"replayId": mine, "status": {"running": None}}])
    assert err(not_ours) == "ImproperConfig"
    assert await api(server, "icrc77_replay_status", [update]) == [{"Ok": True}]
    rec.hold.set()
    s = await done(server, mine)
    assert s["status"] == {"errored": "history unavailable"}
    (late,) = await api(server, "icrc77_replay_status", [{"replayId": mine, "status": {"completed": 1}}])
    assert err(late) == "CannotCancel"


# -- 2: a running replay survives a restart ---------------------------------------------------


async def test_running_replay_resumes_after_a_kill(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    rec.hold, rec.hold_after = asyncio.Event(), 500
    ep = await endpoints(rec)
    await setup(server, ep.url, 2000)
    rid = (await register(server, 1, 2001))["Ok"]
    await eventually(lambda: len(rec.replayed(rid)) >= 500)
    await eventually(lambda: rec.replay_pushes > 5)  # the next batch is in flight, held
    server.kill()
    assert len(rec.replayed(rid)) == 500
    rec.hold.set()
    server.start()
    s = await done(server, rid)
    assert s["status"] == {"completed": 2000}  # each event recorded once
    got = [n["eventId"] for n in rec.replayed(rid)]
    assert set(got) == set(range(1, 2001))
    # At least once: only what was pushed and not yet recorded at the kill comes twice:
    # the batch in flight, and the one before it if its record was still being written.
    assert len(got) - 2000 <= 200
    assert len({n["id"] for n in rec.replayed(rid)}) == 2000


# -- 7: live traffic keeps flowing during a large replay --------------------------------------


async def test_live_events_flow_while_a_100k_replay_runs(server: ServerProcess, endpoints: Any) -> None:
    rec = Recorder()
    ep = await endpoints(rec)
    total = 100_000
    await setup(server, ep.url, total)
    rid = (await register(server, 1, total + 1))["Ok"]
    await eventually(lambda: len(rec.replayed(rid)) >= 1000, timeout=60)
    live_ids = []
    for i in range(20):
        (r,) = await api(server, "icrc72_publish", [{"namespace": NS, "data": {"Map": [["live", {"Nat": i}]]}}])
        live_ids.append(r["Ok"])
        await eventually(lambda n=i + 1: len(rec.live()) == n, timeout=30)
        # Delivered while the replay still had events to send.
        assert len(rec.replayed(rid)) < total
    assert [n["eventId"] for n in rec.live()] == [x[0] if isinstance(x, list) else x for x in live_ids]
    s = await done(server, rid, timeout=300)
    assert s["status"] == {"completed": total}
    assert len({n["eventId"] for n in rec.replayed(rid)}) == total


# -- the SDK and the CLI ----------------------------------------------------------------------


async def test_sdk_and_cli(server: ServerProcess, endpoints: Any) -> None:
    from tidings.client import ItemError, Replays, SyncReplays
    from tidings.core.wire_replay import ReplayState

    rec = Recorder()
    ep = await endpoints(rec)
    sub_id = await setup(server, ep.url, 20)
    async with Replays(server.url, server.admin_token) as replays:
        rid = await replays.register(NS, 5, 15, filter="n > 10", skip=(2, 1), subscription=sub_id)
        await done(server, rid)
        s = await replays.status(rid)
        assert s is not None and s.status.name == "completed" and s.status.completed == 2
        assert [n["eventId"] for n in rec.replayed(rid)] == [11, 13]
        assert [x.replayId for x in await replays.list(state="completed", namespace=NS)] == [rid]
        with pytest.raises(ItemError) as e:
            await replays.register(NS, 1, 99)
        assert e.value.code == "ImproperConfig"
        with pytest.raises(ItemError) as e:
            await replays.cancel(rid)
        assert e.value.code == "CannotCancel"
        assert await replays.fund("admin", 7) == 7
        assert (await replays.credit("admin")).balance == 7
        with pytest.raises(ItemError) as e:
            await replays.report(rid, ReplayState(errored="x"))
        assert e.value.code == "CannotCancel"

    def sync_list() -> list[int]:
        with SyncReplays(server.url, server.admin_token) as sync:
            return [x.replayId for x in sync.list()]

    assert await asyncio.to_thread(sync_list) == [rid]
    out = await asyncio.to_thread(server.cli, "replay", "register", NS, "1", "4", "--url", server.url)
    cli_id = int(out)
    await done(server, cli_id)
    listed = await asyncio.to_thread(server.cli, "replay", "list", "--state", "completed", "--url", server.url)
    assert f"{cli_id:>6}  {NS}  [1, 4)  completed 3/3 sent" in listed
    shown = await asyncio.to_thread(server.cli, "replay", "status", str(cli_id), "--url", server.url)
    assert json.loads(shown)["status"] == {"completed": 3}
    credit = await asyncio.to_thread(server.cli, "replay", "fund", "admin", "5", "--url", server.url)
    assert credit == "12"


async def test_replay_pushes_hold_replay_batch_size_notifications_and_reads_are_chunked(
    server_factory: Callable[..., ServerProcess], endpoints: Any
) -> None:
    """Replay pushes are ``replay_batch_size`` notifications (not the live batch size),
    across reads of ``replay_read_size`` (the next read runs ahead): every event once, in order."""
    server = server_factory(replay_batch_size="300", replay_read_size="700", delivery_batch_size="10")
    rec = Recorder()
    ep = await endpoints(rec)
    await setup(server, ep.url, 2000)
    rid = (await register(server, 1, 2001))["Ok"]
    assert (await done(server, rid))["status"] == {"completed": 2000}
    await eventually(lambda: len(rec.replayed(rid)) >= 2000)
    assert [n["eventId"] for n in rec.replayed(rid)] == list(range(1, 2001))
    # Reads of 700 are cut into pushes of at most 300.
    assert rec.replay_sizes == [300, 300, 100, 300, 300, 100, 300, 300]
