"""Network adapters: one small class per kind (see :class:`Network`)."""

from ._base import KINDS, Deliver, Network, NetworkContext
from .broker import BrokerNetwork
from .dlt import DltNetwork
from .jetstream import JetStreamNetwork
from .redis_streams import RedisStreamNetwork

__all__ = [
    "KINDS",
    "BrokerNetwork",
    "Deliver",
    "DltNetwork",
    "JetStreamNetwork",
    "Network",
    "NetworkContext",
    "RedisStreamNetwork",
]
