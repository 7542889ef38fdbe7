"""Migration 7: publishers' idempotency keys, and ``tidings_append`` writing them in the
statement of their events. The function keeps migration 6's rule (``_pg_clock``: an
event's timestamp never goes back within its namespace). ``_pg_functions`` has the other
server-side functions and why writes are one statement each; docs/wire-format.md,
"Idempotency keys"."""

from __future__ import annotations

from typing import Final

__all__ = ["V_PUBLISH_KEYS"]

# Idempotency keys: written by tidings_append in its own statement, so a key commits with
# its event or not at all. Two members appending the same key: ON CONFLICT makes the later
# statement wait for the earlier one's commit and then see its row, live, so it writes
# nothing and fails as a whole (TDK01); its broadcaster then answers with the row's event.
V_PUBLISH_KEYS: Final = r"""
CREATE TABLE publish_keys (
    namespace text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    fingerprint bytea NOT NULL,
    source text NOT NULL,
    event_id bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX publish_keys_expiry ON publish_keys(expires_at);

DROP FUNCTION tidings_append(text[], bigint[], text[], bytea[], bytea[], text[], integer[], text,
    text[], text[], text[], bigint[]);

-- k_key/k_fp/k_exp: per event, its idempotency key (NULL: none), fingerprint and expiry.
CREATE FUNCTION tidings_append(
    p_ns text[], p_ts bigint[], p_src text[], p_data bytea[], p_headers bytea[],
    t_token text[], t_count integer[], p_origin text,
    s_scope text[], s_key text[], s_name text[], s_delta bigint[],
    k_key text[], k_fp bytea[], k_exp bigint[]
) RETURNS TABLE(o_seq bigint, o_id bigint, o_ts bigint)
LANGUAGE plpgsql AS $$
DECLARE
    total bigint := coalesce(array_length(p_ns, 1), 0);
    head bigint;
    wanted bigint;
    written bigint;
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
                   h.last_id - c.n + row_number() OVER (PARTITION BY x.ns ORDER BY x.ord) AS id,
                   GREATEST(
                       max(x.ts) OVER (PARTITION BY x.ns ORDER BY x.ord ROWS UNBOUNDED PRECEDING),
                       (SELECT p.timestamp FROM events p WHERE p.namespace = x.ns AND p.id = h.last_id - c.n)
                   ) AS stamped
            FROM x JOIN counts c ON c.ns = x.ns JOIN heads h ON h.namespace = x.ns
        ), ins AS (
            INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, data, headers)
            SELECT n.seq, n.ns, n.id, NULLIF(n.id - 1, 0), n.stamped, n.src, n.data, n.headers FROM numbered n
            RETURNING seq, id, timestamp
        )
        SELECT ins.seq, ins.id, ins.timestamp FROM ins ORDER BY ins.seq;
        IF k_key IS NOT NULL THEN
            SELECT count(*), count(DISTINCT (ns, key)) INTO wanted, written
            FROM unnest(p_ns, k_key) AS k(ns, key) WHERE key IS NOT NULL;
            IF written = wanted THEN
                INSERT INTO publish_keys(namespace, key, fingerprint, source, event_id, expires_at)
                SELECT k.ns, k.key, k.fp, k.src, e.id, k.exp
                FROM unnest(p_ns, k_key, k_fp, p_src, k_exp, p_ts) WITH ORDINALITY AS k(ns, key, fp, src, exp, ts, ord)
                JOIN events e ON e.seq = head - total + k.ord
                WHERE k.key IS NOT NULL ORDER BY k.ns, k.key
                ON CONFLICT (namespace, key) DO UPDATE SET fingerprint = excluded.fingerprint,
                    source = excluded.source, event_id = excluded.event_id, expires_at = excluded.expires_at
                WHERE publish_keys.expires_at <= (SELECT min(t) FROM unnest(p_ts) AS t);
                GET DIAGNOSTICS written = ROW_COUNT;
            END IF;
            IF written < wanted THEN
                RAISE EXCEPTION 'an idempotency key of this append is taken' USING ERRCODE = 'TDK01';
            END IF;
        END IF;
        PERFORM pg_notify('tidings', p_origin || ' log ' || head);
    END IF;
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
END $$;
"""
