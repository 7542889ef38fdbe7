"""Many rows per INSERT statement (``insert_rows``): every row is stored once, in order,
with the consecutive ids the store hands out, whatever the count and the width."""

from __future__ import annotations

import contextlib
import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.store import StoredEvent
from tidings.store._sqlite_db import insert_notifications, insert_rows
from tidings.store.sqlite import _setup


def _conn() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    _setup(c)
    return c


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 1_300), width=st.sampled_from([1, 2, 4, 8, 10, 12, 600, 1100]), before=st.integers(0, 3))
def test_every_row_once_in_order(n: int, width: int, before: int) -> None:
    with contextlib.closing(_conn()) as c:
        cols = ", ".join(f"c{k}" for k in range(width))
        c.execute(f"CREATE TABLE t(id INTEGER PRIMARY KEY AUTOINCREMENT, {cols})")
        for _ in range(before):
            c.execute(f"INSERT INTO t({cols}) VALUES ({', '.join('0' * width)})")
        rows = [tuple(r * 100 + k for k in range(width)) for r in range(n)]
        c.execute("BEGIN")
        insert_rows(c, f"INSERT INTO t({cols}) VALUES ", "(" + ", ".join("?" * width) + ")", rows)
        c.execute("COMMIT")
        got = c.execute(f"SELECT id, {cols} FROM t WHERE id > ? ORDER BY id", (before,)).fetchall()
        assert [r[1:] for r in got] == rows
        assert [r[0] for r in got] == list(range(before + 1, before + n + 1))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 700), gap=st.integers(0, 5))
def test_notification_ids_are_those_of_the_rows(n: int, gap: int) -> None:
    """``insert_notifications`` answers the ids the rows took, also after deleted rows
    (AUTOINCREMENT never hands an id out twice)."""
    with contextlib.closing(_conn()) as c:
        events = [
            StoredEvent(seq=s, namespace="n", id=s, prev_id=None, timestamp=0, source="p", data=b"{}", headers=b"[]")
            for s in range(1, n + 1)
        ]
        first = insert_notifications(c, 7, events[:gap], 1) if gap else []
        c.execute("DELETE FROM notifications")
        ids = insert_notifications(c, 7, events, 1)
        assert ids[0] == (first[-1] + 1 if first else 1)
        stored = c.execute("SELECT id, seq FROM notifications ORDER BY id").fetchall()
        assert stored == list(zip(ids, range(1, n + 1), strict=True))
