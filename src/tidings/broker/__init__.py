"""The broker: orchestrator, broadcaster and push delivery in one process.

``Broker`` is imported when first asked for, so that the replay process
(``replay._pusher``), which needs a few of the rooms and none of the wiring, starts
without importing the whole service."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .service import Broker

__all__ = ["Broker"]


def __getattr__(name: str) -> Any:
    if name == "Broker":
        from .service import Broker

        return Broker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
