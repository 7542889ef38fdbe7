"""A TCP proxy the fault schedule controls: put between a broadcaster and PostgreSQL, or
in front of a broadcaster for its peers, it cuts the link as a partition does.

Cut, every connection through it stays open but carries nothing either way, and new ones
are accepted and go nowhere: what a member on the far side of a partition sees (no
reset, no answer, until its own timeouts fire). Healed, the silent connections are
closed (as the kernel would after its retransmissions give up) and new ones pass again.

``delay_s`` adds that much latency each way to every chunk it forwards (not a bandwidth
cap: chunks in flight overlap, in order), what a database a network away adds
(``bench.pg_latency``). ``turns`` counts the round trips clients start: a chunk sent
upstream on a connection whose last traffic went downstream (or none yet) begins one,
however many statements it carries (pipelined ones share it).
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["Proxy"]


class Proxy:
    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1", delay_s: float = 0.0) -> None:
        self.target = (target_host, target_port)
        self.delay_s = delay_s
        self.turns = 0
        """Round trips begun by clients, over every connection (see the module's docstring)."""
        self.waiting = 0
        """Connections whose client waits for an answer now."""
        self.most_waiting = 0
        """The most connections that waited for an answer at once (reset it to measure)."""
        self.port = 0
        self.cut = False
        self._server: asyncio.base_events.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, port: int = 0) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def partition(self) -> None:
        self.cut = True

    def heal(self) -> None:
        """Pass traffic again; the connections that were silenced are closed."""
        self.cut = False
        for a, b in list(self._links):
            for w in (a, b):
                if w is not None:
                    w.close()
        self._links.clear()

    def retarget(self, port: int) -> None:
        """Send new connections to another port (a failover to a standby); open ones close."""
        self.target = (self.target[0], port)
        self.heal()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.heal()
        for t in list(self._tasks):
            t.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            link: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
            self._links.add(link)
            await self._drain_silently(reader)
            return
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        link = (writer, up_w)
        self._links.add(link)
        last = ["down"]  # which way this connection's last chunk went
        tasks = [asyncio.create_task(self._pipe(reader, up_w, link, last, "up")),
                 asyncio.create_task(self._pipe(up_r, writer, link, last, "down"))]
        for t in tasks:
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        await asyncio.gather(*tasks, return_exceptions=True)
        self._links.discard(link)
        for w in (writer, up_w):
            w.close()

    async def _drain_silently(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass

    async def _pipe(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: object, last: list[str], way: str
    ) -> None:
        if self.delay_s > 0:
            await self._pipe_delayed(src, dst, link, last, way)
            return
        with contextlib.suppress(Exception):
            while True:
                data = await src.read(65536)
                if not data:
                    break
                if self.cut or link not in self._links:
                    continue  # a partition: what is sent is lost
                self._count(last, way)
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(Exception):
            dst.close()

    def _count(self, last: list[str], way: str) -> None:
        if way == "up" and last[0] == "down":
            self.turns += 1
            self.waiting += 1
            self.most_waiting = max(self.most_waiting, self.waiting)
        elif way == "down" and last[0] == "up":
            self.waiting -= 1
        last[0] = way

    async def _pipe_delayed(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: object, last: list[str], way: str
    ) -> None:
        """Each chunk is written ``delay_s`` after it was read; reading goes on meanwhile,
        so the delay is latency, never a cap on throughput."""
        loop = asyncio.get_running_loop()
        flight: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def deliver() -> None:
            with contextlib.suppress(Exception):
                while (item := await flight.get()) is not None:
                    due, data = item
                    if (wait := due - loop.time()) > 0:
                        await asyncio.sleep(wait)
                    if self.cut or link not in self._links:
                        continue
                    self._count(last, way)
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        sender = asyncio.create_task(deliver())
        try:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    if not (self.cut or link not in self._links):
                        flight.put_nowait((loop.time() + self.delay_s, data))
            flight.put_nowait(None)
            await sender
        finally:
            sender.cancel()
