"""ICRC-77 replays: ``Replays`` registers, runs, cancels and reports them, spending credit.

A replay reads its range with ``ReplaySource`` (hot log or archive, ``_source``), applies
the filter and skip (``_send``), and sends batches one at a time through the
subscription's own delivery (``_flow``); ``_report`` shapes its status. Imports the
registry and delivery rooms.
"""

from __future__ import annotations

from ._remote import RemotePusher
from ._replays import Replays
from ._source import ReplaySource

__all__ = ["RemotePusher", "ReplaySource", "Replays"]
