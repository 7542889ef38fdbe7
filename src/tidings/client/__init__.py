"""The tidings SDK: publish, administer, and receive pushed notifications.

Async first; ``SyncPublisher`` and ``SyncAdmin`` are the blocking faces for scripts.
``Subscriber`` is an ASGI app to mount in any ASGI server; ``Stream`` is one persistent
connection that publishes with many events in flight and receives ``stream:`` pushes.
"""

from ..core.values import Principal, Value, from_python, to_python
from ..core.wire import ConfirmResult, Event, EventNotification, ItemResult
from ._admin import Admin
from ._errors import ApiResponseError, ClientError, ItemError, PublishUncertain, TransportError
from ._publisher import Publisher, SchemaWarning, item_result
from ._replays import Replays, replay_result
from ._schemas import Schemas, schema_result
from ._stream import RetryLater, Stream
from ._subscriber import Handler, Subscriber
from ._sync import SyncAdmin, SyncPublisher, SyncReplays, SyncSchemas

__all__ = [
    "Admin",
    "ApiResponseError",
    "ClientError",
    "ConfirmResult",
    "Event",
    "EventNotification",
    "Handler",
    "ItemError",
    "ItemResult",
    "Principal",
    "PublishUncertain",
    "Publisher",
    "Replays",
    "RetryLater",
    "SchemaWarning",
    "Schemas",
    "Stream",
    "Subscriber",
    "SyncAdmin",
    "SyncPublisher",
    "SyncReplays",
    "SyncSchemas",
    "TransportError",
    "Value",
    "from_python",
    "item_result",
    "replay_result",
    "schema_result",
    "to_python",
]
