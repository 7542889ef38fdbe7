"""Server-side functions: every write that other broadcasters may wait on, in one statement.

A client transaction holds its row locks across its round trips, so a broadcaster that
stops inside one (a pause, a frozen VM, a cut network) makes every other one that needs
those rows wait as long as it is stopped: the ``log_head`` row of every append, shared
counters, a subscription's rows that its next lease holder writes, the notification id
sequence. Each such write is therefore one call of a function below, sent as one
statement outside any client transaction: PostgreSQL runs it from start to commit
without waiting on the client, so a stopped client can hold nothing (docs/scaling.md,
"Failure model"). What is left as client transactions (registry and schema changes made
by operators) is bounded by ``idle_in_transaction_session_timeout``.

Fencing: every write for leased work names the lease it is made under (key, owner,
epoch). ``tidings_fence`` reads that lease row ``FOR SHARE`` in the same statement and
refuses the write (SQLSTATE ``TDF01``) unless the row still carries that owner and
epoch; a lease taken over gets a new epoch, and the share lock makes the taking wait
for a write under the old epoch that is already running, so a stale holder's write is
refused whatever its timing (REFERENCE §11: Kleppmann's fencing token, Temporal's
``range_id``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["FENCED", "KEY_TAKEN", "NO_CREDIT", "V5"]

FENCED: Final = "TDF01"
"""SQLSTATE of a write refused by its fence."""
KEY_TAKEN: Final = "TDK01"
"""SQLSTATE of an append whose idempotency key a live row holds already."""
NO_CREDIT: Final = "TDC01"
"""SQLSTATE of a replay batch its requester's credit does not cover."""

V5: Final = r"""
ALTER TABLE leases ADD COLUMN epoch bigint NOT NULL DEFAULT 0;
CREATE SEQUENCE lease_epochs;

CREATE TABLE relay_tokens (
    token text COLLATE "C" PRIMARY KEY,
    first_seq bigint,
    n integer NOT NULL,
    made_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION tidings_fence(f_key text, f_owner text, f_epoch bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF f_key IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM leases WHERE key = f_key AND owner = f_owner AND epoch = f_epoch FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the lease % is no longer held by % under epoch %', f_key, f_owner, f_epoch
            USING ERRCODE = 'TDF01';
    END IF;
END $$;

CREATE FUNCTION tidings_add_stats(s_scope text[], s_key text[], s_name text[], s_delta bigint[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO stats(scope, key, name, value)
    SELECT sc, k, nm, sum(d) FROM unnest(s_scope, s_key, s_name, s_delta) AS x(sc, k, nm, d)
    GROUP BY sc, k, nm HAVING sum(d) <> 0 ORDER BY sc, k, nm
    ON CONFLICT (scope, key, name) DO UPDATE SET value = stats.value + excluded.value
$$;

-- Appends: one group of publishes. Locks log_head, then namespace_heads in name order.
-- t_token/t_count: the relay tokens of the group's forwarded publishes, each with its
-- number of events, in the order of the group (NULL for those not forwarded).
CREATE FUNCTION tidings_append(
    p_ns text[], p_ts bigint[], p_src text[], p_data bytea[], p_headers bytea[],
    t_token text[], t_count integer[], p_origin text,
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS TABLE(o_seq bigint, o_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    total bigint := coalesce(array_length(p_ns, 1), 0);
    head bigint;
BEGIN
    IF total > 0 THEN
        UPDATE log_head SET seq = seq + total RETURNING seq INTO head;
        IF t_token IS NOT NULL THEN
            INSERT INTO relay_tokens(token, first_seq, n)
            SELECT tk, head - total + 1 + before, c FROM (
                SELECT tk, c, coalesce(sum(c) OVER (ORDER BY o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                    AS before
                FROM unnest(t_token, t_count) WITH ORDINALITY AS t(tk, c, o)
            ) AS q WHERE tk IS NOT NULL;
        END IF;
        RETURN QUERY
        WITH x AS (
            SELECT * FROM unnest(p_ns, p_ts, p_src, p_data, p_headers) WITH ORDINALITY
                AS x(ns, ts, src, data, headers, ord)
        ), counts AS (
            SELECT ns, count(*) AS n FROM x GROUP BY ns
        ), heads AS (
            INSERT INTO namespace_heads(namespace, last_id) SELECT ns, n FROM counts ORDER BY ns
            ON CONFLICT (namespace) DO UPDATE SET last_id = namespace_heads.last_id + excluded.last_id
            RETURNING namespace, last_id
        ), numbered AS (
            SELECT x.*, head - total + x.ord AS seq,
                   h.last_id - c.n + row_number() OVER (PARTITION BY x.ns ORDER BY x.ord) AS id
            FROM x JOIN counts c ON c.ns = x.ns JOIN heads h ON h.namespace = x.ns
        ), ins AS (
            INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, data, headers)
            SELECT n.seq, n.ns, n.id, NULLIF(n.id - 1, 0), n.ts, n.src, n.data, n.headers FROM numbered n
            RETURNING seq, id
        )
        SELECT ins.seq, ins.id FROM ins ORDER BY ins.seq;
        PERFORM pg_notify('tidings', p_origin || ' log ' || head);
    END IF;
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
END $$;

-- A forwarded publish whose owner did not answer in time: withdraw its token, so the owner
-- can no longer store it. Returns NULL when withdrawn (store it here), else the first seq
-- and count the owner stored it under.
CREATE FUNCTION tidings_withdraw_relay(p_token text) RETURNS TABLE(o_first bigint, o_n integer)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO relay_tokens(token, first_seq, n) VALUES (p_token, NULL, 0) ON CONFLICT (token) DO NOTHING;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT first_seq, n FROM relay_tokens WHERE token = p_token;
END $$;

CREATE FUNCTION tidings_heartbeat(p_node text, p_url text, p_forget double precision)
RETURNS TABLE(o_id text, o_url text, o_started bigint, o_seen_ago bigint)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO broadcasters(id, url, started_at, seen_at) VALUES (p_node, p_url, now(), clock_timestamp())
    ON CONFLICT (id) DO UPDATE SET url = excluded.url, seen_at = excluded.seen_at;
    -- Rows another heartbeat is deleting right now are left to it, not waited for.
    DELETE FROM broadcasters WHERE id IN (
        SELECT b.id FROM broadcasters b WHERE b.seen_at < clock_timestamp() - make_interval(secs => p_forget)
        ORDER BY b.id FOR UPDATE SKIP LOCKED
    );
    DELETE FROM relay_tokens WHERE token IN (
        SELECT r.token FROM relay_tokens r WHERE r.made_at < clock_timestamp() - interval '10 minutes'
        ORDER BY r.token LIMIT 1000 FOR UPDATE SKIP LOCKED
    );
    RETURN QUERY SELECT b.id, b.url, (extract(epoch FROM b.started_at) * 1000)::bigint,
        (extract(epoch FROM clock_timestamp() - b.seen_at) * 1000)::bigint
    FROM broadcasters b ORDER BY b.id;
END $$;

CREATE FUNCTION tidings_leave(p_node text) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM leases WHERE owner = p_node;
    DELETE FROM broadcasters WHERE id = p_node;
$$;

-- ALTER SEQUENCE makes every other nextval of it wait for this commit: held here only
-- while the server runs this one statement.
CREATE FUNCTION tidings_take_ids(p_n bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    base bigint;
BEGIN
    ALTER SEQUENCE notifications_id_seq INCREMENT BY 1;
    base := nextval('notifications_id_seq');
    IF p_n > 1 THEN
        PERFORM setval('notifications_id_seq', base + p_n - 1);
    END IF;
    RETURN base;
END $$;

CREATE FUNCTION tidings_move_cursor(f_key text, f_owner text, f_epoch bigint, p_sub bigint, p_cursor bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    UPDATE subscriptions SET cursor = p_cursor WHERE id = p_sub;
END $$;

-- Pending notifications of a subscription for events (seq, namespace), under ``p_ids``
-- (set aside before a push) or new ids increasing in event order; their ids.
CREATE FUNCTION tidings_insert_pending(p_ids bigint[], p_sub bigint, p_seqs bigint[], p_ns text[], p_now bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[] := p_ids;
    k integer := coalesce(array_length(p_seqs, 1), 0);
BEGIN
    IF k = 0 THEN
        RETURN '{}';
    END IF;
    IF ids IS NULL THEN
        SELECT array_agg(v ORDER BY v) INTO ids
        FROM (SELECT nextval('notifications_id_seq') AS v FROM generate_series(1, k)) AS q;
    END IF;
    INSERT INTO notifications(id, subscription_id, seq, namespace, created_at, sent)
    SELECT i, p_sub, s, ns, p_now, false FROM unnest(ids, p_seqs, p_ns) AS x(i, s, ns);
    RETURN ids;
END $$;

CREATE FUNCTION tidings_open_notifications(
    f_key text, f_owner text, f_epoch bigint, p_sub bigint, p_cursor bigint,
    p_ids bigint[], p_seqs bigint[], p_ns text[], p_now bigint,
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    UPDATE subscriptions SET cursor = p_cursor WHERE id = p_sub;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    ids := tidings_insert_pending(p_ids, p_sub, p_seqs, p_ns, p_now);
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
    RETURN ids;
END $$;

CREATE FUNCTION tidings_record_confirmed(
    f_key text, f_owner text, f_epoch bigint, p_sub bigint, p_subscriber text,
    p_ids bigint[], p_ns text[], p_seqs bigint[], p_eids bigint[], p_srcs text[], p_tss bigint[],
    p_created bigint, p_now bigint, p_cursor bigint,
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    INSERT INTO deliveries(notification_id, subscription_id, subscriber, namespace, seq, event_id, source,
                           event_timestamp, created_at, settled_at, attempts, outcome, replay)
    SELECT i, p_sub, p_subscriber, ns, s, eid, src, ts, p_created, p_now, 1, 'confirmed', false
    FROM unnest(p_ids, p_ns, p_seqs, p_eids, p_srcs, p_tss) AS x(i, ns, s, eid, src, ts);
    UPDATE subscriptions SET cursor = GREATEST(cursor, p_cursor) WHERE id = p_sub;
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
END $$;

-- Counter increments that apply per notification: row k applies when notification
-- st_id[k] was among g_ids, and, if st_unsent[k], only if it was never marked sent.
CREATE FUNCTION tidings_add_stats_of(
    g_ids bigint[], g_sent boolean[], st_id bigint[], st_unsent boolean[],
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS void LANGUAGE sql AS $$
    INSERT INTO stats(scope, key, name, value)
    SELECT sc, k, nm, sum(d)
    FROM unnest(st_id, st_unsent, s_scope, s_key, s_name, s_delta) AS x(i, unsent, sc, k, nm, d)
    JOIN unnest(g_ids, g_sent) AS g(i, sent) ON g.i = x.i
    WHERE NOT x.unsent OR NOT g.sent
    GROUP BY sc, k, nm HAVING sum(d) <> 0 ORDER BY sc, k, nm
    ON CONFLICT (scope, key, name) DO UPDATE SET value = stats.value + excluded.value
$$;

CREATE FUNCTION tidings_settle(
    f_key text, f_owner text, f_epoch bigint, p_ids bigint[], p_now bigint,
    st_id bigint[], st_unsent boolean[], s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    g_ids bigint[];
    g_sent boolean[];
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    INSERT INTO deliveries(notification_id, subscription_id, subscriber, namespace, seq, event_id, source,
                           event_timestamp, created_at, settled_at, attempts, outcome, replay)
    SELECT n.id, n.subscription_id, COALESCE(s.subscriber, ''), n.namespace, n.seq,
           COALESCE(e.id, r.event_id, 0), COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp),
           n.created_at, p_now, n.attempts + 1, 'confirmed', r.id IS NOT NULL
    FROM notifications n LEFT JOIN subscriptions s ON s.id = n.subscription_id
    LEFT JOIN events e ON e.seq = n.seq LEFT JOIN replay_notes r ON r.id = n.id
    WHERE n.id = ANY(p_ids) ORDER BY array_position(p_ids, n.id);
    WITH gone AS (DELETE FROM notifications WHERE id = ANY(p_ids) RETURNING id, sent)
    SELECT coalesce(array_agg(id), '{}'), coalesce(array_agg(sent), '{}') INTO g_ids, g_sent FROM gone;
    PERFORM tidings_add_stats_of(g_ids, g_sent, st_id, st_unsent, s_scope, s_key, s_name, s_delta);
    RETURN g_ids;
END $$;

CREATE FUNCTION tidings_mark_sent(
    f_key text, f_owner text, f_epoch bigint, p_ids bigint[],
    st_id bigint[], s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    g_ids bigint[];
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    WITH m AS (UPDATE notifications SET sent = true WHERE sent = false AND id = ANY(p_ids) RETURNING id)
    SELECT coalesce(array_agg(id), '{}') INTO g_ids FROM m;
    PERFORM tidings_add_stats_of(g_ids, array_fill(false, ARRAY[coalesce(array_length(g_ids, 1), 0)]),
                                 st_id, array_fill(false, ARRAY[coalesce(array_length(st_id, 1), 0)]),
                                 s_scope, s_key, s_name, s_delta);
    RETURN g_ids;
END $$;

CREATE FUNCTION tidings_count_attempt(
    f_key text, f_owner text, f_epoch bigint, p_ids bigint[], p_ks integer[],
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    UPDATE notifications n SET attempts = n.attempts + x.k
    FROM unnest(p_ids, p_ks) AS x(id, k) WHERE n.id = x.id;
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
END $$;

CREATE FUNCTION tidings_dead_letter(
    f_key text, f_owner text, f_epoch bigint,
    l_ids bigint[], l_subs bigint[], l_subscribers text[], l_seqs bigint[], l_ns text[], l_eids bigint[],
    l_attempts integer[], l_reasons text[], l_dead_at bigint[],
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    g_ids bigint[];
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    INSERT INTO deliveries(notification_id, subscription_id, subscriber, namespace, seq, event_id, source,
                           event_timestamp, created_at, settled_at, attempts, outcome, replay)
    SELECT n.id, n.subscription_id, x.subscriber, n.namespace, n.seq, x.event_id,
           COALESCE(e.source, r.source), COALESCE(e.timestamp, r.timestamp), n.created_at, x.dead_at, x.attempts,
           'dead', r.id IS NOT NULL
    FROM unnest(l_ids, l_subscribers, l_eids, l_dead_at, l_attempts) WITH ORDINALITY
        AS x(id, subscriber, event_id, dead_at, attempts, ord)
    JOIN notifications n ON n.id = x.id
    LEFT JOIN events e ON e.seq = n.seq LEFT JOIN replay_notes r ON r.id = n.id
    ORDER BY x.ord;
    WITH gone AS (DELETE FROM notifications WHERE id = ANY(l_ids) RETURNING id)
    SELECT coalesce(array_agg(id), '{}') INTO g_ids FROM gone;
    INSERT INTO dead_letters(id, subscription_id, subscriber, seq, namespace, event_id, attempts, reason, dead_at)
    SELECT x.* FROM unnest(l_ids, l_subs, l_subscribers, l_seqs, l_ns, l_eids, l_attempts, l_reasons, l_dead_at)
        AS x(id, sub, subscriber, seq, ns, eid, attempts, reason, dead_at)
    WHERE x.id = ANY(g_ids);
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
    RETURN g_ids;
END $$;

-- A replay's debit: the subscriber, or NULL (nothing to write): the replay is not running
-- or the subscription is gone, or, for pushes already done, the replay does not exist
-- ('' then if the subscription is gone).
CREATE FUNCTION tidings_replay_debit(p_replay bigint, p_sub bigint, p_n bigint, p_done boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text;
    req text;
    price bigint;
    who text;
    debit bigint;
BEGIN
    SELECT state, requester, replays.price INTO st, req, price FROM replays WHERE id = p_replay FOR UPDATE;
    IF NOT FOUND OR (st <> 'running' AND NOT p_done) THEN
        RETURN NULL;
    END IF;
    SELECT subscriber INTO who FROM subscriptions WHERE id = p_sub FOR SHARE;
    IF who IS NULL AND NOT p_done THEN
        RETURN NULL;
    END IF;
    debit := price * p_n;
    IF debit <> 0 THEN
        UPDATE credits SET balance = balance - debit WHERE principal = req AND balance >= debit;
        IF NOT FOUND THEN
            RAISE EXCEPTION '%''s credit does not cover %', req, debit USING ERRCODE = 'TDC01';
        END IF;
        UPDATE replays SET charged = charged + debit WHERE id = p_replay;
    END IF;
    RETURN coalesce(who, '');
END $$;

CREATE FUNCTION tidings_record_replay_batch(
    f_key text, f_owner text, f_epoch bigint, p_replay bigint, p_sub bigint, p_position bigint, p_now bigint,
    p_ids bigint[], p_seqs bigint[], p_ns text[], p_eids bigint[], p_prevs bigint[], p_tss bigint[],
    p_srcs text[], p_headers bytea[], p_data bytea[],
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
    k integer := coalesce(array_length(p_seqs, 1), 0);
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    IF tidings_replay_debit(p_replay, p_sub, k, false) IS NULL THEN
        RETURN NULL;
    END IF;
    ids := tidings_insert_pending(p_ids, p_sub, p_seqs, p_ns, p_now);
    IF k > 0 THEN
        INSERT INTO replay_notes(id, replay_id, seq, namespace, event_id, prev_id, timestamp, source, headers, data)
        SELECT i, p_replay, s, ns, eid, pv, ts, src, h, d
        FROM unnest(ids, p_seqs, p_ns, p_eids, p_prevs, p_tss, p_srcs, p_headers, p_data)
            AS x(i, s, ns, eid, pv, ts, src, h, d);
    END IF;
    UPDATE replays SET position = p_position, sent = sent + k, updated_at = p_now WHERE id = p_replay;
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
    RETURN ids;
END $$;

CREATE FUNCTION tidings_record_replay_confirmed(
    f_key text, f_owner text, f_epoch bigint, p_replay bigint, p_sub bigint, p_position bigint,
    p_created bigint, p_now bigint,
    p_ids bigint[], p_ns text[], p_seqs bigint[], p_eids bigint[], p_srcs text[], p_tss bigint[],
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    who text;
    k integer := coalesce(array_length(p_ids, 1), 0);
BEGIN
    PERFORM tidings_fence(f_key, f_owner, f_epoch);
    who := tidings_replay_debit(p_replay, p_sub, k, true);
    IF who IS NULL THEN
        RETURN false;
    END IF;
    INSERT INTO deliveries(notification_id, subscription_id, subscriber, namespace, seq, event_id, source,
                           event_timestamp, created_at, settled_at, attempts, outcome, replay)
    SELECT i, p_sub, who, ns, s, eid, src, ts, p_created, p_now, 1, 'confirmed', true
    FROM unnest(p_ids, p_ns, p_seqs, p_eids, p_srcs, p_tss) AS x(i, ns, s, eid, src, ts);
    UPDATE replays SET position = p_position, sent = sent + k, updated_at = p_now WHERE id = p_replay;
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
    RETURN true;
END $$;

CREATE FUNCTION tidings_replay_id_base(p_replay bigint, p_n bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    kept bigint;
BEGIN
    SELECT base INTO kept FROM replay_ids WHERE replay_id = p_replay;
    IF FOUND THEN
        RETURN kept;
    END IF;
    INSERT INTO replay_ids(replay_id, base) VALUES (p_replay, tidings_take_ids(p_n))
    ON CONFLICT (replay_id) DO NOTHING;
    SELECT base INTO kept FROM replay_ids WHERE replay_id = p_replay;
    RETURN kept;
END $$;
"""
"""Migration 5: lease epochs, relay tokens, and the one-statement writes above."""
