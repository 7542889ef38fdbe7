"""Latency of the XMPP face: publish over HTTP -> an XEP-0021 subscriber's client (slixmpp).

Needs Prosody (Debian's ``prosody``) and the ``xmpp`` extra; skipped without them. The
Prosody and the client are the test suite's (``tests/xmpp_support.py``): a real server in
a temp dir on free ports, and a real client that answers each notification.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._harness import Server, post
from bench.live_plane import percentiles

NS = "bench.xmpp"


async def latency(rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    from tests.xmpp_support import COMPONENT, ENS, Client, Prosody, prosody_available

    if not prosody_available():
        raise ImportError("prosody", name="prosody")
    with tempfile.TemporaryDirectory(prefix="bench-xmpp-") as d:
        prosody = Prosody(Path(d) / "prosody")
        prosody.start()
        try:
            env = {f"TIDINGS_{k.upper()}": v for k, v in prosody.server_env().items()}
            with Server(Path(d) / "tidings", env=env) as srv:
                return await _run(srv, prosody, Client, COMPONENT, ENS, rate, seconds, warmup)
        finally:
            prosody.stop()


async def _run(srv: Server, prosody: Any, client_cls: Any, component: str, ens: str,
               rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"}
    client = await client_cls(prosody, "bob").start()
    try:
        async with aiohttp.ClientSession(headers=headers) as s:
            await post(s, srv.url, "icrc72_register_publication", f'[{{"namespace":"{NS}"}}]'.encode())
            deadline = time.monotonic() + 20
            while True:  # the component connects right after the server starts
                try:
                    await client.request(f"<subscribe xmlns='{ens}' jid='{component}/{NS}'><reliable/></subscribe>",
                                         timeout=2)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            n = int(rate * (seconds + warmup))
            start_ns = time.perf_counter_ns() + int(warmup * 1e9)
            tasks = []
            for i in range(n):
                body = f'[{{"namespace":"{NS}","data":{{"Nat":{time.perf_counter_ns()}}}}}]'.encode()
                tasks.append(asyncio.create_task(post(s, srv.url, "icrc72_publish", body)))
                await asyncio.sleep(max(0.0, (i + 1) / rate - (time.perf_counter_ns() - start_ns) / 1e9 - warmup))
            await asyncio.gather(*tasks)
            end = time.monotonic() + 10
            while len(client.ens) < n and time.monotonic() < end:
                await asyncio.sleep(0.05)
    finally:
        await client.close()
    lat_ms = []
    for (_, payload), at in zip(client.ens, client.ens_at, strict=True):
        t = json.loads(payload[0].text or "")["Nat"]
        if t >= start_ns:
            lat_ms.append((at - t) / 1e6)
    return {"rate": rate, "sent": n, **percentiles(lat_ms)}
