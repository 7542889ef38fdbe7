"""The broadcaster's publish path and the ICRC-72 queries of the broadcasters.

``Broadcaster`` checks, stamps and appends published events and hands them to delivery
(``check_event`` is its per-event check, also run by the stream face);
``BroadcasterQueries`` answers which broadcasters exist and what each serves. Imports the
registry and cluster rooms (``Forwarding``, ``Membership``).
"""

from __future__ import annotations

from ._broadcaster import ERR_SCHEMA_REFUSED, ERR_SCHEMA_VIOLATION, Broadcaster, SchemaCheck, check_event
from ._queries import BroadcasterQueries

__all__ = [
    "ERR_SCHEMA_REFUSED",
    "ERR_SCHEMA_VIOLATION",
    "Broadcaster",
    "BroadcasterQueries",
    "SchemaCheck",
    "check_event",
]
