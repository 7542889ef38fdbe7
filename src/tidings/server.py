"""Running the service: the broker on the embedded store behind uvicorn."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from typing import Any

import uvicorn

from .api import create_app
from .broker import Broker
from .errors import ConfigError
from .settings import Settings
from .store import SQLiteStore

__all__ = ["serve"]


def serve(settings: Settings) -> int:
    """Run until SIGINT or SIGTERM; return the exit status."""
    _private_data_dir(settings)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(_serve(settings))
    return uvloop.run(_serve(settings))


def _private_data_dir(settings: Settings) -> None:
    """Everything the server writes is its owner's alone: the data folder 0700 (tightened
    if an older version left it looser), every file created 0600 (docs/security.md)."""
    os.umask(0o077)
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if settings.data_dir.stat().st_mode & 0o077:
        os.chmod(settings.data_dir, 0o700)
    token = settings.data_dir / "admin.token"
    if token.exists() and token.stat().st_mode & 0o077:
        os.chmod(token, 0o600)


def _tune_gc() -> None:
    """Collect young objects less often, and never rescan what startup left behind.

    A 100-event publish keeps over a thousand containers (the decoded ICRC-16 values)
    alive until it is answered, so the default threshold of 700 ran a collection on
    every request, each traversing the requests in flight, and a full one every hundred:
    about a fifth of the server's CPU under load (BENCHMARKS.md, "What the profile
    showed"). Nothing on the hot path makes reference cycles, so a collection finds
    almost nothing; it still runs, just rarely, and most young objects are gone by then.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 20, 100)


async def _serve(settings: Settings) -> int:
    broker = Broker(settings, SQLiteStore(settings.db_path))
    async with broker:
        _tune_gc()
        token_file = settings.data_dir / "admin.token"
        created = await broker.ensure_admin(token_file)
        app = create_app(broker, manage_broker=False)
        config = uvicorn.Config(
            app, host=settings.host, port=settings.port, http="httptools", lifespan="off",
            log_level="warning", access_log=False, server_header=False,
            # The console's event streams end when they see should_exit (within a second);
            # this bounds any other connection that would hold the shutdown up.
            timeout_graceful_shutdown=5,
            # The stream face (docs/streaming.md): the sans-I/O protocol stops reading a
            # socket while the app does not take its messages (back-pressure); a message
            # past the limit closes the connection with 1009.
            ws="websockets-sansio", ws_max_size=settings.stream_max_frame_bytes, ws_per_message_deflate=False,
        )
        server = uvicorn.Server(config)
        app.state.stopping = lambda: server.should_exit  # the console's event streams end
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if task.done():
            await task
            print(f"tidings: could not listen on {settings.host}:{settings.port}", file=sys.stderr)
            return 1
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        print(f"tidings {settings.db_path} listening on http://{host}:{port}", flush=True)
        print(f"  OpenAPI: http://{host}:{port}/openapi.json", flush=True)
        if created:
            print(f"  admin token written to {token_file} (created now)", flush=True)
        else:
            print(f"  admin token: see {token_file}", flush=True)
        print("  more principals: tidings principal create NAME  (prints the token)", flush=True)
        xmpp = await _start_xmpp(broker, settings)
        try:
            await task
        finally:
            if xmpp is not None:
                await xmpp.stop()
    return 0


async def _start_xmpp(broker: Broker, settings: Settings) -> Any:
    """The XMPP component (docs/xmpp.md), when ``TIDINGS_XMPP_COMPONENT`` names one."""
    if not settings.xmpp_component:
        return None
    try:
        from .xmpp import XmppFace
    except ImportError:
        raise ConfigError(
            "TIDINGS_XMPP_COMPONENT is set but slixmpp is missing: pip install 'tidings[xmpp]'"
        ) from None
    face = XmppFace(broker, settings)
    await face.start()
    print(f"  XMPP component {settings.xmpp_component} -> {settings.xmpp_host}:{settings.xmpp_port}", flush=True)
    return face
