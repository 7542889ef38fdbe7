"""Exactly-once publishing through faults that make a publish's outcome unknown: the SDK
retries with the same idempotency keys (docs/semantics.md, "Exactly once").

A small TCP proxy forwards each request to the server and drops the answer (the event is
stored, the publisher never hears so); a server killed with SIGKILL while a publisher
publishes. Checks, from the log itself: every logical event is stored exactly once,
every id the SDK returned is that event's, and nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
from typing import Any

import msgspec
import pytest

from tidings.client import Publisher, PublishUncertain, Stream, SyncPublisher, item_result

from .conftest import ServerProcess

pytestmark = pytest.mark.e2e

NS = "retries.a"


class DroppingProxy:
    """Forwards connections to ``port``; while ``drops`` is above zero, a connection whose
    server starts answering is cut instead (after the first ``spare`` answers of each
    connection: a WebSocket's handshake), so the request took effect and its answer is lost."""

    def __init__(self, port: int, drops: int, *, spare: int = 0) -> None:
        self.port = port
        self.drops = drops
        self.dropped = 0
        self.spare = spare
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            cw.close()
            self._tasks.discard(task)
            return

        async def up() -> None:
            with contextlib.suppress(OSError):
                while data := await cr.read(65536):
                    sw.write(data)
                    await sw.drain()
            sw.close()

        async def down() -> None:
            spared = 0
            with contextlib.suppress(OSError):
                while data := await sr.read(65536):
                    if spared >= self.spare and self.drops > 0:
                        self.drops -= 1
                        self.dropped += 1
                        break  # the answer is lost: both sides are cut
                    spared += 1
                    cw.write(data)
                    await cw.drain()
            cw.close()
            sw.close()

        try:
            await asyncio.gather(up(), down())
        finally:
            for w in (cw, sw):
                w.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await w.wait_closed()
            self._tasks.discard(task)


def log_of(server: ServerProcess) -> dict[int, Any]:
    """The namespace's events as stored, id -> data, read from the database file."""
    conn = sqlite3.connect(f"file:{server.data_dir / 'tidings.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, data FROM events WHERE namespace = ? ORDER BY id", (NS,)).fetchall()
    finally:
        conn.close()
    return {i: msgspec.json.decode(d) for i, d in rows}


def assert_exactly_once(server: ServerProcess, answered: dict[str, int]) -> None:
    """Each logical event (its Text data) is stored once, under the id it was answered with."""
    log = log_of(server)
    where: dict[str, list[int]] = {}
    for i, data in log.items():
        where.setdefault(data["Text"], []).append(i)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}  # nothing stored twice
    assert {k: where.get(k) for k in answered} == {k: [i] for k, i in answered.items()}  # nothing lost, ids true


async def register(server: ServerProcess) -> None:
    async with Publisher(server.url, server.admin_token) as pub:
        await pub.register_publication(NS)


async def test_an_answer_lost_after_the_commit_is_retried_with_the_same_keys(server: ServerProcess) -> None:
    await register(server)
    async with DroppingProxy(server.port, drops=3) as proxy, Publisher(proxy.url, server.admin_token) as pub:
        ids = await pub.publish_many(NS, [f"e{i}" for i in range(5)])
        one = await pub.publish(NS, "single")
    assert proxy.dropped == 3
    assert ids == [1, 2, 3, 4, 5] and one == 6  # the real ids: the first try stored them
    assert_exactly_once(server, {**{f"e{i}": i + 1 for i in range(5)}, "single": 6})


async def test_past_the_deadline_the_error_says_a_retry_with_the_same_keys_is_safe(server: ServerProcess) -> None:
    await register(server)
    async with DroppingProxy(server.port, drops=1000) as proxy, \
            Publisher(proxy.url, server.admin_token, deadline=1.5) as pub:
        with pytest.raises(PublishUncertain, match=r"may have been stored.*same idempotency keys.*is safe") as e:
            await pub.publish_many(NS, ["a", "b"])
    assert proxy.dropped >= 1
    events = e.value.events
    assert [x.idempotencyKey for x in events] and all(x.idempotencyKey for x in events)
    # Sent again with the same keys, directly: answered with the ids of the first try.
    async with Publisher(server.url, server.admin_token) as pub:
        results = await pub.publish_batch(events)
    assert [item_result(r) for r in results] == [[1], [2]] and all(r is not None and r.repeat for r in results)
    assert_exactly_once(server, {"a": 1, "b": 2})


def test_the_sync_publisher_retries_too(server: ServerProcess) -> None:
    asyncio.run(register(server))

    async def scenario() -> list[int]:
        async with DroppingProxy(server.port, drops=2) as proxy:
            def publish() -> list[int]:
                with SyncPublisher(proxy.url, server.admin_token) as pub:
                    return [pub.publish(NS, f"s{i}") for i in range(3)]

            return await asyncio.to_thread(publish)

    assert asyncio.run(scenario()) == [1, 2, 3]
    assert_exactly_once(server, {"s0": 1, "s1": 2, "s2": 3})


async def test_the_stream_client_reconnects_and_retries_with_the_same_key(server: ServerProcess) -> None:
    await register(server)
    # The handshake passes; the connection is cut when the publish's result comes back.
    async with DroppingProxy(server.port, drops=1, spare=1) as proxy, Stream(proxy.url, server.admin_token) as s:
        first = await s.publish(NS, "w0")
        second = await s.publish(NS, "w1")
    assert proxy.dropped == 1 and (first, second) == (1, 2)
    assert_exactly_once(server, {"w0": 1, "w1": 2})


async def test_a_server_killed_while_publishing_loses_nothing_and_stores_nothing_twice(
    server: ServerProcess,
) -> None:
    await register(server)
    answered: dict[str, int] = {}
    n = 400

    async def publish_all() -> None:
        async with Publisher(server.url, server.admin_token, deadline=60, timeout=5) as pub:
            for i in range(0, n, 4):
                batch = [f"k{j}" for j in range(i, i + 4)]
                for name, eid in zip(batch, await pub.publish_many(NS, batch), strict=True):
                    answered[name] = eid

    task = asyncio.create_task(publish_all())
    for mark in (n // 4, n // 2):
        while len(answered) < mark and not task.done():
            await asyncio.sleep(0.005)
        await asyncio.to_thread(server.restart, signal.SIGKILL)  # whatever was in flight
    await task
    assert len(answered) == n
    assert_exactly_once(server, answered)


async def test_the_spark_sinks_publisher_sends_a_lost_call_again_and_stores_nothing_twice(
    server: ServerProcess,
) -> None:
    """The ``tidings`` sink's executor side: each row's key is where it is (``row_key``), so
    the call it sends again after a lost answer, or a task attempt that publishes the
    partition again, stores each row once."""
    from tidings.core.wire import Event
    from tidings.pipeline._publish import Backoff, BrokerPublisher, Tally
    from tidings.pipeline.sink import row_key

    await register(server)

    def rows(partition: int) -> list[tuple[int, Event]]:
        return [(i, Event(namespace=NS, data={"Text": f"p{partition}r{i}"}, idempotencyKey=row_key("w1", partition, i)))
                for i in range(4)]

    async with DroppingProxy(server.port, drops=2) as proxy:
        def attempt() -> Tally:
            pub = BrokerPublisher(proxy.url, server.admin_token, backoff=Backoff(retries=5, initial_s=0.05))
            tally = Tally(0)
            try:
                pub.publish(rows(0), tally)
            finally:
                pub.close()
            return tally

        first = await asyncio.to_thread(attempt)
        again = await asyncio.to_thread(attempt)  # Spark runs the task again: the same rows, the same keys
    assert proxy.dropped == 2 and first.published == again.published == 4
    assert_exactly_once(server, {f"p0r{i}": i + 1 for i in range(4)})
