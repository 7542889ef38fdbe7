"""The distributor's durable state: dedup sets, outboxes, subscriptions, cursors."""

from ._base import Mark, State, delivered_set, notified_set, published_set
from .redis import RedisState
from .sqlite import SQLiteState

__all__ = ["Mark", "RedisState", "SQLiteState", "State", "delivered_set", "notified_set", "published_set"]
