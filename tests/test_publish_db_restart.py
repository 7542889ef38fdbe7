"""Keyed publishing through restarts of the database (a throwaway PostgreSQL cluster of
its own, never the shared one): the SDK retries what the restart left unknown with the
same keys, each logical event ends up in the log exactly once under the id returned, and
the server logs each outage in a line or two, not the driver's tracebacks
(docs/operations.md, "Exactly-once publishing")."""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import Iterator

import asyncpg
import msgspec
import pytest
from bench.chaos._pg import PgNode, base_dir

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
    pg: PgNode, tmp_path: object, mode: str, server_factory: object
) -> None:
    server: ServerProcess = server_factory(store=pg.dsn)  # type: ignore[operator]
    answered: dict[str, int] = {}
    n = 300
    async with Publisher(server.url, server.admin_token) as admin:
        await admin.register_publication(NS)

    async def publish_all() -> None:
        async with Publisher(server.url, server.admin_token, deadline=60, timeout=5) as pub:
            for i in range(0, n, 3):
                batch = [f"k{j}" for j in range(i, i + 3)]
                for name, eid in zip(batch, await pub.publish_many(NS, batch), strict=True):
                    answered[name] = eid

    task = asyncio.create_task(publish_all())
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
