"""A push's body, spliced from cached parts, is exactly the EventNotifications of its
notifications: the same JSON as encoding each in full, for any event, header list,
filter and sent time, and for replayed copies that share an event's seq."""

from __future__ import annotations

import json
from dataclasses import dataclass

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from tidings.broker.delivery import _push_body as push_body
from tidings.broker.delivery._push_body import PushBodies
from tidings.store import StoredEvent

_text = st.text(max_size=12)
_headers = st.lists(st.tuples(_text, st.integers(min_value=0, max_value=2**64)), max_size=3)


@dataclass
class _Note:
    id: int
    event: StoredEvent


@st.composite
def _events(draw: st.DrawFn, seq: int) -> StoredEvent:
    pairs = draw(_headers)
    return StoredEvent(
        seq=seq, namespace=draw(_text), id=draw(st.integers(min_value=0, max_value=2**64)),
        prev_id=draw(st.none() | st.integers(min_value=0, max_value=2**64)),
        timestamp=draw(st.integers(min_value=0, max_value=2**63)), source=draw(_text),
        data=msgspec.json.encode({"Text": draw(_text)}),
        headers=msgspec.json.encode([[k, {"Nat": v}] for k, v in pairs]),
    )


def _expected(n: _Note, filter: str | None, sent: int) -> dict[str, object]:
    e = n.event
    return {
        "id": n.id, "eventId": e.id, "prev_id": e.prev_id, "timestamp": e.timestamp, "namespace": e.namespace,
        "data": json.loads(e.data), "source": e.source, "filter": filter,
        "headers": [*json.loads(e.headers), ["icrc72:broadcaster:sent", {"Nat": sent}]],
    }


@given(st.data(), st.integers(min_value=0, max_value=4), st.none() | _text, st.integers(min_value=0, max_value=2**63))
def test_the_spliced_body_is_the_notifications(data: st.DataObject, size: int, filter: str | None, sent: int) -> None:
    bodies = PushBodies()
    batch = [_Note(100 + k, data.draw(_events(seq=k))) for k in range(size)]
    assert json.loads(bodies.encode(batch, filter, sent)) == [_expected(n, filter, sent) for n in batch]
    # The same events again, from the cache: as replayed copies with headers of their own.
    copies = [
        _Note(200 + n.id, msgspec.structs.replace(
            n.event, headers=msgspec.json.encode([[k, {"Nat": v}] for k, v in data.draw(_headers)]),
        ))
        for n in batch
    ]
    assert json.loads(bodies.encode(copies, filter, sent + 1)) == [_expected(n, filter, sent + 1) for n in copies]


def test_the_cache_stays_within_its_bytes_whatever_the_events() -> None:
    bodies = PushBodies()
    big = StoredEvent(seq=0, namespace="n", id=0, prev_id=None, timestamp=0, source="s",
                      data=msgspec.json.encode({"Text": "x" * (push_body._PART_MAX + 1)}), headers=b"[]")
    bodies.encode([_Note(1, big)], None, 1)
    assert bodies.cached_bytes == 0  # a large event is encoded, not kept
    for seq in range(1, 4000):
        e = msgspec.structs.replace(big, seq=seq, data=msgspec.json.encode({"Text": "y" * 8000}))
        assert json.loads(bodies.encode([_Note(seq, e)], None, 1))[0]["eventId"] == 0
        assert bodies.cached_bytes <= push_body._CACHED_BYTES


def test_only_live_events_are_kept() -> None:
    """A push of old events (a replay, a worker far behind: at or below the tail's floor)
    is encoded as well, but keeps nothing that would push the live events' parts out."""
    bodies = PushBodies()
    old = [_Note(k, StoredEvent(seq=k, namespace="n", id=k, prev_id=None, timestamp=0, source="s",
                                data=b'{"Nat":1}', headers=b"[]")) for k in range(1, 101)]
    full = PushBodies().encode(old, None, 5)
    assert bodies.encode(old, None, 5, keep_above=100) == full
    assert bodies.cached_bytes == 0
    assert bodies.encode(old, None, 5, keep_above=90) == full
    assert 0 < bodies.cached_bytes and len(bodies._shared) == 10
