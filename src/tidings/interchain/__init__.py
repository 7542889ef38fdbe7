"""The Interchain Event Distributor: one DLT Adapter API in front of several networks,
replicating every event to every network and notifying each subscription of interest
once per global id (docs/interchain.md)."""

from .adapters import KINDS, Network, NetworkContext
from .config import DistributorConfig, load
from .distributor import Distributor, Subscription

__all__ = ["KINDS", "Distributor", "DistributorConfig", "Network", "NetworkContext", "Subscription", "load"]
