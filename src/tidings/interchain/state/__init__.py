"""The distributor's durable state: dedup sets, outboxes, subscriptions, cursors."""

from ._base import Mark, State, notified_set, published_set
from .redis import RedisState
from .sqlite import SQLiteState

__all__ = ["Mark", "RedisState", "SQLiteState", "State", "notified_set", "published_set"]
