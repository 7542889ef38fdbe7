"""Rights: docs/rights.md's table, role x method, over HTTP against the real server.

Every method of the API is in the table (a new method without a row fails here); nobody
without a valid token gets anything but 401; another principal is refused on alice's
resources, item by item or with 403, and sees nothing of hers in scoped listings; the
admin may do what the table says admins may."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tidings.api.methods import METHODS

from .conftest import ServerProcess, admin_api, free_port

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parent.parent / "docs" / "rights.md"
NS = "com.rights.alice"


def documented() -> set[str]:
    names: set[str] = set()
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([a-z0-9_]+)`", line.split("|")[1]))
    return names


def test_every_method_has_a_row_in_the_rights_table() -> None:
    assert set(METHODS) - documented() == set()
    assert documented() - set(METHODS) == set()


class World:
    def __init__(self, server: ServerProcess, http: aiohttp.ClientSession) -> None:
        self.server, self.http = server, http
        self.tokens: dict[str, str] = {"admin": server.admin_token}
        self.ids: dict[str, Any] = {}

    async def call(self, who: str | None, method: str, arg: Any) -> tuple[int, Any]:
        headers = {"content-type": "application/json"}
        if who is not None:
            headers["authorization"] = f"Bearer {self.tokens.get(who, who)}"
        data = b"" if arg is None else json.dumps(arg).encode()
        async with self.http.post(f"{self.server.url}/v1/{method}", data=data, headers=headers) as r:
            return r.status, await r.json()

    async def ok(self, who: str, method: str, arg: Any) -> Any:
        status, body = await self.call(who, method, arg)
        assert status == 200, (method, body)
        if isinstance(body, list):
            assert all(b is None or "Err" not in b for b in body if isinstance(b, dict)), (method, body)
        return body


@pytest.fixture
async def world(server: ServerProcess, http: aiohttp.ClientSession) -> World:
    w = World(server, http)
    for name in ("alice", "mallory"):
        w.tokens[name] = (await admin_api(http, server, "tidings_create_principal", {"name": name}))["token"]
    await w.ok("alice", "icrc72_register_publication", [{"namespace": NS}])
    (sub,) = await w.ok("alice", "icrc72_register_subscription", [
        {"namespace": NS, "endpoint": f"http://127.0.0.1:{free_port()}/", "mode": "oneshot"},
    ])
    w.ids["sub"] = sub["Ok"]
    await w.ok("alice", "icrc72_publish", [{"namespace": NS, "data": {"Nat": 1}}])
    (replay,) = await w.ok("alice", "icrc77_register_replay", [{"namespace": NS, "range": [1, None]}])
    w.ids["replay"] = replay["Ok"]
    (schema,) = await w.ok("admin", "register_schema", [{
        "name": "rights.example", "format": "JsonSchema", "model": json.dumps({"type": "object"}),
    }])
    w.ids["schema"] = schema["Ok"]["id"] if isinstance(schema["Ok"], dict) else schema["Ok"]
    return w


def mallory_on_alices(w: World) -> dict[str, Any]:
    """What mallory sends against alice's resources, per method that acts on one."""
    sub, replay, schema = w.ids["sub"], w.ids["replay"], w.ids["schema"]
    return {
        "icrc72_publish": [{"namespace": NS, "data": {"Nat": 2}}],
        "icrc72_confirm_notifications": [1],
        "icrc72_confirm_messages": [1],
        "icrc72_update_publication": [{"namespace": NS, "config": [["x:y", {"Nat": 1}]]}],
        "icrc72_delete_publication": [NS],
        "icrc72_update_subscription": [{"id": sub, "endpoint": f"http://127.0.0.1:{free_port()}/"}],
        "icrc72_delete_subscription": [sub],
        "icrc72_start_subscription": [sub],
        "icrc72_stop_subscription": [sub],
        "tidings_redrive_dead_letters": [1],
        "tidings_drop_dead_letters": [1],
        "tidings_get_subscription_secrets": [sub],
        "tidings_reveal_subscription_secrets": [sub],
        "tidings_rotate_subscription_secret": [{"id": sub}],
        "tidings_create_principal": {"name": "mallory2", "admin": True},
        "tidings_get_principals": {},
        "tidings_revoke_tokens": {"principal": "alice"},
        "update_schema_state": [{"id": schema, "state": "Retracted"}],
        "delete_schema": [schema],
        "update_schema_retention": [{"id": schema, "retention_s": 1}],
        "tidings_set_schema_compatibility": [{"name": "rights.example", "compatibility": "NONE"}],
        "tidings_update_schema_limits": {"max_count": 1},
        "tidings_apply_retention": None,
        "icrc77_register_replay": [{"namespace": NS, "range": [1, None]}],
        "icrc77_cancel_replay": [replay],
        "icrc77_replay_status": [{"replayId": replay, "status": {"completed": 1}}],
        "tidings_fund_replay_credit": [{"principal": "mallory", "amount": 1000}],
        "tidings_get_replay_credit": ["alice"],
    }


def refused(status: int, body: Any) -> bool:
    if status in (401, 403):
        return True
    if isinstance(body, dict) and "itemized" in body:  # ConfirmResult
        body = body["itemized"]
    if status != 200 or not isinstance(body, list) or not body:
        return False
    return all(isinstance(b, dict) and "Err" in b for b in body)


async def test_without_a_valid_token_every_method_is_401(world: World) -> None:
    for method in METHODS:
        for who in (None, "tid_not-a-real-token"):
            status, body = await world.call(who, method, None)
            assert status == 401, (method, who, status, body)


async def test_another_principal_is_refused_on_alices_resources(world: World) -> None:
    for method, arg in mallory_on_alices(world).items():
        status, body = await world.call("mallory", method, arg)
        assert refused(status, body), (method, status, body)
    # ... and nothing changed for alice.
    subs = await world.ok("alice", "icrc72_get_subscriptions", {})
    assert [s["id"] for s in subs if s["namespace"] == NS] == [world.ids["sub"]]
    (pub,) = [p for p in await world.ok("alice", "icrc72_get_publications", {}) if p["namespace"] == NS]
    assert "x:y" not in json.dumps(pub)


async def test_scoped_listings_show_another_principal_nothing_of_alices(world: World) -> None:
    assert await world.ok("mallory", "tidings_get_dead_letters", {}) == []
    assert await world.ok("mallory", "tidings_get_pending_authorizations", None) == []
    replays = await world.ok("mallory", "icrc77_get_replays", {})
    assert world.ids["replay"] not in [r.get("id", r.get("replayId")) for r in replays]
    listed = await world.ok("mallory", "icrc72_get_subscriptions", {})
    (alices,) = [s for s in listed if s["id"] == world.ids["sub"]]
    assert alices.get("endpoint") is None  # listed, without where it pushes to


def admin_only() -> list[str]:
    """The methods docs/rights.md gives to admins alone."""
    names: list[str] = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if line.startswith("| `") and cells[2] == "admin":
            assert cells[3] == "`403`", f"an admin-only method is refused with 403 as a whole: {line}"
            names.extend(re.findall(r"`([a-z0-9_]+)`", cells[1]))
    return names


async def test_admin_only_methods_refuse_others_in_one_shape(world: World) -> None:
    """Every admin-only method refuses anyone else the same way: 403 ``forbidden`` for the
    whole call, whatever its items (an empty batch too), never an itemised answer."""
    methods = admin_only()
    assert {"update_schema_state", "tidings_update_schema_limits", "tidings_fund_replay_credit"} <= set(methods)
    args = mallory_on_alices(world)
    for method in methods:
        for arg in {id(a): a for a in (args[method], [] if isinstance(args[method], list) else args[method])}.values():
            status, body = await world.call("mallory", method, arg)
            assert status == 403 and body["error"]["code"] == "forbidden", (method, arg, status, body)


async def test_the_admin_may_do_what_admins_may(world: World) -> None:
    admin_only = ["tidings_create_principal", "tidings_get_principals", "update_schema_retention",
                  "tidings_set_schema_compatibility", "tidings_fund_replay_credit"]
    args = mallory_on_alices(world)
    for method in admin_only:
        status, body = await world.call("admin", method, args[method])
        assert status == 200 and not refused(status, body), (method, body)
