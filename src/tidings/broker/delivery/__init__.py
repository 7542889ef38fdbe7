"""Push delivery: one worker per subscription, the push itself, and what surrounds them.

``Delivery`` is the hub: it keeps the workers (``_worker``; the write-behind, re-push and
push-first halves in ``_behind``, ``_redelivery`` and ``_direct``), routes appends to them
(``_routing``), pushes (``_push``, ``_push_body``) and settles confirmations
(``_confirmation``). Its collaborators see it only through the narrow Protocols of
``_ports``, never the class. Around it: the in-memory ``Tail`` of recent events, the
push ``Signing`` secrets, ``DeadLetters``, the CloudEvents ``Handshake``, and ``LiveFirst``
(replays and redrives yield to live work). Imports the registry room and ``metrics``.
"""

from __future__ import annotations

from ._accounting import counted
from ._dead_letters import DeadLetters
from ._delivery import Delivery
from ._handshake import Handshake
from ._notes import Gone, Note, Pushed, RoutedTo, taken_whole
from ._outbound import policy_for
from ._push import Leases, Transport, answer_of, http_push
from ._push_body import PushBodies
from ._signing import Signing
from ._tail import Tail
from ._yielding import LiveFirst

__all__ = [
    "DeadLetters",
    "Delivery",
    "Gone",
    "Handshake",
    "Leases",
    "LiveFirst",
    "Note",
    "PushBodies",
    "Pushed",
    "RoutedTo",
    "Signing",
    "Tail",
    "Transport",
    "answer_of",
    "counted",
    "http_push",
    "policy_for",
    "taken_whole",
]
