"""What CloudEvents add per event: parsing a request in each HTTP mode, and formatting a push.

    .venv/bin/python bench/cloudevents_cost.py [--seconds 2]

Measures ``core.cloudevents.from_http`` (the check and mapping a publish adds before the
path ``icrc72_publish`` takes) and ``core.cloudevents_push.push`` (what a push in
CloudEvents mode costs instead of the JSON array), on one core, and how long a batch of
100,000 events takes to be refused. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import msgspec

from tidings.core import cloudevents, cloudevents_push


def rate(seconds: float, fn: Callable[[], int]) -> float:
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        n += fn()
    return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    s = ap.parse_args().seconds
    event = {"specversion": "1.0", "source": "/shop", "type": "com.example.order.created",
             "time": "2026-11-27T08:00:00Z", "region": "eu", "data": {"total": 17, "items": ["a", "b"], "note": None}}
    batch = json.dumps([{**event, "id": str(i)} for i in range(1000)]).encode()
    ct = [(b"content-type", cloudevents.BATCH.encode())]
    one = json.dumps({**event, "id": "1"}).encode()
    headers = [(b"ce-" + k.encode(), v.encode()) for k, v in {**event, "id": "1"}.items() if k != "data"]
    body = json.dumps(event["data"]).encode()
    (e,) = cloudevents.from_http("ns", cloudevents.STRUCTURED, [], one, max_events=1)
    note = cloudevents_push.Note(5, 1, "ns", time.time_ns(), msgspec.json.encode(e.data),
                                 msgspec.json.encode(e.headers))

    def parse(content_type: str, raw: list[tuple[bytes, bytes]], payload: bytes) -> Callable[[], int]:
        return lambda: len(cloudevents.from_http("ns", content_type, raw, payload, max_events=10_000))

    def push(n: int, mode: str) -> Callable[[], int]:
        notes = [note] * n
        return lambda: len(notes) + 0 * len(cloudevents_push.push(notes, mode)[0])

    for label, fn, unit in [
        ("parse, batched mode (1,000 a request)", parse(cloudevents.BATCH, ct, batch), "events/s"),
        ("parse, structured mode", parse(cloudevents.STRUCTURED, [], one), "events/s"),
        ("parse, binary mode", parse("application/json", headers, body), "events/s"),
        ("push, binary mode", push(1, "binary"), "notifications/s"),
        ("push, structured mode", push(1, "structured"), "notifications/s"),
        ("push, batched mode (100 a push)", push(100, "binary"), "notifications/s"),
    ]:
        print(f"{label}: {rate(s, fn):,.0f} {unit}")
    big = json.dumps([{**event, "id": str(i)} for i in range(100_000)]).encode()
    start = time.perf_counter()
    try:
        cloudevents.from_http("ns", cloudevents.BATCH, ct, big, max_events=10_000)
    except cloudevents.CloudEventError:
        pass
    print(f"a batch of 100,000 events ({len(big):,} bytes) refused in {time.perf_counter() - start:.3f} s")


if __name__ == "__main__":
    main()
