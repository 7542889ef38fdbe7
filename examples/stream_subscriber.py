"""Receive pushes over one WebSocket (the stream face, docs/streaming.md): no HTTP
endpoint of one's own, which suits a laptop or a process behind NAT.

    TIDINGS_URL=... TIDINGS_TOKEN=... python examples/stream_subscriber.py [COUNT]
"""

from __future__ import annotations

import asyncio
import os
import sys

from tidings.client import EventNotification, Stream, Subscriber, to_python

NAMESPACE = "com.example.orders"


async def main(url: str, token: str, count: int | None) -> None:
    done = asyncio.Event()
    seen = 0

    def handle(n: EventNotification) -> None:
        nonlocal seen
        print(f"{n.namespace} #{n.eventId}: {to_python(n.data)}", flush=True)
        seen += 1
        if count is not None and seen >= count:
            done.set()

    registry = Subscriber(lambda n: None, url=url, token=token)  # only to register
    # A stream: endpoint is pushed over the connection that listens to it; with a lease
    # the service removes it by itself once nobody has listened for that long.
    sub_id = await registry.subscribe(NAMESPACE, "stream:example",
                                      config={"tidings:subscription:leaseMs": 30_000})
    try:
        async with Stream(url, token, handler=handle) as stream:
            await stream.listen([sub_id])
            print(f"listening to {sub_id}", flush=True)
            await done.wait()
    finally:
        await registry.unsubscribe(sub_id)
        await registry.close()


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else None
    asyncio.run(main(os.environ["TIDINGS_URL"], os.environ["TIDINGS_TOKEN"], n))
