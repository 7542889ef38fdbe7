"""The schema registry (MRC message schemas): formats, registry, publication binding, retention."""

from .binding import Binding, SchemaBinder
from .registry import SchemaRegistry
from .retention import Retention, RetentionRun

__all__ = ["Binding", "Retention", "RetentionRun", "SchemaBinder", "SchemaRegistry"]
