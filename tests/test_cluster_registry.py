"""One cluster, one truth (docs/scaling.md, "Shared state"): what is changed through any
broadcaster holds on every one, and no two changes made at once lose one another, on
one node or several."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, eventually
from .test_cluster import nodes

pytestmark = pytest.mark.e2e

SCHEMA = "tidings:publication:schema"


def order_schema(*required: str) -> str:
    return json.dumps({
        "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
        "properties": {"amount": {"type": "integer", "minimum": 0}, "currency": {"type": "string"}},
        "required": ["amount", *required],
    })


def order(**fields: Any) -> dict[str, Any]:
    return {"Map": [[k, v] for k, v in fields.items()]}


async def call(http: aiohttp.ClientSession, server: ServerProcess, method: str, arg: Any) -> Any:
    async with http.post(
        f"{server.url}/v1/{method}", data=json.dumps(arg), headers={"authorization": f"Bearer {server.admin_token}"},
    ) as resp:
        body = await resp.json()
        assert resp.status == 200, (method, resp.status, body)
        return body


@pytest.fixture
def pair(server_factory: Callable[..., ServerProcess], pg_database: str) -> Iterator[list[ServerProcess]]:
    """Two broadcasters on one database."""
    with nodes(server_factory, pg_database, n=2) as out:
        yield out


async def test_a_schema_registered_through_one_member_is_used_at_once_through_another(
    pair: list[ServerProcess],
) -> None:
    a, b = pair
    async with aiohttp.ClientSession() as http:
        (r,) = await call(http, a, "register_schema", [{"model": order_schema(), "name": "shop.order"}])
        sid = r["Ok"]["id"]
        # At once, through the other member: the binding is checked on the registry as stored.
        (bound,) = await call(http, b, "icrc72_register_publication", [
            {"namespace": "shop.orders", "config": [[SCHEMA, {"Nat": sid}]]}])
        assert "Ok" in bound, bound
        # The same model through the other member is the same schema (as in Confluent's registry).
        (again,) = await call(http, b, "register_schema", [{"model": order_schema(), "name": "shop.order"}])
        assert again["Ok"]["id"] == sid and again["Ok"]["duplicate"]
        # A compatibility mode set through one member holds on the other at once: the
        # version below, which adds a required field, is refused under BACKWARD.
        (ok,) = await call(http, a, "tidings_set_schema_compatibility", [
            {"name": "shop.order", "compatibility": "NONE"}])
        assert "Ok" in ok
        assert await call(http, b, "tidings_get_schema_compatibility", ["shop.order"]) == ["NONE"]
        # Version numbers under one name are given once, whichever member registers.
        (v2,) = await call(http, b, "register_schema", [{"model": order_schema("currency"), "name": "shop.order"}])
        (v3,) = await call(http, a, "register_schema", [{
            "model": json.dumps({**json.loads(order_schema("currency")), "description": "three"}),
            "name": "shop.order"}])
        assert [v2["Ok"]["version"], v3["Ok"]["version"]] == [2, 3], (v2, v3)
        assert v3["Ok"]["id"] not in (sid, v2["Ok"]["id"])
        # Every member checks a publish against the schema; a valid event is taken by both.
        for s in (a, b):
            good, bad = await call(http, s, "icrc72_publish", [
                {"namespace": "shop.orders", "data": order(amount={"Nat": 5})},
                {"namespace": "shop.orders", "data": order(amount={"Text": "five"})}])
            assert "Ok" in good and "Err" in bad, (good, bad)
        # A retraction through one member: within the bound, every member refuses the events.
        (ok,) = await call(http, b, "update_schema_state", [{"id": sid, "state": "Retracted"}])
        assert "Ok" in ok

        async def refused_everywhere() -> bool:
            for s in (a, b):
                (res,) = await call(http, s, "icrc72_publish", [
                    {"namespace": "shop.orders", "data": order(amount={"Nat": 5})}])
                if "Err" not in res:
                    return False
            return True

        await eventually(refused_everywhere)


async def test_a_retention_set_through_one_member_is_not_written_back_by_the_others(
    pair: list[ServerProcess],
) -> None:
    a, b = pair
    async with aiohttp.ClientSession() as http:
        (r,) = await call(http, a, "register_schema", [{"model": order_schema()}])
        sid = r["Ok"]["id"]
        await call(http, a, "icrc72_register_publication", [
            {"namespace": "kept.short", "config": [[SCHEMA, {"Nat": sid}]]}])
        await call(http, b, "icrc72_publish", [{"namespace": "kept.short", "data": order(amount={"Nat": 1})}])
        # b trims (and writes the starting position) after a changed the retention.
        (ok,) = await call(http, a, "update_schema_retention", [{"id": sid, "retention_s": 3600}])
        assert "Ok" in ok
        await call(http, b, "tidings_apply_retention", None)
        for s in (a, b):
            (info,) = await call(http, s, "get_schema", [sid])
            assert info["policy"]["retention_s"] == 3600, (s.url, info["policy"])


async def test_concurrent_updates_of_one_publication_keep_every_key(server: ServerProcess) -> None:
    """Two updates setting different keys at once both answer Ok, so both keys stay."""
    async with aiohttp.ClientSession() as http:
        for i in range(10):
            ns = f"com.example.race{i}"
            await call(http, server, "icrc72_register_publication", [{"namespace": ns, "config": []}])
            answers = await asyncio.gather(*(
                call(http, server, "icrc72_update_publication", [
                    {"namespace": ns, "config": [[f"com.example:{key}", {"Nat": n}]]}])
                for n, key in enumerate(["first", "second", "third"])
            ))
            assert all("Ok" in r for (r,) in answers), answers
            (info,) = [p for p in await call(http, server, "icrc72_get_publications", {}) if p["namespace"] == ns]
            keys = {k for k, _ in info["config"]}
            assert {"com.example:first", "com.example:second", "com.example:third"} <= keys, (i, info["config"])


async def test_listing_subscriptions_while_they_are_deleted_never_fails(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as http:
        await call(http, server, "icrc72_register_publication", [{"namespace": "com.example.gone", "config": []}])
        regs = [{"namespace": "com.example.gone", "config": [], "stopped": True,
                 "endpoint": "http://127.0.0.1:9/never"}] * 100
        ids = [r["Ok"] for r in await call(http, server, "icrc72_register_subscription", regs)]

        async def lists() -> None:
            for _ in range(20):
                await call(http, server, "icrc72_get_subscriptions", {"take": 1000})

        async def deletes() -> None:
            for i in reversed(ids):  # ahead of the listings, which go up by id
                await call(http, server, "icrc72_delete_subscription", [i])

        await asyncio.gather(lists(), deletes())
