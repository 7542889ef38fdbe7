"""The CLI's parts without a server (the fast loop's share; the end-to-end tests are in
test_cli_commands.py, test_cli_hostile.py and test_cli_profiles.py)."""

from __future__ import annotations

import argparse
import asyncio
import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings._cli_api import explain, status_of
from tidings._cli_ls import _before, _pages
from tidings._cli_publish import _lines, _next_batch
from tidings._cli_tail import _skip, _Tail
from tidings.client import ApiResponseError, EventNotification, ItemError, RetryLater, TransportError


def args(**kw: Any) -> argparse.Namespace:
    base = {"namespace": "n.s", "typed": False, "batch": 1000, "max_line_bytes": 64, "count": None,
            "json": False, "start": None, "key": "run-1"}
    return argparse.Namespace(**{**base, **kw})


def test_a_line_over_the_limit_is_read_past_in_pieces() -> None:
    data = b'{"a": 1}\n' + b"x" * 10_000 + b"\n\n" + b'{"a": 3}'
    got = list(_lines(io.BytesIO(data), 64))
    assert [(n, line) for n, line in got] == [(1, b'{"a": 1}\n'), (2, None), (3, b"\n"), (4, b'{"a": 3}')]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=80), max_size=20))
def test_every_line_is_an_event_or_refused_by_its_number(raw: list[bytes]) -> None:
    text = b"\n".join(r.replace(b"\n", b" ") for r in raw)
    b = _next_batch(_lines(io.BytesIO(text), 64), args(), None)
    numbered = set(b.lines) | {int(x.split(":")[0].split()[1]) for x in b.refused}
    assert len(b.lines) + len(b.refused) == len(numbered)
    blank = {i + 1 for i, r in enumerate(raw) if not r.replace(b"\n", b" ").strip()}
    assert numbered | blank == set(range(1, len(raw) + 1)) or not raw


def test_conversion_plain_and_typed() -> None:
    b = _next_batch(_lines(io.BytesIO(b'{"t": -1, "f": 1.5, "n": null}\n[1, "x"]\n'), 64), args(), None)
    assert [e.data for e in b.events] == [
        {"Map": [["t", {"Int": -1}], ["f", {"Float": 1.5}], ["n", {"Option": None}]]},
        {"Array": [{"Nat": 1}, {"Text": "x"}]},
    ]
    typed = _next_batch(_lines(io.BytesIO(b'{"Nat": 3}\n{"Nat": -3}\n'), 64), args(typed=True), None)
    assert [e.data for e in typed.events] == [{"Nat": 3}]
    assert typed.refused[0].startswith("line 2: invalid_value")


def test_errors_say_the_code_in_one_line_and_the_exit_status() -> None:
    cases = [
        (ApiResponseError(404, "namespace_not_found", "no\npublication"), "namespace_not_found", 1),
        (ApiResponseError(401, "unauthenticated", "unknown token"), "unauthenticated", 2),
        (ItemError("Unauthorized", "bob may not"), "Unauthorized", 1),
        (TransportError("cannot connect"), "unreachable", 2),
    ]
    for e, code, status in cases:
        assert explain(e).startswith(code) and status_of(e) == status


def test_skip_argument() -> None:
    assert _skip("3") == [3] and _skip("3,1") == [3, 1] and _skip(None) is None
    for bad in ("", "a", "1,2,3", "-1"):
        with pytest.raises(ValueError):
            _skip(bad)


def test_pages_follow_the_last_key_and_before_orders_just_ahead() -> None:
    items = list(range(1, 8))
    asked: list[Any] = []

    async def fetch(prev: int | None) -> list[int]:
        asked.append(prev)
        return [i for i in items if prev is None or i > prev][:3]

    async def collect() -> list[int]:
        return [x async for x in _pages(fetch, lambda x: x)]

    assert asyncio.run(collect()) == items and asked == [None, 3, 6, 7]
    for ns in ("a.b", "com.example.orders", "x"):
        before = _before(ns)
        assert before is not None and before < ns and not (before < "com" < ns and ns.startswith("com."))


def note(event_id: int, replayed: bool = False, ns: str = "n.s") -> EventNotification:
    headers: list[Any] = [("icrc77:replay:id", {"Nat": 1})] if replayed else []
    return EventNotification(id=event_id, eventId=event_id, prev_id=None, timestamp=0, namespace=ns,
                             data={"Nat": event_id}, source="p", headers=headers)


def test_tail_from_holds_live_pushes_then_drops_the_replays_share(capsys: pytest.CaptureFixture[str]) -> None:
    async def go() -> None:
        tail = _Tail(args(start=2), asyncio.Event())
        with pytest.raises(RetryLater):
            await tail.handle(note(5))  # live, while the replay runs
        await tail.handle(note(2, True))
        await tail.handle(note(3, True))
        await tail.handle(note(3, True))  # pushed again: not printed again
        tail.end, tail.replaying = 4, False
        await tail.handle(note(3))  # live, below the replay's end: the replay's
        await tail.handle(note(4))
        await tail.handle(note(1, ns="other"))

    asyncio.run(go())
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1:3] for line in out] == [["n.s", "#2"], ["n.s", "#3"], ["n.s", "#4"], ["other", "#1"]]
