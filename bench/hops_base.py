"""What both halves of ``bench/hops.py`` share: the hops' names, the server's extra
environment, the load itself, and the percentile and figure format."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench._harness import Server
from bench.live_plane import paced_publishes
from bench.stream import paced_stream_publishes
from tidings.client import EventNotification

HOPS = ("client -> server", "parse and check", "front -> broker", "auth, rights, schemas", "commit", "route", "push",
        "handler")
END = "end to end"
ANSWERED = "push answered (handler -> the broker has the answer)"

SERVER_ENV: dict[str, str] = {}
"""More environment for every server of the run (``--server-env K=V``: ``TIDINGS_COMMIT_FSYNC=false``)."""


async def load(srv: Server, rate: float, seconds: float, stream: bool,
               handle: Callable[[EventNotification], None]) -> None:
    """Single-event publishes at ``rate`` for ``seconds`` (at least 20), every one its own task."""
    n = max(20, int(rate * seconds))
    if stream:
        await paced_stream_publishes(srv, rate, n, handle, time.time_ns)
    else:
        await paced_publishes(srv, rate, n, handle, time.time_ns)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def fmt_ms(ms: float) -> str:
    return f"{ms:.3f}" if abs(ms) < 1 else f"{ms:.2f}" if abs(ms) < 10 else f"{ms:.1f}"
