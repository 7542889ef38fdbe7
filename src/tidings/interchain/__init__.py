"""The Interchain Event Distributor: one DLT Adapter API in front of several networks,
replicating every event to every network and notifying each subscription of interest
once per global id (docs/interchain.md).

The names below load on first use: every ``tidings`` command imports this package for
its ``distributor`` subcommand, and the network adapters cost most of half a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapters import KINDS, Network, NetworkContext
    from .config import DistributorConfig, load
    from .distributor import Distributor, Subscription

__all__ = ["KINDS", "Distributor", "DistributorConfig", "Network", "NetworkContext", "Subscription", "load"]

_HOMES = {"KINDS": "adapters", "Network": "adapters", "NetworkContext": "adapters", "DistributorConfig": "config",
          "load": "config", "Distributor": "distributor", "Subscription": "distributor"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
