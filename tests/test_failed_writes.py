"""A failed write is never stepped over (docs/semantics.md, counters; docs/delivery.md):
when the store refuses the delivery bookkeeping for a while (here its database connection
is cut, through a proxy, while pushes go on), what could not be recorded is pushed and
recorded again, so afterwards every event the endpoint took has a delivery record and
the confirmation counters equal the records, exactly."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from bench.chaos._proxy import Proxy

from tidings.store import PostgresStore

from .conftest import ServerProcess, eventually, read_body, respond
from .pg_support import schema_address

pytestmark = pytest.mark.e2e

NS = "com.example.refused"


class Taking:
    """An endpoint that takes every push (200), counting what it got."""

    def __init__(self) -> None:
        self.got: Counter[tuple[int, int]] = Counter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await read_body(receive)
        sub = int(dict(scope["headers"])[b"x-tidings-subscription"])
        for n in json.loads(body):
            self.got[(sub, n["eventId"])] += 1
        await asyncio.sleep(0.01)  # pushes go on while records are being written
        await respond(send)


async def test_bookkeeping_refused_for_a_while_is_recorded_again_not_stepped_over(
    server_factory: Callable[..., ServerProcess], pg_database: str, endpoints: Any,
) -> None:
    store = schema_address(pg_database)
    database, _, query = store.partition("?")
    proxy = await Proxy(5432).start()
    try:
        via_proxy = database.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}") + "?" + query
        # Started and stopped in a thread: the proxy runs on this event loop.
        server = await asyncio.to_thread(
            server_factory, store=via_proxy, workers="1", store_timeout_s="1", retry_initial_s="0.05"
        )
        taking = Taking()
        ep = await endpoints(taking)
        headers = {"authorization": f"Bearer {server.admin_token}"}
        acked: list[int] = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async def call(method: str, body: Any) -> Any:
                async with http.post(f"{server.url}/v1/{method}", json=body, headers=headers) as r:
                    return r.status, (await r.json() if r.status == 200 else None)

            await call("icrc72_register_publication", [{"namespace": NS}])
            subs = []
            for _ in range(2):
                _, [item] = await call("icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}])
                subs.append(item["Ok"])

            async def publish(n: int) -> None:
                for k in range(n):
                    status, answer = await call("icrc72_publish", [{"namespace": NS, "data": {"Nat": k}}])
                    if status == 200 and answer and "Ok" in answer[0]:
                        acked.extend(answer[0]["Ok"])
                    await asyncio.sleep(0.005)

            await publish(100)
            # Cut the database off while the last pushes' records are being written, for
            # longer than the store's timeout: those writes fail, and so do publishes.
            proxy.partition()
            await asyncio.sleep(0.5)
            await publish(20)
            await asyncio.sleep(1.5)
            proxy.heal()
            await publish(100)
            await eventually(lambda: all((s, i) in taking.got for s in subs for i in acked), timeout=60)
            await asyncio.sleep(1.0)
        await asyncio.to_thread(server.stop)
        # The outage is told once, with its reason, and its end once: not once per request.
        text = (server.data_dir / "server.log").read_text()
        assert text.count("the store is unavailable; requests that need it are answered 503") == 1, text[-3000:]
        assert text.count("the store is available again after") == 1

        pg = PostgresStore(database, server_settings={"search_path": query.partition("=")[2]})
        await pg.open()
        try:
            records = [d for d in await pg.deliveries() if d.outcome == "confirmed"]
            for s in subs:
                recorded = Counter(d.event_id for d in records if d.subscription_id == s)
                got = {i for (sub, i), _ in taking.got.items() if sub == s}
                assert got <= set(recorded), f"subscription {s}: taken, never recorded: {sorted(got - set(recorded))}"
                confirmations = (await pg.stats("subscription", str(s))).get(
                    "icrc72:subscription:stats:confirmations", 0)
                assert confirmations == sum(recorded.values()), (s, confirmations, sum(recorded.values()))
        finally:
            await pg.close()
    finally:
        await proxy.close()
