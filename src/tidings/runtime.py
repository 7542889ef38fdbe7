"""Process tuning shared by the broker and its front processes."""

from __future__ import annotations

import gc

__all__ = ["tune_gc"]


def tune_gc() -> None:
    """Collect young objects less often, and never rescan what startup left behind.

    A 100-event publish keeps over a thousand containers (the decoded ICRC-16 values)
    alive until it is answered, so the default threshold of 700 ran a collection on
    every request, each traversing the requests in flight, and a full one every hundred:
    about a fifth of the server's CPU under load
    (docs/benchmarks/history/2026-11-23-publish-and-fanout-profile.md). Nothing on the hot path
    makes reference cycles, so a collection finds
    almost nothing; it still runs, just rarely, and most young objects are gone by then.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 20, 100)
