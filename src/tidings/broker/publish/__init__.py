"""The broadcaster's publish path and the ICRC-72 queries of the broadcasters.

``Broadcaster`` checks, stamps and appends published events and hands them to delivery
(``check_event`` is its per-event check, also run by the stream face);
``BroadcasterQueries`` answers which broadcasters exist and what each serves;
``Overload`` admits publishes under the waiting caps, bounds each one's wait for its
commit and tells when commits stall. Imports the
registry and cluster rooms (``Forwarding``, ``Membership``).
"""

from __future__ import annotations

from ._broadcaster import ERR_SCHEMA_REFUSED, ERR_SCHEMA_VIOLATION, Broadcaster, SchemaCheck, check_event
from ._overload import COMMIT_TIMEOUT, CommitTimeout, Overload, Overloaded, Ticket
from ._queries import BroadcasterQueries

__all__ = [
    "COMMIT_TIMEOUT",
    "ERR_SCHEMA_REFUSED",
    "ERR_SCHEMA_VIOLATION",
    "Broadcaster",
    "BroadcasterQueries",
    "CommitTimeout",
    "Overload",
    "Overloaded",
    "SchemaCheck",
    "Ticket",
    "check_event",
]
