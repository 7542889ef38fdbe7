"""Counter increments shared between notifications are applied as often as there are ids."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from tidings.store import Stat
from tidings.store._sqlite_db import stats_of

_LISTS = [
    [Stat("subscription", "1", "a"), Stat("publication", "ns", "a", 2)],
    [Stat("subscription", "1", "a"), Stat("publication", "other", "a")],
    [],
]


@given(st.dictionaries(st.integers(0, 50), st.integers(0, 2)), st.lists(st.integers(0, 60)))
def test_shared_lists_are_scaled_not_lost(which: dict[int, int], ids: list[int]) -> None:
    # Lists shared by identity (as per_notification_stats makes them), and equal copies.
    per_id = {i: _LISTS[k] if i % 2 else list(_LISTS[k]) for i, k in which.items()}
    naive: Counter[tuple[str, str, str]] = Counter()
    for i in ids:
        for s in per_id.get(i, ()):
            naive[(s.scope, s.key, s.name)] += s.delta
    got: Counter[tuple[str, str, str]] = Counter()
    for s in stats_of(per_id, ids):
        got[(s.scope, s.key, s.name)] += s.delta
    assert +got == +naive
