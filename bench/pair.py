"""Two builds of tidings side by side: publish throughput and server CPU, alternated.

Starts ``tidings serve`` twice on fresh data folders: once from another tree's ``src``
folder (``--old-src``, e.g. ``git archive <commit> src | tar -x -C /tmp/old``), once from
this checkout. Then ``--slices`` slices of ``--seconds`` each, alternating which server
goes first, of ``--clients`` publishers posting ``--batch`` events per request. A host
whose speed drifts between two runs moves both builds alike. Prints each build's events/s
and server CPU per event (the broker and its fronts, psutil), and the ratio new/old.

Run: ``.venv/bin/python -m bench.pair --old-src /tmp/old/src [--batch 1] [--slices 6]
[--seconds 2] [--env TIDINGS_WORKERS=1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import psutil

from bench._harness import Server
from bench.live_plane import throughput


def _server_cpu(pid: int) -> float:
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:  # a front that has exited counts for nothing
            continue
        total += t.user + t.system
    return total


async def run(old_src: str, batch: int, slices: int, seconds: float, clients: int, env: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2, \
            Server(Path(d1), {"PYTHONPATH": old_src, **env}) as old, Server(Path(d2), env) as new:
        for srv in (old, new):  # warm: the token, the publication, the pool
            await throughput(srv, clients, batch, 1.0)
        acc = {"old": [0.0, 0.0, 0.0], "new": [0.0, 0.0, 0.0]}
        for r in range(slices):
            order = (("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old))
            for name, srv in order:
                assert srv.proc is not None
                c0 = _server_cpu(srv.proc.pid)
                got = await throughput(srv, clients, batch, seconds)
                a = acc[name]
                a[0] += got["events"]
                a[1] += got["seconds"]
                a[2] += _server_cpu(srv.proc.pid) - c0
        rate = {k: v[0] / v[1] for k, v in acc.items()}
        for k, (n, _t, cpu) in acc.items():
            print(f"{k}: {rate[k]:,.0f} events/s, server {1e6 * cpu / n:.1f} µs CPU per event")
        print(f"new/old {rate['new'] / rate['old']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-src", required=True, help="the other build's src folder")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--slices", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="more environment for both servers")
    a = ap.parse_args()
    env = dict(kv.split("=", 1) for kv in a.env)
    asyncio.run(run(a.old_src, a.batch, a.slices, a.seconds, a.clients, env))


if __name__ == "__main__":
    main()
