"""Publish a few events with the SDK.

    TIDINGS_URL=http://127.0.0.1:8072 TIDINGS_TOKEN=$(cat var/admin.token) python examples/publisher.py
"""

from __future__ import annotations

import asyncio
import os

from tidings.client import Publisher, Value

NAMESPACE = "com.example.orders"


async def main(url: str, token: str) -> list[int]:
    async with Publisher(url, token) as pub:
        await pub.register_publication(NAMESPACE)  # or join it, if it exists
        ids = [await pub.publish(NAMESPACE, {"order": n, "total": 9.5 * n}, headers={"shop": "north"})
               for n in range(1, 4)]
        # Plain Python is converted (int → Nat, float → Float, ...); a Value gives the exact type.
        ids.append(await pub.publish(NAMESPACE, {"order": 4, "total": Value("Int", 38)}))
    return ids


if __name__ == "__main__":
    for event_id in asyncio.run(main(os.environ["TIDINGS_URL"], os.environ["TIDINGS_TOKEN"])):
        print(event_id)
