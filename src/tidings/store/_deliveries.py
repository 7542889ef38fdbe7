"""The delivery record: one per notification outcome, kept after the notification is gone.

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

A batch confirmed whole at its first push may be kept as one row of many records
(``tidings.core.record_batch``, the SQLite store); every reader gives them one by one.

This module holds the record; each backend writes it (``_sqlite_deliveries``,
``_memory_deliveries``, ``_pg_deliveries``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["DeliveryRecord", "Outcome"]

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
