"""The PostgreSQL store's schema, as numbered migrations applied at start.

``schema_migrations`` records each version applied. At open the store takes a
transaction-scoped advisory lock (so several broadcaster processes starting at once
migrate once), applies each version above the highest recorded, in order, each in the
transaction that records it, and refuses a database migrated by a newer tidings.

Never edit a migration that has shipped: add the next one. Text columns use the "C"
collation: names sort and compare by bytes, as in SQLite, whatever the database's locale.

Event ids: ``log_head`` (one row) holds the log's last ``seq`` and ``namespace_heads``
each namespace's last event id. An append updates both in its transaction, so the row
locks make concurrent writers (in this process or in others sharing the database) take
turns: ``seq`` is gap-free and in commit order, and each namespace's ids are gap-free
with their ``prev_id`` chain; a rolled-back append gives its numbers back. The head of a
namespace outlives its events (retention) and its publication (deletion), so a chain
never restarts.
"""

from __future__ import annotations

from typing import Final

import asyncpg

from ..errors import StoreError
from ._pg_clock import V_CLOCK
from ._pg_functions import V5
from ._pg_keyed_events import V_KEYED_EVENTS
from ._pg_keys import V_PUBLISH_KEYS

__all__ = ["MIGRATIONS", "migrate"]

_V1: Final = """
CREATE SEQUENCE subscriptions_id_seq;
CREATE SEQUENCE notifications_id_seq;
CREATE SEQUENCE secrets_id_seq;
CREATE SEQUENCE deliveries_serial_seq;
CREATE SEQUENCE replays_id_seq;
CREATE SEQUENCE schemas_id_seq;
CREATE SEQUENCE schema_changes_seq_seq;

CREATE TABLE principals (
    name text COLLATE "C" PRIMARY KEY,
    admin boolean NOT NULL,
    created_at bigint NOT NULL
);
CREATE TABLE tokens (
    hash bytea PRIMARY KEY,
    principal text COLLATE "C" NOT NULL REFERENCES principals(name)
);
CREATE TABLE publications (
    namespace text COLLATE "C" PRIMARY KEY,
    owner text COLLATE "C" NOT NULL,
    config bytea NOT NULL,
    created_at bigint NOT NULL
);
CREATE TABLE publishers (
    namespace text COLLATE "C" NOT NULL,
    principal text COLLATE "C" NOT NULL,
    PRIMARY KEY (namespace, principal)
);
CREATE TABLE subscriptions (
    id bigint PRIMARY KEY DEFAULT nextval('subscriptions_id_seq'),
    subscriber text COLLATE "C" NOT NULL,
    namespace text COLLATE "C" NOT NULL,
    endpoint text COLLATE "C",
    mode text COLLATE "C" NOT NULL,
    config bytea NOT NULL,
    cursor bigint NOT NULL,
    created_at bigint NOT NULL
);
CREATE INDEX subscriptions_ns ON subscriptions(namespace, id);
CREATE TABLE secrets (
    id bigint PRIMARY KEY DEFAULT nextval('secrets_id_seq'),
    subscription_id bigint NOT NULL,
    secret text COLLATE "C" NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint
);
CREATE INDEX secrets_sub ON secrets(subscription_id, id);

CREATE TABLE log_head (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq bigint NOT NULL
);
INSERT INTO log_head(one, seq) VALUES (true, 0);
CREATE TABLE namespace_heads (
    namespace text COLLATE "C" PRIMARY KEY,
    last_id bigint NOT NULL
);
CREATE TABLE events (
    seq bigint PRIMARY KEY,
    namespace text COLLATE "C" NOT NULL,
    id bigint NOT NULL,
    prev_id bigint,
    timestamp bigint NOT NULL,
    source text COLLATE "C" NOT NULL,
    headers bytea NOT NULL,
    data bytea NOT NULL
);
CREATE UNIQUE INDEX events_ns_id ON events(namespace, id);
CREATE INDEX events_ns_seq ON events(namespace, seq);

CREATE TABLE notifications (
    id bigint PRIMARY KEY DEFAULT nextval('notifications_id_seq'),
    subscription_id bigint NOT NULL,
    seq bigint NOT NULL,
    namespace text COLLATE "C" NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    created_at bigint NOT NULL DEFAULT 0,
    sent boolean NOT NULL DEFAULT false
);
CREATE INDEX notifications_sub ON notifications(subscription_id, id);
CREATE INDEX notifications_seq ON notifications(seq);
CREATE TABLE dead_letters (
    id bigint PRIMARY KEY,
    subscription_id bigint NOT NULL,
    subscriber text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    namespace text COLLATE "C" NOT NULL,
    event_id bigint NOT NULL,
    attempts integer NOT NULL,
    reason text COLLATE "C" NOT NULL,
    dead_at bigint NOT NULL
);
CREATE INDEX dead_letters_sub ON dead_letters(subscription_id, id);
CREATE INDEX dead_letters_seq ON dead_letters(seq);
CREATE TABLE deliveries (
    serial bigint PRIMARY KEY DEFAULT nextval('deliveries_serial_seq'),
    notification_id bigint NOT NULL,
    subscription_id bigint NOT NULL,
    subscriber text COLLATE "C" NOT NULL,
    namespace text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    event_id bigint NOT NULL,
    source text COLLATE "C",
    event_timestamp bigint,
    created_at bigint,
    settled_at bigint NOT NULL,
    attempts integer NOT NULL,
    outcome text COLLATE "C" NOT NULL,
    replay boolean NOT NULL DEFAULT false
);
CREATE INDEX deliveries_settled ON deliveries(settled_at);
CREATE INDEX deliveries_notification ON deliveries(notification_id);

CREATE TABLE stats (
    scope text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    name text COLLATE "C" NOT NULL,
    value bigint NOT NULL,
    PRIMARY KEY (scope, key, name)
);

CREATE TABLE replays (
    id bigint PRIMARY KEY DEFAULT nextval('replays_id_seq'),
    requester text COLLATE "C" NOT NULL,
    namespace text COLLATE "C" NOT NULL,
    subscription_id bigint NOT NULL,
    from_id bigint NOT NULL,
    to_id bigint NOT NULL,
    open_end boolean NOT NULL,
    config bytea NOT NULL,
    memo text COLLATE "C",
    state text COLLATE "C" NOT NULL,
    detail text COLLATE "C" NOT NULL,
    position bigint NOT NULL,
    sent bigint NOT NULL,
    expected bigint NOT NULL,
    price bigint NOT NULL,
    charged bigint NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
CREATE INDEX replays_state ON replays(state, id);
CREATE TABLE replay_notes (
    id bigint PRIMARY KEY,
    replay_id bigint NOT NULL,
    seq bigint NOT NULL,
    namespace text COLLATE "C" NOT NULL,
    event_id bigint NOT NULL,
    prev_id bigint,
    timestamp bigint NOT NULL,
    source text COLLATE "C" NOT NULL,
    headers bytea NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX replay_notes_replay ON replay_notes(replay_id, id);
CREATE TABLE credits (
    principal text COLLATE "C" PRIMARY KEY,
    balance bigint NOT NULL
);

CREATE TABLE schemas (
    id bigint PRIMARY KEY DEFAULT nextval('schemas_id_seq'),
    format text COLLATE "C" NOT NULL,
    model text COLLATE "C" NOT NULL,
    canonical text COLLATE "C" NOT NULL,
    replaces bigint,
    created_at bigint NOT NULL,
    created_by text COLLATE "C" NOT NULL,
    state text COLLATE "C" NOT NULL,
    valid_from bigint,
    valid_to bigint,
    retention_s bigint,
    starting_at bigint NOT NULL DEFAULT 0,
    deleted_at bigint,
    refs text COLLATE "C" NOT NULL DEFAULT '[]'
);
CREATE TABLE schema_versions (
    name text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    schema_id bigint NOT NULL,
    created_at bigint NOT NULL,
    deleted_at bigint,
    soft_deleted_at bigint,
    PRIMARY KEY (name, version)
);
CREATE TABLE schema_settings (
    key text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL
);
CREATE TABLE schema_changes (
    seq bigint PRIMARY KEY DEFAULT nextval('schema_changes_seq_seq'),
    schema_id bigint,
    at bigint NOT NULL,
    by text COLLATE "C" NOT NULL,
    action text COLLATE "C" NOT NULL,
    detail text COLLATE "C" NOT NULL
);
CREATE INDEX schema_changes_schema ON schema_changes(schema_id, seq);
"""

_V2: Final = """
CREATE TABLE broadcasters (
    id text COLLATE "C" PRIMARY KEY,
    url text COLLATE "C" NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at timestamptz NOT NULL
);
CREATE TABLE leases (
    key text COLLATE "C" PRIMARY KEY,
    owner text COLLATE "C" NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX leases_owner ON leases(owner, key);
"""

_V3: Final = """
CREATE TABLE cluster_secrets (
    name text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL
);
"""

_V4: Final = """
CREATE TABLE replay_ids (
    replay_id bigint PRIMARY KEY,
    base bigint NOT NULL
);
"""

MIGRATIONS: Final[tuple[tuple[int, str, str], ...]] = (
    (1, "the registry, the event log, deliveries, statistics, replays and schemas", _V1),
    (2, "broadcasters and their leases, for several broadcasters on one database", _V2),
    (3, "the secret broadcasters sign the publishes they forward to each other with", _V3),
    (4, "the notification ids kept for each replay, so a batch pushed again keeps its ids", _V4),
    (5, "lease epochs (fencing), relay tokens, and one-statement writes as server-side functions", V5),
    (6, "an event's timestamp never goes back within its namespace (the later of its own and the previous)", V_CLOCK),
    (7, "publishers' idempotency keys, written by tidings_append in the statement of their events", V_PUBLISH_KEYS),
    (8, "idempotency keys in their events' rows, unique per namespace, expired span by span", V_KEYED_EVENTS),
)
"""(version, what it does, SQL), in order."""

# Any constant will do, as long as no other user of the database takes it.
_LOCK: Final = 0x7469_6469_6E67  # "tiding"


async def migrate(c: asyncpg.Connection, *, peers_within_s: float = 15.0) -> list[int]:
    """Apply the migrations this database lacks; return the versions applied.

    Refuses to migrate while other broadcasters (seen within ``peers_within_s``) run on
    the database: they run an older tidings, which must not write a schema it does not
    know (docs/operations.md, "Upgrades")."""
    async with c.transaction():
        await c.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
        await c.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version integer PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = await c.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
        newest = MIGRATIONS[-1][0]
        if done > newest:
            raise StoreError(
                f"the database is at schema version {done}, newer than this tidings knows ({newest}): "
                "upgrade tidings"
            )
        if done < newest:
            await _refuse_live_peers(c, done, newest, peers_within_s)
        applied = []
        for version, what, sql in MIGRATIONS:
            if version > done:
                await c.execute(sql)
                await c.execute(
                    "INSERT INTO schema_migrations(version, description) VALUES ($1, $2)", version, what
                )
                applied.append(version)
        return applied


async def _refuse_live_peers(c: asyncpg.Connection, done: int, newest: int, within_s: float) -> None:
    if not await c.fetchval("SELECT to_regclass('broadcasters') IS NOT NULL"):
        return
    peers = await c.fetch(
        "SELECT id, (extract(epoch FROM clock_timestamp() - seen_at))::float8 FROM broadcasters "
        "WHERE seen_at > clock_timestamp() - make_interval(secs => $1) ORDER BY id", within_s,
    )
    if peers:
        names = ", ".join(f"{r[0]} (seen {max(0.0, r[1]):.0f} s ago)" for r in peers)
        raise StoreError(
            f"the database is at schema version {done} and broadcasters run on it ({names}); this tidings needs "
            f"version {newest}: stop them all, then start this version (a broadcaster counts as running until it "
            f"leaves, or for {within_s:.0f} s after its last heartbeat)"
        )
