"""Support for the interchain tests: a DLT-Adapter-compatible test network, a consumer
endpoint that records notifications, the distributor as a real process, and events.

The test network speaks the DLT Adapter API (REFERENCE §4) the way a DOME DLT adapter
does: ``publishEvent`` appends to its ledger and pushes a notification carrying its
``network`` name to every matching subscription; ``events`` lists the ledger; it can be
taken down (its HTTP server stopped, the ledger kept) and brought back on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidings.core.interchain import DltPublish, DltSubscribe, matches

from .conftest import Endpoint, free_port

_counter = itertools.count(1)


def event(n: int | str, event_type: str = "ProductOffering", metadata: list[str] | None = None) -> dict[str, Any]:
    """A valid publish body whose global id is ``n``."""
    return {
        "eventType": event_type, "iss": "0xissuer", "entityId": "0x" + hashlib.sha256(f"{n}".encode()).hexdigest(),
        "previousEntityHash": "0x" + "0" * 64,
        "dataLocation": f"https://market.example/api/v1/entities/urn:{n}?hl={n}",
        "relevantMetadata": metadata if metadata is not None else ["sbx"],
    }


class DltTestNetwork:
    def __init__(self, name: str) -> None:
        self.name = name
        self.ledger: list[dict[str, Any]] = []
        self.subs: list[DltSubscribe] = []
        self.endpoint = Endpoint(self._app())
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return self.endpoint.url.rstrip("/")

    async def start(self) -> None:
        self._http = self._http or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        await self.endpoint.start()

    async def stop(self) -> None:
        """Take the network down: it answers nothing; its ledger and subscriptions stay."""
        await self.endpoint.stop()

    async def close(self) -> None:
        await self.stop()
        for t in list(self._tasks):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._http is not None:
            await self._http.close()

    def gids(self) -> list[str]:
        return [e["dataLocation"].rsplit("hl=", 1)[1] for e in self.ledger]

    def _app(self) -> Starlette:
        async def publish(request: Request) -> Response:
            body = msgspec.json.decode(await request.body(), type=DltPublish)
            note = {
                "id": next(_counter), "timestamp": int(time.time() * 1000), "eventType": body.eventType,
                "dataLocation": body.dataLocation, "relevantMetadata": body.relevantMetadata,
                "entityIdHash": body.entityId, "previousEntityHash": body.previousEntityHash,
                "publisherAddress": body.iss, "network": self.name,
            }
            self.ledger.append(note)
            for sub in self.subs:
                if matches(sub, body.eventType, body.relevantMetadata):
                    t = asyncio.create_task(self._push(sub.notificationEndpoint, note))
                    self._tasks.add(t)
                    t.add_done_callback(self._tasks.discard)
            return JSONResponse({"id": note["id"]}, 201)

        async def subscribe(request: Request) -> Response:
            sub = msgspec.json.decode(await request.body(), type=DltSubscribe)
            if sub not in self.subs:
                self.subs.append(sub)
            return Response(status_code=201)

        async def events(request: Request) -> Response:
            return JSONResponse(self.ledger)

        async def health(request: Request) -> Response:
            return JSONResponse({"status": "UP"})

        return Starlette(routes=[
            Route("/api/v1/publishEvent", publish, methods=["POST"]),
            Route("/api/v1/subscribe", subscribe, methods=["POST"]),
            Route("/api/v1/events", events, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ])

    async def _push(self, url: str, note: dict[str, Any]) -> None:
        # Like a DLT adapter: try the subscriber a few times, then give up.
        assert self._http is not None
        for _ in range(50):
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with self._http.post(url, json=note) as resp:
                    if resp.status < 300:
                        return
            await asyncio.sleep(0.1)


class Consumer:
    """A Desmos stand-in: an HTTP endpoint recording every notification it receives."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.endpoint = Endpoint(self)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        self.got.append(json.loads(body))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    @property
    def url(self) -> str:
        return self.endpoint.url

    def gids(self) -> list[str]:
        return [n["dataLocation"].rsplit("hl=", 1)[1] for n in self.got]


class DistributorProcess:
    """``tidings distributor serve`` as a real process on a free port, restartable."""

    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        self.port = free_port()
        self.dir = workdir
        self.config_path = workdir / "distributor.json"
        self.config_path.write_text(json.dumps({"port": self.port, **config}))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: dict[str, str] | None = None) -> None:
        self._log = open(self.dir / "distributor.log", "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidings", "distributor", "serve", "--config", str(self.config_path),
             "--log-level", "debug"],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"distributor exited: {self.log()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            time.sleep(0.05)
        raise RuntimeError("distributor did not start in 20 s")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self._log.close()

    def log(self) -> str:
        return (self.dir / "distributor.log").read_text()
