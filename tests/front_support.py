"""An ASGI app (a front's, say) served by uvicorn on a free port of 127.0.0.1 for a test."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

import uvicorn

from .conftest import free_port


@contextlib.asynccontextmanager
async def serving(app: Any, lifespan: Literal["on", "off"] = "on") -> AsyncIterator[str]:
    """``app`` served until the block ends: its URL."""
    port = free_port()
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan))
    task = asyncio.create_task(web.serve())
    while not web.started and not task.done():
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        web.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
