"""The delivery record: one row per notification outcome, kept after the notification is gone.

A pending notification is deleted when it is settled, so without this record nothing
would be left to measure delivery latency or outcomes over time. Each store appends a
:class:`DeliveryRecord` in the same transaction as the change it records:

* ``confirmed``: ``settle_notifications`` removed it (the endpoint, or the subscriber
  with ``icrc72_confirm_notifications``, confirmed it);
* ``dead``: ``dead_letter`` moved it to the dead letters;
* ``dropped``: ``drop_dead_letters`` deleted its dead letter for good.

So a notification that is dead-lettered, redriven and then confirmed has two rows
(``dead``, then ``confirmed``), and one dead-lettered and then dropped has ``dead`` and
``dropped``. The Spark statistics job (``tidings.pipeline.stats``) reads the table; the
archive job trims it by age (docs/pipeline.md, Statistics).

This module holds the record, the SQLite DDL and the SQLite statements; the in-memory
store builds the same records itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "DELIVERIES_DDL",
    "DeliveryRecord",
    "Outcome",
    "read_deliveries",
    "record_dead",
    "record_dropped",
    "record_settled",
]

Outcome = Literal["confirmed", "dead", "dropped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryRecord:
    """What became of one notification; times are UTC nanoseconds."""

    serial: int
    """The record's own position: increasing, unique per store."""
    notification_id: int
    subscription_id: int
    subscriber: str
    namespace: str
    seq: int
    """The event's global ``seq``."""
    event_id: int
    source: str | None
    """The event's publisher (None only if the event was no longer in the log)."""
    event_timestamp: int | None
    created_at: int | None
    """When the notification was recorded as pending (None for ``dropped``: a dead letter
    does not keep it)."""
    settled_at: int
    """When it was confirmed, dead-lettered or dropped."""
    attempts: int
    """Pushes made, as far as the store counted them: failed pushes plus the one that was
    confirmed (``confirmed``), the broker's count of pushes (``dead``, ``dropped``)."""
    outcome: Outcome
    replay: bool = False
    """Sent by a replay (``tidings_replay_*``), not live: its event may be old, so its
    latency from the event's timestamp says nothing about delivery."""


DELIVERIES_DDL: Final = """
CREATE TABLE IF NOT EXISTS deliveries (
    serial INTEGER PRIMARY KEY AUTOINCREMENT,
    notification_id INTEGER NOT NULL,
    subscription_id INTEGER NOT NULL,
    subscriber TEXT NOT NULL,
    namespace TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event_id INTEGER NOT NULL,
    source TEXT,
    event_timestamp INTEGER,
    created_at INTEGER,
    settled_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    replay INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS deliveries_settled ON deliveries(settled_at);
CREATE INDEX IF NOT EXISTS deliveries_notification ON deliveries(notification_id);
"""

COLUMNS: Final = (
    "serial, notification_id, subscription_id, subscriber, namespace, seq, event_id, source, event_timestamp, "
    "created_at, settled_at, attempts, outcome, replay"
)
_INSERT: Final = f"INSERT INTO deliveries({COLUMNS.removeprefix('serial, ')})"

# Each statement copies a row that is about to be deleted, so it must run before the
# DELETE of the same transaction; an id that is no longer there selects nothing. A
# replayed notification's event may have left the hot log: its copy in replay_notes
# (tidings.store._sqlite_replays) fills in.
_EVENT: Final = (
    "LEFT JOIN events e ON e.seq = {t}.seq LEFT JOIN replay_notes r ON r.id = {t}.id"
)
_SETTLED: Final = (
    f"{_INSERT} SELECT n.id, n.subscription_id, COALESCE(s.subscriber, ''), n.namespace, n.seq, "
    "COALESCE(e.id, r.event_id, 0), COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), "
    "n.created_at, ?, n.attempts + 1, 'confirmed', r.id IS NOT NULL "
    "FROM notifications n LEFT JOIN subscriptions s ON s.id = n.subscription_id "
    f"{_EVENT.format(t='n')} WHERE n.id IN "
)
_DEAD: Final = (
    f"{_INSERT} SELECT n.id, n.subscription_id, ?, n.namespace, n.seq, ?, COALESCE(e.source, r.source), "
    "COALESCE(e.timestamp, r.timestamp), n.created_at, ?, ?, 'dead', r.id IS NOT NULL "
    f"FROM notifications n {_EVENT.format(t='n')} WHERE n.id = ?"
)
_DROPPED: Final = (
    f"{_INSERT} SELECT d.id, d.subscription_id, d.subscriber, d.namespace, d.seq, d.event_id, "
    "COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), NULL, ?, d.attempts, 'dropped', "
    f"r.id IS NOT NULL FROM dead_letters d {_EVENT.format(t='d')} WHERE d.id = ?"
)


def record_settled(conn: sqlite3.Connection, ids: Iterable[int], now: int) -> None:
    """Record the pending notifications among ``ids`` as confirmed (before deleting them).

    One statement per 500 ids: this is on the hot path of every confirmation, and one
    ``IN`` list costs less than as many executions of a one-row statement.
    """
    todo = list(dict.fromkeys(ids))
    for k in range(0, len(todo), 500):
        chunk = todo[k : k + 500]
        conn.execute(f"{_SETTLED}({','.join('?' * len(chunk))})", (now, *chunk))


def record_dead(conn: sqlite3.Connection, letters: Sequence[Any]) -> None:
    """Record the pending notifications among ``letters`` (``DeadLetter``s) as dead (before moving them)."""
    seen: set[int] = set()
    rows = []
    for d in letters:
        if d.id not in seen:
            seen.add(d.id)
            rows.append((d.subscriber, d.event_id, d.dead_at, d.attempts, d.id))
    conn.executemany(_DEAD, rows)


def record_dropped(conn: sqlite3.Connection, ids: Iterable[int], now: int) -> None:
    """Record the dead letters among ``ids`` as dropped (before deleting them)."""
    conn.executemany(_DROPPED, [(now, i) for i in dict.fromkeys(ids)])


def read_deliveries(conn: sqlite3.Connection, after: int, limit: int | None) -> list[DeliveryRecord]:
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM deliveries WHERE serial > ? ORDER BY serial LIMIT ?",
        (after, -1 if limit is None else limit),
    ).fetchall()
    return [
        DeliveryRecord(
            serial=r[0], notification_id=r[1], subscription_id=r[2], subscriber=r[3], namespace=r[4], seq=r[5],
            event_id=r[6], source=r[7], event_timestamp=r[8], created_at=r[9], settled_at=r[10],
            attempts=r[11], outcome=r[12], replay=bool(r[13]),
        )
        for r in rows
    ]
