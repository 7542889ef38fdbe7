"""What a broadcaster tells a publisher when the publication's owner, to which it forwarded
the events, answers badly or not at all (docs/scaling.md, "Publishing to the owner").

Against a real HTTP server on loopback playing the owner, and the relay tokens in a real
PostgreSQL store: an owner that surely stored nothing (unreachable, or refusing with a
4xx) lets the events be stored where they arrived (``None``). One that may have stored
them (silent past the timeout, 5xx, a cut or unreadable or oversized answer) makes the
sender withdraw the relay's token: if the owner had not stored them it never will, and
they are stored here (``None``); if it had, the answer is the ids it stored them under.
Only a store the sender cannot reach either leaves it unknown: every event is then the
retryable item error ``GenericError`` 6 ("may have been stored: retry with the same key"),
never ``GenericBatchError``, which says nothing took effect. Never a silent success, never
a second copy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import msgspec
import pytest
from aiohttp import web

from tidings.broker.cluster import Forwarding, RelayBatch, Relayed
from tidings.broker.cluster import _forwarding as forwarding
from tidings.core.ingest import ERR_MAYBE_STORED, Prepared
from tidings.core.wire import Err, GenericError, ok
from tidings.store import NewEvent, PostgresStore, PrincipalRecord

from .conftest import free_port
from .pg_support import fresh_schema

TIMEOUT_S = 0.5
_STORE = web.AppKey("store", PostgresStore)
ROWS = [Prepared(0, "shop.orders", b'{"Nat":1}', b"[]"), Prepared(2, "shop.orders", b'{"Nat":2}', b"[]")]


async def _owner(request: web.Request) -> web.StreamResponse:
    how = request.match_info["how"]
    body = await request.read()
    if how == "stores-then-fails":  # stored them under the relay's token, then its answer was lost
        relay = msgspec.msgpack.decode(body, type=RelayBatch)
        store = request.app[_STORE]
        await store.append_relayed(
            [NewEvent(namespace=r.namespace, source=relay.source, timestamp=1, data=r.data, headers=r.headers)
             for r in relay.batch.rows], [], relay.token,
        )
        return web.Response(status=503, text="lost")
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
async def store(pg_database: str) -> AsyncIterator[PostgresStore]:
    async with fresh_schema(pg_database) as schema:
        s = PostgresStore(pg_database, server_settings={"search_path": schema})
        await s.open()
        yield s
        await s.close()


@pytest.fixture
async def owner(store: PostgresStore) -> AsyncIterator[str]:
    app = web.Application()
    app[_STORE] = store
    app.router.add_post("/{how}/v1/icrc72_publish_relay", _owner)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
async def fwd(store: PostgresStore) -> AsyncIterator[Forwarding]:
    f = Forwarding(None, store, timeout_s=TIMEOUT_S)  # type: ignore[arg-type] - send() needs no membership
    await f.start(b"shared secret")
    yield f
    await f.close()


async def test_the_owner_s_answer_is_the_publisher_s(owner: str, fwd: Forwarding) -> None:
    got = await fwd.send(f"{owner}/answers", PrincipalRecord(name="alice"), 3, ROWS, 0)
    assert got == Relayed([ok(7), None, ok(8)])


@pytest.mark.parametrize("how", ["silent", "fails", "garbage", "huge", "cut"])
async def test_an_owner_that_gave_no_usable_answer_and_stored_nothing_can_no_longer_store_them(
    owner: str, fwd: Forwarding, store: PostgresStore, how: str
) -> None:
    started = time.monotonic()
    assert await fwd.send(f"{owner}/{how}", PrincipalRecord(name="alice"), 3, ROWS, 0) is None  # store here
    assert time.monotonic() - started < TIMEOUT_S + 2  # bounded, whatever the owner does
    # The owner, answering at last, stores nothing: its append reuses the withdrawn token.
    (token,) = await store._fetch("SELECT token FROM relay_tokens")
    with pytest.raises(Exception, match="relay_tokens"):
        await store.append_relayed([NewEvent(namespace="shop.orders", source="alice", timestamp=1, data=b"1")], [],
                                   token[0])
    assert await store.head() == 0


async def test_an_owner_that_stored_them_and_lost_its_answer_gives_their_ids(
    owner: str, fwd: Forwarding, store: PostgresStore
) -> None:
    got = await fwd.send(f"{owner}/stores-then-fails", PrincipalRecord(name="alice"), 3, ROWS, 0)
    assert got == Relayed([ok([1]), None, ok([2])])
    assert await store.head() == 2  # stored once


async def test_a_store_that_cannot_say_makes_each_event_an_error_saying_so(owner: str, store: PostgresStore) -> None:
    f = Forwarding(None, store, timeout_s=TIMEOUT_S)  # type: ignore[arg-type]
    await f.start(b"shared secret")
    await store.close()  # the withdraw cannot be asked
    try:
        got = await f.send(f"{owner}/fails", PrincipalRecord(name="alice"), 3, ROWS, 0)
    finally:
        await f.close()
        await store.open()
    assert got is not None and got.results[1] is None  # position 1 was not among the forwarded
    for i in (0, 2):
        r = got.results[i]
        assert r is not None and isinstance(r.Err, Err) and r.Err.code == "GenericError"
        assert isinstance(r.Err.GenericError, GenericError) and r.Err.GenericError.error_code == ERR_MAYBE_STORED


@pytest.mark.parametrize("how", ["refuses", "unreachable"])
async def test_an_owner_that_surely_stored_nothing_lets_them_be_stored_here(
    owner: str, fwd: Forwarding, how: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}" if how == "unreachable" else f"{owner}/{how}"
    assert await fwd.send(url, PrincipalRecord(name="alice"), 3, ROWS, 0) is None

