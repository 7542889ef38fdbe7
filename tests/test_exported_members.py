"""The public surfaces are pinned: a change to them is a decision, not an accident."""

from __future__ import annotations

import tidings.client
import tidings.store

CLIENT = {
    "Admin", "ApiResponseError", "ClientError", "ConfirmResult", "Event", "EventNotification", "Handler",
    "ItemError", "ItemResult", "Principal", "PublishUncertain", "Publisher", "Subscriber", "SyncAdmin", "SyncPublisher",
    "TransportError", "Value", "from_python", "item_result", "to_python",
    "SchemaWarning", "Schemas", "SyncSchemas", "schema_result",
    "Replays", "SyncReplays", "replay_result",
    "Stream", "RetryLater",
}

STORE = {
    "DeadLetter", "DeliveryRecord", "KeyRecord", "MemoryStore", "NewEvent", "PendingNotification", "PrincipalRecord",
    "PublicationRecord", "SQLiteStore", "PostgresStore", "Stat", "Store", "StoredEvent", "SubscriptionRecord",
    "SubscriptionSecret",
    "SchemaChange", "SchemaConflict", "SchemaRecord", "SchemaSnapshot", "SchemaVersion",
    "InsufficientCredit", "ReplayCounts", "ReplayRecord",
    "AppendRouter", "Route", "store_for", "redact_address", "disk_cause",
    "PrincipalStore", "RegistryStore", "EventStore", "DeliveryStore", "StatisticsStore", "SchemaStore", "ReplayStore",
    # Several broadcasters on one store (docs/scaling.md).
    "ClusterStore", "BroadcasterRecord", "LeaseRecord", "Fence", "CHANGE_LOG", "CHANGE_LOST", "CHANGE_REGISTRY",
}


def test_client_exports() -> None:
    assert set(tidings.client.__all__) == CLIENT
    for name in CLIENT:
        assert getattr(tidings.client, name) is not None


def test_store_exports() -> None:
    assert set(tidings.store.__all__) == STORE


def test_store_interface_methods() -> None:
    abstract = tidings.store.Store.__abstractmethods__
    assert abstract == {
        "open", "close", "create_principal", "add_token", "principal_by_token", "revoke_tokens", "list_principals",
        "create_publication", "update_publication", "list_publications", "delete_publication",
        "move_cursor", "count_events", "add_publisher", "list_publishers",
        "create_subscription", "update_subscription", "delete_subscription", "list_subscriptions",
        "add_secret", "secrets",
        "append", "read_after", "read_seqs", "head", "open_notifications", "settle_notifications",
        "get_notifications", "former_subscribers", "mark_sent", "pending", "pending_counts", "last_notification_id",
        "count_attempt", "take_notification_ids", "record_confirmed",
        "dead_letter", "list_dead_letters", "redrive_dead_letters", "drop_dead_letters",
        "deliveries", "add_stats", "stats", "stat_keys",
        "load_schemas", "schema_seq", "create_schema", "save_schema", "put_schema_setting", "schema_changes",
        "trim_events",
        "find_keys", "expire_keys",
        "create_replay", "list_replays", "get_replays", "move_replay", "record_replay_batch", "replay_events",
        "replay_id_base", "record_replay_confirmed",
        "replay_counts", "sweep_replay_notes", "read_range", "last_event_id", "fund_credit", "credit_balance",
    }
