"""The orchestrator's books: publications, publishers, subscriptions and their configs.

``Registry`` is the registry in memory, read by the publish path, delivery, signing and
replays; ``Orchestrator`` changes it (writing through to the store first) and answers the
ICRC-72 registration and query methods, telling a ``RegistryListener`` (delivery) of each
change. Imports nothing else of the broker: every other room reads it.
"""

from __future__ import annotations

from ._orchestrator import Orchestrator, RegistryListener
from ._queries import stats_map, take_of
from ._registry import Registry, read_sub_config

__all__ = ["Orchestrator", "Registry", "RegistryListener", "read_sub_config", "stats_map", "take_of"]
