"""Ask for past events again (ICRC-77) and receive them over the stream face.

    TIDINGS_URL=... TIDINGS_TOKEN=... python examples/replay.py [FROM]
"""

from __future__ import annotations

import asyncio
import os
import sys

from tidings.client import EventNotification, Replays, Stream, Subscriber, to_python

NAMESPACE = "com.example.orders"


async def main(url: str, token: str, start: int) -> list[int]:
    got: list[int] = []

    def handle(n: EventNotification) -> None:
        got.append(n.eventId)
        print(f"replayed #{n.eventId}: {to_python(n.data)}", flush=True)

    registry = Subscriber(lambda n: None, url=url, token=token)
    sub_id = await registry.subscribe(NAMESPACE, "stream:replay", config={"tidings:subscription:leaseMs": 30_000})
    try:
        async with Stream(url, token, handler=handle) as stream, Replays(url, token) as replays:
            await stream.listen([sub_id])
            replay_id = await replays.register(NAMESPACE, start, None, subscription=sub_id)  # up to the last event
            while True:  # pending → running → completed(n) | canceled(n) | errored(text)
                status = await replays.status(replay_id)
                state = status.status if status is not None else None
                if state is not None and isinstance(state.completed, int):
                    break
                if state is not None and (isinstance(state.canceled, int) or isinstance(state.errored, str)):
                    raise RuntimeError(f"replay {replay_id} ended: {state}")
                await asyncio.sleep(0.1)
            print(f"replay {replay_id}: completed, {state.completed} sent", flush=True)
    finally:
        await registry.unsubscribe(sub_id)
        await registry.close()
    return got


if __name__ == "__main__":
    start = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    asyncio.run(main(os.environ["TIDINGS_URL"], os.environ["TIDINGS_TOKEN"], start))
