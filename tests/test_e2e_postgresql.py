"""``tidings serve --store postgresql://...``: the service on PostgreSQL, end to end.

(``TIDINGS_TEST_STORE=postgresql`` runs every end-to-end test this way; these run on
PostgreSQL always.)
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from tidings.client import EventNotification, Publisher, Subscriber

from .conftest import ServerProcess, eventually
from .pg_support import schema_address

pytestmark = pytest.mark.e2e

NS = "com.example.orders"


async def test_publish_deliver_confirm_and_survive_a_kill(
    server_factory: Callable[..., ServerProcess], pg_database: str, endpoints: Any
) -> None:
    # One process: what a kill does to front processes is tests/test_fronts.py's concern.
    server = server_factory(store=schema_address(pg_database), retry_initial_s="0.05", retry_max_s="0.2", workers="1")
    got: list[EventNotification] = []

    async def handle(n: EventNotification) -> None:
        got.append(n)

    sub = Subscriber(handle, url=server.url, token=server.admin_token)
    ep = await endpoints(sub, start=False)  # down at first: a backlog builds up
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)
        await sub.subscribe(NS, ep.url)
        assert await pub.publish_many(NS, range(10)) == list(range(1, 11))
    server.kill()
    server.start()
    await ep.start()
    await eventually(lambda: len(got) >= 10)
    assert [n.eventId for n in got] == list(range(1, 11))
    async with Publisher(server.url, server.admin_token) as pub:
        assert await pub.publish(NS, 10) == 11  # the chain goes on after the kill
    await eventually(lambda: len(got) == 11)
    assert got[-1].prev_id == 10
    assert "postgresql://" in (server.data_dir / "server.log").read_text()
    await sub.close()


async def test_two_servers_on_one_database_share_the_id_chain(
    server_factory: Callable[..., ServerProcess], pg_database: str
) -> None:
    """Two ``tidings serve`` processes publish to one namespace at once: its ids stay gap-free."""
    store = schema_address(pg_database)
    a = server_factory(store=store)
    async with Publisher(a.url, a.admin_token) as pub:
        await pub.register_publication(NS)
    # The second server finds the admin made by the first; it gets that token to read.
    b_dir = a.data_dir.parent / "second"
    b_dir.mkdir()
    shutil.copy(a.data_dir / "admin.token", b_dir / "admin.token")
    b = ServerProcess(b_dir, env={"TIDINGS_STORE": store})
    b.start(new_port_if_taken=True)
    try:
        async def publish(server: ServerProcess) -> list[int]:
            ids: list[int] = []
            async with Publisher(server.url, server.admin_token) as pub:
                for k in range(20):
                    ids += await pub.publish_many(NS, range(k * 10, k * 10 + 10))
            return ids

        ids_a, ids_b = await asyncio.gather(publish(a), publish(b))
        assert sorted(ids_a + ids_b) == list(range(1, 401))
        assert ids_a == sorted(ids_a) and ids_b == sorted(ids_b)
    finally:
        b.stop()


def test_principals_are_made_in_the_database(
    server_factory: Callable[..., ServerProcess], pg_database: str
) -> None:
    server = server_factory(store=schema_address(pg_database))
    token = server.cli("principal", "create", "carol")
    assert token
    assert "carol" in server.cli("principal", "list")
