"""Front processes: HTTP parsing, publish checks and stamping on every core, in front of
the one broker process (docs/scaling.md)."""

from .app import FrontConfig, front_app
from .process import FrontPool

__all__ = ["FrontConfig", "FrontPool", "front_app"]
