"""The outbound policy on the running server: what registration refuses, itemised."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, admin_api, free_port

pytestmark = pytest.mark.e2e

REFUSED = [
    "http://127.0.0.1:{port}/", "http://localhost:{port}/", "http://10.1.2.3/", "http://192.168.1.1/hook",
    "http://169.254.169.254/latest/meta-data/", "http://[::1]:{port}/", "http://[::ffff:127.0.0.1]/",
    "http://[fd00::1]/", "http://[fe80::1%25eth0]/", "http://0.0.0.0/", "http://100.64.0.1/",
    "http://224.0.0.1/", "http://[64:ff9b::7f00:1]/", "http://[2002:7f00:1::]/",
]
MALFORMED = ["http://[::1", "http://[zz::]/", "http://h:99999/", "http://exa mple.org/", "gopher://x/"]


@pytest.fixture
def restricted(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    # A server on a network address is restricted by default; on loopback this setting
    # makes it so (the rules are the same: test_outbound_policy covers the choice).
    return server_factory(outbound_policy="restricted")


async def call(http: aiohttp.ClientSession, srv: ServerProcess, method: str, arg: Any) -> tuple[int, Any]:
    async with http.post(f"{srv.url}/v1/{method}", data=json.dumps(arg),
                         headers={"authorization": f"Bearer {srv.admin_token}"}) as resp:
        return resp.status, await resp.json()


async def test_registration_refuses_every_internal_target_item_by_item(
    restricted: ServerProcess, http: aiohttp.ClientSession
) -> None:
    ns = "com.example.out"
    await admin_api(http, restricted, "icrc72_register_publication", [{"namespace": ns}])
    port = free_port()
    urls = [u.format(port=port) for u in REFUSED]
    status, results = await call(http, restricted, "icrc72_register_subscription",
                                 [{"namespace": ns, "endpoint": u} for u in urls])
    assert status == 200 and len(results) == len(urls)
    for url, r in zip(urls, results, strict=True):
        message = r["Err"]["ImproperConfig"]
        assert "outbound policy" in message and "rule:" in message, (url, message)
    # The same for a publication's authorisation URL, and for an endpoint changed later.
    status, (r,) = await call(http, restricted, "icrc72_register_publication", [{
        "namespace": "com.example.out2",
        "config": [["tidings:publication:authorization:url", {"Text": "http://169.254.169.254/"}]],
    }])
    assert "link_local" in r["Err"]["ImproperConfig"]
    assert await admin_api(http, restricted, "icrc72_get_subscriptions", {}) == []


async def test_malformed_endpoints_are_itemised_errors_not_server_errors(
    server: ServerProcess, http: aiohttp.ClientSession
) -> None:
    ns = "com.example.malformed"
    await admin_api(http, server, "icrc72_register_publication", [{"namespace": ns}])
    status, results = await call(http, server, "icrc72_register_subscription",
                                 [{"namespace": ns, "endpoint": u} for u in MALFORMED])
    assert status == 200
    assert all("ImproperConfig" in r["Err"] for r in results), results


async def test_a_loopback_server_keeps_the_quickstart_working(
    server: ServerProcess, http: aiohttp.ClientSession
) -> None:
    ns = "com.example.quick"
    await admin_api(http, server, "icrc72_register_publication", [{"namespace": ns}])
    (r,) = await admin_api(http, server, "icrc72_register_subscription",
                           [{"namespace": ns, "endpoint": "http://127.0.0.1:9000/"}])
    assert "Ok" in r
