"""The console's read routes and event streams over real HTTP (no browser): who may read
what, paging and search, and how the streams resume and end.

tests/test_console.py drives the same routes from Chromium; these pin the server's rules
one by one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess

pytestmark = pytest.mark.e2e

NS = "com.example.feeds"
DISALLOWED = "icrc72:publication:subscribers:disallowed:list"
HOOK = "http://127.0.0.1:9/"  # never called: nothing is published to these subscriptions


async def api(server: ServerProcess, method: str, arg: Any, token: str | None = None) -> Any:
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/{method}", data=json.dumps(arg),
        headers={"authorization": f"Bearer {token or server.admin_token}"},
    ) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        return body


async def principal(server: ServerProcess, name: str) -> str:
    return str((await api(server, "tidings_create_principal", {"name": name}))["token"])


async def get(server: ServerProcess, path: str, token: str | None) -> tuple[int, Any]:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/console/api/{path}", headers=headers) as resp:
        return resp.status, await resp.json()


async def events(server: ServerProcess, path: str, token: str) -> AsyncIterator[tuple[str, Any]]:
    """The server-sent events of a console feed, as (name, data), until it ends."""
    async with aiohttp.ClientSession() as http, http.get(
        f"{server.url}/console/api/{path}", headers={"authorization": f"Bearer {token}"}
    ) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["content-type"].startswith("text/event-stream")
        name = None
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name is not None:
                yield name, json.loads(line[6:])
                name = None


async def first(feed: AsyncIterator[tuple[str, Any]], *names: str) -> tuple[str, Any]:
    async for name, data in feed:
        if name in names:
            return name, data
    raise AssertionError(f"the feed ended before {names}")


async def test_who_may_tail_a_namespace(server: ServerProcess) -> None:
    owner, sub, stranger, later = [await principal(server, n) for n in ("owner", "sub", "stranger", "later")]
    await api(server, "icrc72_register_publication", [{"namespace": NS}], owner)
    await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": HOOK}], sub)
    await api(server, "icrc72_register_subscription", [{"namespace": "com.example.*", "endpoint": HOOK}], later)
    for token in (server.admin_token, owner, sub, later):  # admin, controller, subscribers (pattern too)
        name, _ = await first(events(server, f"tail?namespace={NS}", token), "ready")
        assert name == "ready"
    status, body = await get(server, f"tail?namespace={NS}", stranger)
    assert status == 403 and body["error"]["code"] == "forbidden" and "may not tail" in body["error"]["message"]
    status, body = await get(server, "tail?namespace=com.example.none", owner)
    assert status == 404 and body["error"]["code"] == "namespace_not_found"
    status, body = await get(server, f"tail?namespace={NS}", None)
    assert status == 401

    # A subscriber the publication's lists now refuse: refused, and an open tail ends saying why.
    feed = events(server, f"tail?namespace={NS}", later)
    await first(feed, "ready")
    await api(server, "icrc72_update_publication", [
        {"namespace": NS, "config": [[DISALLOWED, {"Array": [{"Text": "later"}]}]]}
    ], owner)
    name, data = await first(feed, "end")
    assert "subscriber lists" in data["reason"]
    status, _ = await get(server, f"tail?namespace={NS}", later)
    assert status == 403


async def test_the_tail_shows_recent_events_decoded_and_resumes_after_a_position(server: ServerProcess) -> None:
    await api(server, "icrc72_register_publication", [{"namespace": NS}, {"namespace": "com.example.other"}])
    await api(server, "icrc72_publish", [
        {"namespace": NS, "data": {"Map": [["n", {"Nat": i}], ["who", {"Text": "tea"}]]}} for i in range(25)
    ] + [{"namespace": "com.example.other", "data": {"Nat": 0}}])
    feed = events(server, f"tail?namespace={NS}", server.admin_token)
    backlog = []
    async for name, data in feed:
        if name == "ready":
            break
        backlog.append(data)
    assert [e["data"] for e in backlog] == [{"n": i, "who": "tea"} for i in range(5, 25)]  # the last 20, decoded
    assert all(e["namespace"] == NS for e in backlog)
    resumed = events(server, f"tail?namespace={NS}&after={backlog[-3]['seq']}", server.admin_token)
    await first(resumed, "ready")  # no backlog when resuming
    await api(server, "icrc72_publish", [{"namespace": NS, "data": {"Text": "new"}}])
    got = [await first(resumed, "event") for _ in range(3)]
    assert [d["data"] for _, d in got] == [{"n": 23, "who": "tea"}, {"n": 24, "who": "tea"}, "new"]


async def test_the_counters_feed_shows_only_visible_subscriptions_and_ends_when_the_token_is_revoked(
    server: ServerProcess,
) -> None:
    alice, bob = await principal(server, "alice"), await principal(server, "bob")
    await api(server, "icrc72_register_publication", [{"namespace": NS}], alice)
    (a,) = await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": HOOK}], alice)
    (b,) = await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": HOOK}], bob)
    ids = f"{a['Ok']},{b['Ok']}"
    _, sample = await first(events(server, f"stats?ids={ids}", bob), "stats")
    assert list(sample["subs"]) == [str(b["Ok"])]
    assert set(sample["subs"][str(b["Ok"])]) == {"published", "sent", "confirmed", "retries", "deadLetters", "pending"}
    # alice controls the publication: she sees both subscriptions on it (bob's endpoint hidden).
    _, sample = await first(events(server, f"stats?ids={ids}", alice), "stats")
    assert sorted(sample["subs"]) == sorted([str(a["Ok"]), str(b["Ok"])])
    status, page = await get(server, "subscriptions", alice)
    assert status == 200 and [s["id"] for s in page["items"]] == [a["Ok"], b["Ok"]]
    assert [s["subscriber"] for s in page["items"]] == ["alice", "bob"]
    # Seen through her publication, not hers to change, and its endpoint is bob's to see.
    assert [(s["controlled"], s["endpoint"]) for s in page["items"]] == [(True, HOOK), (False, None)]

    feed = events(server, f"stats?ids={ids}", bob)
    await first(feed, "stats")
    await api(server, "tidings_revoke_tokens", {"principal": "bob"})
    _, data = await first(feed, "end")
    assert "revoked" in data["reason"]

    status, body = await get(server, "stats?ids=" + ",".join(str(i) for i in range(21)), alice)
    assert status == 400 and "at most 20" in body["error"]["message"]
    status, body = await get(server, "stats?ids=1,x", alice)
    assert status == 400 and body["error"]["code"] == "invalid_argument"


async def test_pages_are_bounded_searched_and_chained(server: ServerProcess) -> None:
    await api(server, "icrc72_register_publication", [{"namespace": f"com.example.p{i:03}"} for i in range(130)])
    status, page = await get(server, "publications?take=1000", server.admin_token)
    assert status == 200 and len(page["items"]) == 100 and page["total"] == 130
    seen, after = [], ""
    while True:
        _, page = await get(server, f"publications?take=50&after={after}", server.admin_token)
        seen += [p["namespace"] for p in page["items"]]
        if page["next"] is None:
            break
        after = page["next"]
    assert seen == [f"com.example.p{i:03}" for i in range(130)]
    _, page = await get(server, "publications?q=P12", server.admin_token)  # case-insensitive substring
    assert [p["namespace"] for p in page["items"]] == [f"com.example.p12{i}" for i in range(10)]
    status, body = await get(server, "subscriptions?q=" + "x" * 300, server.admin_token)
    assert status == 400 and body["error"]["code"] == "invalid_argument"
    status, body = await get(server, "publications?after=" + "x" * 300, server.admin_token)
    assert status == 400 and body["error"]["code"] == "invalid_argument"
    status, body = await get(server, f"subscriptions?after={2**63}", server.admin_token)
    assert status == 400 and body["error"]["code"] == "out_of_range"


async def test_open_streams_end_by_themselves_when_the_server_shuts_down(
    server_factory: Callable[..., ServerProcess],
) -> None:
    # One process (no fronts): what is checked is the broker ending its own streams.
    server = server_factory(workers="1")
    await api(server, "icrc72_register_publication", [{"namespace": NS}])
    (s,) = await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": HOOK}])
    tail = events(server, f"tail?namespace={NS}", server.admin_token)
    stats = events(server, f"stats?ids={s['Ok']}", server.admin_token)
    await first(tail, "ready")
    await first(stats, "stats")

    async def rest(feed: AsyncIterator[tuple[str, Any]]) -> list[str]:
        return [name async for name, _ in feed]

    reading = [asyncio.create_task(rest(tail)), asyncio.create_task(rest(stats))]
    await asyncio.to_thread(server.stop)
    # Both streams ended cleanly (no reset), and none had to be cut by uvicorn's grace period.
    for names in await asyncio.gather(*reading):
        assert "end" not in names
    log = (server.data_dir / "server.log").read_text()
    assert "graceful shutdown exceeded" not in log, log
