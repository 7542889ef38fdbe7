"""The web console's read routes with many subscriptions: how long a page, a search and
a deep page take the server, for an admin and for a principal who owns a few.

A real ``tidings serve`` process holds ``--subs`` subscriptions over 100 publications
(the admin's, and ``--own`` of them a non-admin's); each route is called ``--calls``
times in sequence and the latency percentiles printed. Figures are printed, never asserted.

Run: ``.venv/bin/python -m bench.console [--subs 10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._harness import Server, post

HOOK = "http://127.0.0.1:9/"  # never called: nothing is published


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))] * 1000, 2)


async def _time(http: aiohttp.ClientSession, url: str, calls: int) -> dict[str, Any]:
    took = []
    body: Any = None
    for _ in range(calls):
        t0 = time.perf_counter()
        async with http.get(url) as r:
            body = await r.json()
            if r.status != 200:
                raise RuntimeError(f"{url}: {r.status} {body}")
        took.append(time.perf_counter() - t0)
    return {"p50_ms": _pct(took, 0.5), "p99_ms": _pct(took, 0.99), "rows": len(body["items"]), "total": body["total"]}


async def run(subs: int, own: int, calls: int) -> dict[str, Any]:
    env = {"TIDINGS_MAX_SUBSCRIPTIONS_PER_PRINCIPAL": str(subs)}
    with tempfile.TemporaryDirectory() as tmp, Server(Path(tmp), env) as s:
        admin = aiohttp.ClientSession(headers={"authorization": f"Bearer {s.token}"})
        async with admin:
            await post(admin, s.url, "icrc72_register_publication",
                       json.dumps([{"namespace": f"bench.console.n{i}"} for i in range(100)]).encode())
            created = json.loads(await post(admin, s.url, "tidings_create_principal", b'{"name": "owner"}'))
            for lo in range(0, subs - own, 2000):
                batch = [{"namespace": f"bench.console.n{i % 100}", "endpoint": HOOK}
                         for i in range(lo, min(subs - own, lo + 2000))]
                await post(admin, s.url, "icrc72_register_subscription", json.dumps(batch).encode())
            async with aiohttp.ClientSession(headers={"authorization": f"Bearer {created['token']}"}) as owner:
                await post(owner, s.url, "icrc72_register_subscription", json.dumps(
                    [{"namespace": f"bench.console.n{i % 100}", "endpoint": HOOK} for i in range(own)]).encode())
                base = f"{s.url}/console/api/subscriptions"
                out = {
                    "subscriptions": subs,
                    "admin_first_page": await _time(admin, f"{base}?take=20", calls),
                    "admin_deep_page": await _time(admin, f"{base}?take=20&after={subs - 100}", calls),
                    "admin_search_namespace": await _time(admin, f"{base}?take=20&q=n42", calls),
                    "admin_search_no_match": await _time(admin, f"{base}?take=20&q=nothing", calls),
                    "owner_first_page": await _time(owner, f"{base}?take=20", calls),
                    "publications_page": await _time(admin, f"{s.url}/console/api/publications?take=25", calls),
                }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__.splitlines()[0])
    ap.add_argument("--subs", type=int, default=10_000)
    ap.add_argument("--own", type=int, default=100, help="of them, the non-admin principal's")
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(run(a.subs, a.own, a.calls)), indent=2))


if __name__ == "__main__":
    main()
