"""Keyed publishing through restarts of the database (a throwaway PostgreSQL cluster of
its own, never the shared one): the SDK retries what the restart left unknown with the
same keys, each logical event ends up in the log exactly once under the id returned, and
the server logs each outage in a line or two, not the driver's tracebacks
(docs/operations.md, "Exactly-once publishing")."""

from __future__ import annotations

import asyncio
import shutil
import signal
import threading
from collections.abc import Callable, Iterator

import asyncpg
import msgspec
import pytest
from bench.chaos._pg import PgNode, base_dir
from bench.chaos._proxy import Proxy

from tidings.client import Publisher

from .conftest import ServerProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser to run PostgreSQL as its user"),
]

NS = "restart.a"


@pytest.fixture
def pg() -> Iterator[PgNode]:
    node = PgNode(base_dir("tidings-idem-") / "pg")
    node.init()
    node.start()
    try:
        yield node
    finally:
        node.destroy()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_database_restart_stores_each_keyed_event_once_and_logs_no_traceback(
    pg: PgNode, mode: str, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(store=pg.dsn)
    await _publish_through_restarts(server, pg, mode, publishers=1, n=300)


async def test_a_restart_with_several_groups_in_flight_stores_each_keyed_event_once(
    pg: PgNode, server_factory: Callable[..., ServerProcess]
) -> None:
    """The database 5 ms each way behind a proxy and eight publishers: the appender keeps
    up to four groups in flight (``store._pg_events``), and the restart meets them all at
    once, some committed and unanswered, some not."""
    # The proxy on a loop of its own: starting the server blocks this one.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    proxy = asyncio.run_coroutine_threadsafe(Proxy(pg.port, delay_s=0.005).start(), loop).result(10)
    try:
        server = server_factory(store=f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres")
        proxy.most_waiting = 0
        await _publish_through_restarts(server, pg, "immediate", publishers=8, n=480)
        assert proxy.most_waiting >= 3  # groups, the heartbeat and reads were out at once
    finally:
        asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _publish_through_restarts(server: ServerProcess, pg: PgNode, mode: str, *, publishers: int, n: int) -> None:
    answered: dict[str, int] = {}
    async with Publisher(server.url, server.admin_token) as admin:
        await admin.register_publication(NS)

    async def publish_all(c: int) -> None:
        async with Publisher(server.url, server.admin_token, deadline=60, timeout=5) as pub:
            for i in range(c * n // publishers, (c + 1) * n // publishers, 3):
                batch = [f"k{j}" for j in range(i, i + 3)]
                for name, eid in zip(batch, await pub.publish_many(NS, batch), strict=True):
                    answered[name] = eid

    task = asyncio.gather(*(publish_all(c) for c in range(publishers)))
    for mark in (n // 4, n // 2):
        while len(answered) < mark and not task.done():
            await asyncio.sleep(0.005)
        await asyncio.to_thread(pg.restart, mode)  # whatever was being committed
    await task

    conn = await asyncpg.connect(pg.dsn)
    try:
        rows = await conn.fetch("SELECT id, data FROM events WHERE namespace = $1", NS)
    finally:
        await conn.close()
    where: dict[str, list[int]] = {}
    for eid, data in rows:
        where.setdefault(msgspec.json.decode(bytes(data))["Text"], []).append(eid)
    assert len(answered) == n
    assert {k: v for k, v in where.items() if len(v) > 1} == {}  # nothing stored twice
    assert {k: where.get(k) for k in answered} == {k: [i] for k, i in answered.items()}  # nothing lost, ids true
    server.stop(signal.SIGTERM)
    log = (server.data_dir / "server.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    # Each restart: a line when the cluster's work meets it and one when it is over, and
    # the same for the requests it refused; not a line per loop and round.
    said = [line for line in log.splitlines() if " WARNING tidings.cluster: " in line]
    assert len(said) <= 2 * 2 and sum("waits for the store" in line for line in said) <= 2, "\n".join(said)
