"""The broker: orchestrator, broadcaster and push delivery in one process."""

from .service import Broker

__all__ = ["Broker"]
