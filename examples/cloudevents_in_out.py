"""CloudEvents in and out (docs/cloudevents.md): publish a CloudEvent over HTTP in
structured mode, and receive pushes as CloudEvents at an endpoint of one's own.

    TIDINGS_URL=... TIDINGS_TOKEN=... python examples/cloudevents_in_out.py [PORT]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tidings.client import Publisher, Subscriber

NAMESPACE = "com.example.cloudevents"


async def main(url: str, token: str, port: int) -> dict[str, Any]:
    received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def push(request: Request) -> Response:  # structured mode: one JSON CloudEvent
        body = json.loads(await request.body())
        for event in body if isinstance(body, list) else [body]:  # a batch is a JSON array
            await received.put(event)
        return Response(status_code=204)

    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/ce", push, methods=["POST"])]),
                                           host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    async with Publisher(url, token) as pub:
        await pub.register_publication(NAMESPACE)
    registry = Subscriber(lambda n: None, url=url, token=token)
    sub_id = await registry.subscribe(NAMESPACE, f"http://127.0.0.1:{port}/ce",
                                      config={"tidings:subscription:cloudevents": "structured"})
    try:
        event = {"specversion": "1.0", "id": "order-1", "source": "/shop", "type": "com.example.order.created",
                 "datacontenttype": "application/json", "data": {"order": 1, "total": 17}}
        async with aiohttp.ClientSession() as http, http.post(
            f"{url}/v1/cloudevents/{NAMESPACE}", data=json.dumps(event),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/cloudevents+json"},
        ) as resp:
            print(f"published: {resp.status} {await resp.text()}", flush=True)
        out = await asyncio.wait_for(received.get(), 30)
        print(f"pushed back: {out['type']} {out['id']} from {out['source']}: {out['data']}", flush=True)
        return out
    finally:
        await registry.unsubscribe(sub_id)
        await registry.close()
        server.should_exit = True
        await serving


if __name__ == "__main__":
    asyncio.run(main(os.environ["TIDINGS_URL"], os.environ["TIDINGS_TOKEN"], int(sys.argv[1]) if len(sys.argv) > 1
                     else 9001))
