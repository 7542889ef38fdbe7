"""A front's pooled connection that the broker closed (docs/operations.md, "Overload and a
stalling store"): a publish that fails on it before any answer is sent once more on a new
connection, answered as if nothing happened, and said in the log once per episode.

The broker here is a small HTTP server on the Unix socket a real front process's app is
given: it answers each connection's first request and closes a connection, unanswered,
when a publish comes on it after that (the broker's close of an idle connection meeting
the front's reuse of it: the race the ordered keep-alive timeouts make rare)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tidings.front.app import FrontConfig, front_app

from .front_support import serving

OK = b'[{"Ok":1}]'


class ClosingBroker:
    def __init__(self) -> None:
        self.connections = 0
        self.answered = 0
        self.closed_unanswered = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next((int(v) for k, _, v in (x.partition(":") for x in lines[1:])
                               if k.strip().lower() == "content-length"), 0)
                await reader.readexactly(length)
                if "publish" in path and served:
                    self.closed_unanswered += 1
                    return  # closed with nothing written: the front must send it again
                body = OK if "publish" in path else b""
                status = b"200 OK" if body else b"204 No Content"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
                served += 1
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[tuple[str, ClosingBroker]]:
    broker = ClosingBroker()
    sock = tmp_path / "broker.sock"
    server = await asyncio.start_unix_server(broker.serve, path=str(sock))
    config = FrontConfig(str(sock), "s3cret", max_body_bytes=1 << 20, max_batch_items=100,
                         max_frame_bytes=1 << 20)
    try:
        async with serving(front_app(config)) as url:
            yield url, broker
    finally:
        server.close()
        await server.wait_closed()


async def test_a_publish_on_a_connection_the_broker_closed_is_sent_once_more(
    front: tuple[str, ClosingBroker], caplog: pytest.LogCaptureFixture,
) -> None:
    url, broker = front
    body = json.dumps([{"namespace": "front.retry", "data": {"Nat": 1}}])
    with caplog.at_level(logging.WARNING, "tidings.front"):
        # The client's own connections are not kept: nothing of this test outlives it.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            for _ in range(4):
                async with http.post(f"{url}/v1/icrc72_publish", data=body,
                                     headers={"authorization": "Bearer t"}) as r:
                    assert (r.status, await r.read()) == (200, OK)
    # The first went on a new connection; each later one met the close, then went on a new one.
    assert broker.closed_unanswered == 3 and broker.connections >= 4
    said = [r.getMessage() for r in caplog.records if "sent once more" in r.getMessage()]
    assert len(said) == 1, said  # once for the episode, with the count so far
