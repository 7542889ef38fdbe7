"""A subscriber mounted in a Starlette app: the service pushes to ``POST /events``.

    TIDINGS_URL=... TIDINGS_TOKEN=... python examples/subscriber_app.py [PORT] [COUNT]

It subscribes once the app listens, prints each event, and after COUNT events (default:
never) removes its subscription and stops.
"""

from __future__ import annotations

import asyncio
import os
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from tidings.client import EventNotification, Subscriber, to_python

NAMESPACE = "com.example.orders"


async def main(url: str, token: str, port: int, count: int | None) -> None:
    done = asyncio.Event()
    seen = 0

    async def handle(n: EventNotification) -> None:  # an exception here: the push is sent again
        nonlocal seen
        print(f"{n.namespace} #{n.eventId}: {to_python(n.data)}", flush=True)
        seen += 1
        if count is not None and seen >= count:
            done.set()

    events = Subscriber(handle, url=url, token=token)
    app = Starlette(routes=[
        Route("/health", lambda request: PlainTextResponse("ok")),
        Mount("/events", app=events),  # the Subscriber is an ASGI app
    ])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    sub_id = await events.subscribe(NAMESPACE, f"http://127.0.0.1:{port}/events/")
    print(f"subscribed {sub_id}", flush=True)
    try:
        await done.wait()
    finally:
        await events.unsubscribe(sub_id)
        await events.close()
        server.should_exit = True
        await serving


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    count = int(sys.argv[2]) if len(sys.argv) > 2 else None
    asyncio.run(main(os.environ["TIDINGS_URL"], os.environ["TIDINGS_TOKEN"], port, count))
