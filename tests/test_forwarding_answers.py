"""What a broadcaster tells a publisher when the publication's owner, to which it forwarded
the events, answers badly or not at all (docs/scaling.md, "Publishing to the owner").

Against a real HTTP server on loopback playing the owner: an owner that surely stored
nothing (unreachable, or refusing with a 4xx) lets the events be stored where they arrived
(``None``); one that may have stored them (silent past the timeout, 5xx, a cut or
unreadable or oversized answer) makes every event a ``GenericBatchError`` saying so,
never a silent success and never a second copy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import msgspec
import pytest
from aiohttp import web

from tidings.broker import forwarding
from tidings.broker.forwarding import Forwarding, Relayed
from tidings.core.ingest import Prepared
from tidings.core.wire import ok
from tidings.store import PrincipalRecord

from .conftest import free_port

TIMEOUT_S = 0.5
ROWS = [Prepared(0, "shop.orders", b'{"Nat":1}', b"[]"), Prepared(2, "shop.orders", b'{"Nat":2}', b"[]")]


async def _owner(request: web.Request) -> web.StreamResponse:
    how = request.match_info["how"]
    await request.read()
    if how == "silent":
        await asyncio.sleep(3600)
    if how == "fails":
        return web.Response(status=503, text="busy")
    if how == "refuses":
        return web.Response(status=403, text="no shared secret")
    if how == "garbage":
        return web.Response(body=b"\xc1 not msgpack")
    if how == "huge":
        return web.Response(body=b"\x00" * (forwarding.MAX_ANSWER_BYTES + 1))
    if how == "cut":
        resp = web.StreamResponse(headers={"content-length": "1000"})
        await resp.prepare(request)
        await resp.write(b"\x92")
        assert request.transport is not None
        request.transport.close()
        return resp
    return web.Response(body=forwarding._encode(Relayed([ok(7), None, ok(8)])))


@pytest.fixture
async def owner() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/{how}/v1/icrc72_publish_relay", _owner)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
async def fwd() -> AsyncIterator[Forwarding]:
    f = Forwarding(None, timeout_s=TIMEOUT_S)  # type: ignore[arg-type] - send() needs no membership
    await f.start(b"shared secret")
    yield f
    await f.close()


async def test_the_owner_s_answer_is_the_publisher_s(owner: str, fwd: Forwarding) -> None:
    got = await fwd.send(f"{owner}/answers", PrincipalRecord(name="alice"), 3, ROWS, 0)
    assert got == Relayed([ok(7), None, ok(8)])


@pytest.mark.parametrize("how", ["silent", "fails", "garbage", "huge", "cut"])
async def test_an_owner_that_may_have_stored_them_makes_each_event_an_error_saying_so(
    owner: str, fwd: Forwarding, how: str
) -> None:
    started = time.monotonic()
    got = await fwd.send(f"{owner}/{how}", PrincipalRecord(name="alice"), 3, ROWS, 0)
    assert time.monotonic() - started < TIMEOUT_S + 2  # bounded, whatever the owner does
    assert got is not None and got.results[1] is None  # position 1 was not among the forwarded
    for i in (0, 2):
        result = got.results[i]
        plain = msgspec.to_builtins(result)
        assert "Err" in plain and "GenericBatchError" in str(plain) and "may or may not be stored" in str(plain)


@pytest.mark.parametrize("how", ["refuses", "unreachable"])
async def test_an_owner_that_surely_stored_nothing_lets_them_be_stored_here(
    owner: str, fwd: Forwarding, how: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}" if how == "unreachable" else f"{owner}/{how}"
    assert await fwd.send(url, PrincipalRecord(name="alice"), 3, ROWS, 0) is None

