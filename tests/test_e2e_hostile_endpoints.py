"""A thousand subscriptions pointing at endpoints that never accept, never answer, or
answer without end must not stop publishing nor another subscriber's deliveries, and must
not grow the broker's file descriptors or memory without bound."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, admin_api, eventually, read_body, respond

pytestmark = pytest.mark.e2e

HOSTILE = 1000
NS = "com.example.hostile"


class Hostile:
    """Three adversarial HTTP endpoints on loopback."""

    def __init__(self) -> None:
        self.servers: list[asyncio.AbstractServer] = []
        self.black_hole = socket.socket()
        self.urls: list[str] = []
        self.writers: list[asyncio.StreamWriter] = []  # closed at the end: no socket left to the GC

    async def start(self) -> None:
        # Never accepts: connections pile up in a full backlog.
        self.black_hole.bind(("127.0.0.1", 0))
        self.black_hole.listen(1)
        self.urls.append(f"http://127.0.0.1:{self.black_hole.getsockname()[1]}/")

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)
            with contextlib.suppress(Exception):
                await reader.read(65536)
                await asyncio.sleep(3600)  # reads the request, never answers

        async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)
            with contextlib.suppress(Exception):
                await reader.read(65536)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                chunk = b"x" * 65536
                while True:  # gigabytes, as fast as the broker reads
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()

        for handler in (silent, endless):
            srv = await asyncio.start_server(handler, "127.0.0.1", 0)
            self.servers.append(srv)
            self.urls.append(f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/")

    async def stop(self) -> None:
        self.black_hole.close()
        for srv in self.servers:
            srv.close()
        for w in self.writers:
            w.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(w.wait_closed(), 1)
        for srv in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.wait_closed(), 2)


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture
async def hostile() -> AsyncIterator[Hostile]:
    h = Hostile()
    await h.start()
    yield h
    await h.stop()


async def test_a_thousand_hostile_subscribers_hurt_nobody_else(
    server_factory: Callable[..., ServerProcess], hostile: Hostile, endpoints: Any
) -> None:
    srv = server_factory(push_timeout_s="1", retry_initial_s="0.2", retry_max_s="1", outbound_per_host="8")
    assert srv.proc is not None
    pid = srv.proc.pid
    got: list[int] = []

    async def healthy(scope: Any, receive: Any, send: Any) -> None:
        got.extend(n["eventId"] for n in json.loads(await read_body(receive)))
        await respond(send)

    ep = await endpoints(healthy)
    async with aiohttp.ClientSession() as http:
        await admin_api(http, srv, "icrc72_register_publication", [{"namespace": NS}])
        regs = [{"namespace": NS, "endpoint": hostile.urls[i % 3]} for i in range(HOSTILE)]
        out = await admin_api(http, srv, "icrc72_register_subscription", regs)
        assert all("Ok" in r for r in out)
        await admin_api(http, srv, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}])
        base_fds = fds(pid)
        peak_fds, peak_rss = base_fds, rss_mb(pid)
        for round_ in range(5):
            results = await admin_api(http, srv, "icrc72_publish",
                                      [{"namespace": NS, "data": {"Nat": round_ * 10 + i}} for i in range(10)])
            assert all("Ok" in r for r in results)  # publishing never waits for subscribers
            await asyncio.sleep(1.5)
            peak_fds, peak_rss = max(peak_fds, fds(pid)), max(peak_rss, rss_mb(pid))
        # The healthy subscriber got everything, promptly, while the hostile ones churned.
        await eventually(lambda: sorted(set(got)) == list(range(1, 51)), timeout=15)
        # Connections to each hostile host are bounded by outbound_per_host (8 here).
        assert peak_fds - base_fds < 3 * 8 + 64, (base_fds, peak_fds)
        assert peak_rss < 400, peak_rss
        status = await admin_api(http, srv, "tidings_whoami", None)
        assert status["name"] == "admin"
