"""Several broadcasters on one shared store (docs/scaling.md).

``Membership`` (who is alive, which subscription leases this one holds), ``Cluster``
(heartbeat, leases, change signals), ``RegistrySync`` (applies registry changes made
through the others), ``ControlLog`` (this broadcaster's ``icrc72:broadcaster:sys:<id>``
namespace) and ``Forwarding`` (sends events to their publication's owner, signed with
``sign``, checked with ``verify``). All of them exist only when the store is a
``ClusterStore``; ``ClockWatch`` (reports a wall clock off the cluster's clock) exists
alone too. Imports the registry, delivery and replay rooms.
"""

from __future__ import annotations

from ._clock import ClockWatch
from ._cluster import Cluster
from ._control_log import COMMAND, Commands, ControlLog
from ._forwarding import MAX_SKEW_MS, RELAY_HEADER, Forwarding, RelayBatch, Relayed, sign, verify
from ._membership import Membership
from ._outage import Outage
from ._registry_sync import RegistrySync

__all__ = [
    "COMMAND",
    "MAX_SKEW_MS",
    "RELAY_HEADER",
    "ClockWatch",
    "Cluster",
    "Commands",
    "ControlLog",
    "Forwarding",
    "Membership",
    "Outage",
    "RegistrySync",
    "RelayBatch",
    "Relayed",
    "sign",
    "verify",
]
