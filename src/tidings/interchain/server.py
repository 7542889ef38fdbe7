"""Running the distributor: state, networks, the HTTP server, the replication loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import uvicorn

from ..http1 import Http1
from ..outbound import Outbound
from .api import make_app
from .config import DistributorConfig
from .distributor import Distributor

__all__ = ["serve"]

log = logging.getLogger("tidings.interchain")


async def serve(config: DistributorConfig) -> None:
    """Serve until SIGINT/SIGTERM. The HTTP server starts first, so the push endpoints
    answer before any network is asked to push to them."""
    state = config.make_state()
    await state.open()
    networks = config.make_networks(state)
    try:
        for n in networks:
            await n.open()
        distributor = Distributor(networks, state, outbound=Outbound(
            config.address_policy(), connect_timeout_s=config.connect_timeout_s))
        await distributor.load()
        app = make_app(distributor)
        server = uvicorn.Server(uvicorn.Config(
            app, host=config.host, port=config.port, log_level="warning", lifespan="off",
            timeout_graceful_shutdown=5, http=Http1,  # what the HTTP layer refuses: the same JSON shape
        ))
        serving = asyncio.create_task(server.serve())
        while not server.started:
            if serving.done():
                await serving  # it failed to start (port taken, ...): raise why
                return
            await asyncio.sleep(0.02)
        print(f"tidings distributor listening on http://{config.host}:{config.port} "
              f"({len(networks)} networks, state in {'Redis' if config.redis else config.sqlite})", flush=True)
        running = asyncio.create_task(distributor.run())
        # Should replication stop for good (a fault), stop serving too rather than accept
        # publications nothing would send.
        running.add_done_callback(lambda _: setattr(server, "should_exit", True))
        try:
            await serving
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
    finally:
        for n in networks:
            with contextlib.suppress(Exception):
                await n.close()
        await state.close()
