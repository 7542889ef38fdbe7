"""Hostile input over real HTTP: every class answered with a 4xx and a clear message."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tidings.api.methods import METHODS

from .conftest import ServerProcess

pytestmark = pytest.mark.e2e


async def raw(http: aiohttp.ClientSession, srv: ServerProcess, method: str, body: bytes,
              verb: str = "POST") -> tuple[int, Any, Any]:
    async with http.request(verb, f"{srv.url}/v1/{method}", data=body,
                            headers={"authorization": f"Bearer {srv.admin_token}"}) as r:
        text = await r.read()
        return r.status, (json.loads(text) if text else None), r.headers


BIG = [2**63, -(2**63) - 1, 2**64, 10**40]
ID_ARGS = {
    "icrc72_confirm_notifications": lambda n: [n],
    "icrc72_delete_subscription": lambda n: [n],
    "icrc72_start_subscription": lambda n: [n],
    "icrc72_update_subscription": lambda n: [{"id": n}],
    "tidings_redrive_dead_letters": lambda n: [n],
    "tidings_drop_dead_letters": lambda n: [n],
    "tidings_get_subscription_secrets": lambda n: [n],
    "icrc77_cancel_replay": lambda n: [n],
    "icrc77_register_replay": lambda n: [{"namespace": "a.b", "range": [1, n]}],
    "tidings_fund_replay_credit": lambda n: [{"principal": "admin", "amount": n}],
    "get_schema": lambda n: [n],
    "delete_schema": lambda n: [n],
    "update_schema_retention": lambda n: [{"id": 1, "retention_s": n}],
    "tidings_get_dead_letters": lambda n: {"prev": n},
    "icrc72_get_subscriptions": lambda n: {"take": n},
    "icrc72_get_broadcaster_subscriptions": lambda n: {"prev": n},
    "icrc72_get_publication_broadcasters": lambda n: {"namespace": "a.b", "take": n},
}


@pytest.mark.parametrize("method", sorted(ID_ARGS))
async def test_integers_beyond_the_store_are_a_400_naming_the_field(
    server: ServerProcess, http: aiohttp.ClientSession, method: str
) -> None:
    for n in BIG:
        status, body, _ = await raw(http, server, method, json.dumps(ID_ARGS[method](n)).encode())
        assert status == 400 and body["error"]["code"] == "out_of_range", (method, n, body)
        assert "$" in body["error"]["message"]


async def test_bodies_that_are_not_utf8_json_or_too_deep_are_400(server: ServerProcess,
                                                                 http: aiohttp.ClientSession) -> None:
    for body in (b"\xff\xfe[1]", b"[\xc3\x28]", b'["\xed\xa0\x80"]', b"[" * 100_000 + b"]" * 100_000,
                 b'{"Map": ' * 5000, b"[1,", b'[{"namespace": "\\ud800"}]'):
        for method in ("icrc72_publish", "icrc72_register_subscription", "tidings_get_dead_letters",
                       "icrc72_get_publication_broadcasters"):
            status, out, _ = await raw(http, server, method, body)
            assert 400 <= status < 500, (method, body[:20], status, out)


async def test_broadcaster_queries_refuse_bad_arguments_and_bound_the_rest(
    server: ServerProcess, http: aiohttp.ClientSession
) -> None:
    """The broadcaster queries (docs/scaling.md): missing or mistyped fields are 400, an
    unknown or huge namespace 404, a huge or unknown broadcaster an empty list; never a 5xx."""
    for body in (b"{}", b'{"namespace": 7}', b'{"namespace": null}', b'{"namespace": "a.b", "take": "x"}', b"[]"):
        status, out, _ = await raw(http, server, "icrc72_get_publication_broadcasters", body)
        assert status == 400, (body, status, out)
    for ns in ("com.example.none", "x" * 100_000, "", "a..b", "icrc72:broadcaster:sys:nobody"):
        status, out, _ = await raw(http, server, "icrc72_get_publication_broadcasters",
                                   json.dumps({"namespace": ns}).encode())
        assert status == 404, (ns[:20], status, out)
    for body in (b'{"broadcaster": 7}', b'{"prev": "x"}', b'{"take": -1.5}'):
        status, out, _ = await raw(http, server, "icrc72_get_broadcaster_subscriptions", body)
        assert status == 400, (body, status, out)
    for who in ("nobody", "x" * 100_000, ""):
        status, out, _ = await raw(http, server, "icrc72_get_broadcaster_subscriptions",
                                   json.dumps({"broadcaster": who}).encode())
        assert status == 200 and out == [], (who[:20], status, out)  # this server has no subscriptions


@pytest.mark.parametrize("verb", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
async def test_other_verbs_are_405_with_allow_and_json(server: ServerProcess, http: aiohttp.ClientSession,
                                                       verb: str) -> None:
    for method in ("icrc72_publish", sorted(METHODS)[0]):
        status, body, headers = await raw(http, server, method, b"", verb)
        assert status == 405 and headers["Allow"] == "POST", (verb, status)
        assert body["error"]["code"] == "method_not_allowed"


async def test_unknown_methods_are_404(server: ServerProcess, http: aiohttp.ClientSession) -> None:
    for name in ("nope", "icrc72_publish_x", "a" * 5000, "%00", "..%2F..%2Fetc"):
        status, body, _ = await raw(http, server, name, b"[]")
        assert status == 404, (name, status, body)


async def test_a_client_that_disconnects_mid_request_is_logged_quietly(server: ServerProcess,
                                                                      http: aiohttp.ClientSession) -> None:


    for _ in range(5):
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            b"POST /v1/icrc72_publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + server.admin_token.encode() + b"\r\nContent-Length: 100000\r\n\r\n[{\"na"
        )
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()
    await asyncio.sleep(0.5)
    status, _, _ = await raw(http, server, "tidings_whoami", b"")
    assert status == 200
    log = (server.data_dir / "server.log").read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]
