"""One cluster, one truth for the limits per principal (docs/scaling.md, "Shared state:
one truth"): registrations sent at once through two broadcasters on one database, and
racing ones through each, never take a principal past its limit; the store counts and
inserts in one atomic step."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, admin_api, eventually, free_port
from .test_cluster import nodes
from .test_e2e_replay import NS, Recorder, api, principal, register, setup
from .test_limits import limited

pytestmark = pytest.mark.e2e

LIMIT = 3
TRIES = 8
"""Registrations sent through each member, all at once."""


@pytest.fixture
def pair(server_factory: Callable[..., ServerProcess], pg_database: str) -> Iterator[list[ServerProcess]]:
    """Two broadcasters on one database, with small limits."""
    with nodes(
        server_factory, pg_database, n=2,
        max_publications_per_principal=str(LIMIT), max_subscriptions_per_principal=str(LIMIT),
    ) as out:
        yield out


async def as_(http: aiohttp.ClientSession, srv: ServerProcess, token: str, method: str, arg: Any) -> Any:
    async with http.post(f"{srv.url}/v1/{method}", data=json.dumps(arg),
                         headers={"authorization": f"Bearer {token}"}) as r:
        body = await r.json()
        assert r.status == 200, (method, r.status, body)
        return body


def tally(answers: list[Any], setting: str) -> tuple[int, int]:
    """How many single-item answers are Ok, and how many are the limit's refusal."""
    items = [item for (item,) in answers]
    made = sum(1 for r in items if "Ok" in r)
    refused = sum(1 for r in items if limited(r, setting))
    assert made + refused == len(items), items
    return made, refused


async def test_publications_registered_at_once_through_two_members_stay_within_the_limit(
    pair: list[ServerProcess],
) -> None:
    a, b = pair
    async with aiohttp.ClientSession() as http:
        alice = (await admin_api(http, a, "tidings_create_principal", {"name": "alice"}))["token"]
        answers = await asyncio.gather(*(
            as_(http, member, alice, "icrc72_register_publication", [{"namespace": f"q.m{m}.n{i}"}])
            for i in range(TRIES) for m, member in enumerate(pair)
        ))
        assert tally(answers, "TIDINGS_MAX_PUBLICATIONS_PER_PRINCIPAL") == (LIMIT, 2 * TRIES - LIMIT)
        for member in pair:
            stored = await admin_api(http, member, "icrc72_get_publications", {"take": 1000})
            assert sum(1 for p in stored if p["namespace"].startswith("q.")) == LIMIT
        # Freed through one member, the room is taken once, through either.
        (gone,) = [r["Ok"] for (r,) in answers if "Ok" in r][:1]
        assert "Ok" in (await as_(http, b, alice, "icrc72_delete_publication", [gone]))[0]
        again = await asyncio.gather(*(
            as_(http, member, alice, "icrc72_register_publication", [{"namespace": f"q.again.m{m}.n{i}"}])
            for i in range(TRIES) for m, member in enumerate(pair)
        ))
        assert tally(again, "TIDINGS_MAX_PUBLICATIONS_PER_PRINCIPAL") == (1, 2 * TRIES - 1)
        # An admin is not limited.
        admin = await admin_api(
            http, a, "icrc72_register_publication", [{"namespace": f"q.admin{i}"} for i in range(5)]
        )
        assert all("Ok" in r for r in admin), admin


async def test_subscriptions_registered_at_once_through_two_members_stay_within_the_limit(
    pair: list[ServerProcess],
) -> None:
    a, b = pair
    ep = f"http://127.0.0.1:{free_port()}/"
    async with aiohttp.ClientSession() as http:
        alice = (await admin_api(http, a, "tidings_create_principal", {"name": "alice"}))["token"]
        (r,) = await admin_api(http, a, "icrc72_register_publication", [{"namespace": "q.topic"}])
        assert "Ok" in r, r
        reg = [{"namespace": "q.topic", "endpoint": ep, "stopped": True}]
        answers = await asyncio.gather(*(
            as_(http, member, alice, "icrc72_register_subscription", reg)
            for _ in range(TRIES) for member in pair
        ))
        assert tally(answers, "TIDINGS_MAX_SUBSCRIPTIONS_PER_PRINCIPAL") == (LIMIT, 2 * TRIES - LIMIT)
        for member in pair:
            stored = await admin_api(http, member, "icrc72_get_subscriptions", {"take": 1000})
            assert sum(1 for s in stored if s["subscriber"] == "alice") == LIMIT
        first = next(r["Ok"] for (r,) in answers if "Ok" in r)
        assert "Ok" in (await as_(http, b, alice, "icrc72_delete_subscription", [first]))[0]
        again = await asyncio.gather(*(
            as_(http, member, alice, "icrc72_register_subscription", reg) for _ in range(TRIES) for member in pair
        ))
        assert tally(again, "TIDINGS_MAX_SUBSCRIPTIONS_PER_PRINCIPAL") == (1, 2 * TRIES - 1)


@contextlib.asynccontextmanager
async def requesters(
    server_factory: Callable[..., ServerProcess], pg_database: str, endpoints: Any, n: int, **limits: str,
) -> AsyncIterator[tuple[list[ServerProcess], list[str]]]:
    """Two members with ``limits``, a publication of 50 events, and ``n`` requesters with a
    subscription each that both members know; the replays stay running while the test
    counts them."""
    rec = Recorder()
    rec.hold = asyncio.Event()
    ep = await endpoints(rec)
    with nodes(server_factory, pg_database, n=2, **limits) as pair:
        a, b = pair
        try:
            await setup(a, ep.url, 50)
            tokens = [await principal(a, f"p{i}") for i in range(n)]
            subs = set()
            for t in tokens:
                (r,) = await api(a, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}], t)
                subs.add(r["Ok"])

            async def known_everywhere() -> bool:
                async with aiohttp.ClientSession() as http:
                    listed = await admin_api(http, b, "icrc72_get_subscriptions", {"take": 1000})
                return subs <= {s["id"] for s in listed}

            await eventually(known_everywhere)
            yield pair, tokens
        finally:
            rec.hold.set()


def _coded(answers: list[Any], code: int) -> int:
    return sum(1 for r in answers if r.get("Err", {}).get("GenericError", {}).get("error_code") == code)


async def test_replays_registered_at_once_through_two_members_stay_within_the_limit(
    server_factory: Callable[..., ServerProcess], pg_database: str, endpoints: Any,
) -> None:
    # Requesters race one after another, each through both members: a member that counted
    # before the other's insert landed would let two of one requester's through.
    async with requesters(server_factory, pg_database, endpoints, 6,
                          replay_max_per_principal="1", replay_max_concurrent="100") as (pair, tokens):
        for t in tokens:  # a round each: both members idle as it starts, so their counts overlap
            mine = await asyncio.gather(*(register(m, 1, 50, token=t) for _ in range(TRIES) for m in pair))
            made = sum(1 for r in mine if "Ok" in r)
            assert (made, _coded(mine, 7701)) == (1, 2 * TRIES - 1), mine


async def test_replays_of_many_requesters_at_once_through_two_members_stay_within_the_total(
    server_factory: Callable[..., ServerProcess], pg_database: str, endpoints: Any,
) -> None:
    """TIDINGS_REPLAY_MAX_CONCURRENT counts every requester's replays, across members."""
    async with requesters(server_factory, pg_database, endpoints, 4,
                          replay_max_per_principal="100", replay_max_concurrent="2") as (pair, tokens):
        answers = await asyncio.gather(*(
            register(m, 1, 50, token=t) for t in tokens for _ in range(3) for m in pair
        ))
        made = sum(1 for r in answers if "Ok" in r)
        assert (made, _coded(answers, 7702)) == (2, len(answers) - 2), answers
