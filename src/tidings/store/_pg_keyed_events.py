"""Migration 8: idempotency keys in their events' rows, as the SQLite store keeps them.

Why: in migration 7 each key was a row of ``publish_keys`` (a second tuple, its primary
key and its expiry index, and their WAL). ``python -m bench.pg_append`` measured that row
at 15-20 µs of the database's time per event, as much as the event itself, and a keyed
publish-100 at 0.65-0.76 of a plain one (BENCHMARKS.md, "Idempotency keys"). Three
columns of the event's row cost next to nothing: the row is written anyway.

What keeps the rules of migration 7:

- **One live key per namespace, across members.** A unique partial index on
  ``(namespace, idem_key)``: two members appending one key at once, the later insert
  waits for the earlier commit and fails (``unique_violation`` on ``events_idem_key``),
  as the same key twice in one append does. The store answers that ``KeyTaken``.
- **A key past its window names a new event.** Its old row still holds it until the
  reclaimer clears it; an append that meets it (the same ``unique_violation``) is run once
  more with ``p_clear``, which first gives up the expired keys among its own, in the same
  statement: if it fails again nothing was given up, and no lock is held across a round
  trip (a client stopped between two statements of a transaction would hold ``log_head``
  and stop every member's appends). The common append, with fresh keys, reads nothing.
- **A key outlives its event** (retention and the archive delete events): a trigger moves
  the key of a deleted row to ``publish_keys``, which holds migration 7's keys as well;
  ``tidings_append`` refuses a key live there (and deletes it there once its window has
  passed), checked *after* its own insert so that a delete committed meanwhile (whose key
  the trigger just moved) is seen.
- **Keys expire with their window, and their space is reclaimed.** Each append that writes
  keys records one ``key_spans`` row (the seqs its keyed rows lie between, their earliest
  and latest expiry), as the SQLite store does; ``tidings_expire_keys`` clears the expired
  keys span by span (``SKIP LOCKED``: members reclaiming at once split the spans), then
  the expired rows of ``publish_keys``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXPIRE_KEYS", "FIND_KEYS", "KEY_INDEX", "V_KEYED_EVENTS"]

KEY_INDEX: Final = "events_idem_key"
"""The unique index whose ``unique_violation`` says a key of an append is held by a row."""

FIND_KEYS: Final = (
    "SELECT e.namespace, e.idem_key, e.idem_fp, e.source, e.id, e.idem_expires "
    "FROM unnest($1::text[], $2::text[]) AS q(ns, key) "
    "JOIN events e ON e.namespace = q.ns AND e.idem_key = q.key WHERE e.idem_expires > $3 "
    "UNION ALL "
    "SELECT k.namespace, k.key, k.fingerprint, k.source, k.event_id, k.expires_at "
    "FROM unnest($1::text[], $2::text[]) AS q(ns, key) "
    "JOIN publish_keys k ON k.namespace = q.ns AND k.key = q.key WHERE k.expires_at > $3"
)

EXPIRE_KEYS: Final = "SELECT tidings_expire_keys($1, $2)"

V_KEYED_EVENTS: Final = r"""
ALTER TABLE events ADD COLUMN idem_key text COLLATE "C", ADD COLUMN idem_fp bytea, ADD COLUMN idem_expires bigint;
CREATE UNIQUE INDEX events_idem_key ON events(namespace, idem_key) WHERE idem_key IS NOT NULL;

CREATE TABLE key_spans (
    first_seq bigint PRIMARY KEY,
    last_seq bigint NOT NULL,
    expires_min bigint NOT NULL,
    expires_max bigint NOT NULL
);
CREATE INDEX key_spans_expiry ON key_spans(expires_min);

-- A keyed event deleted while its key may live: the key stays for its window.
CREATE FUNCTION tidings_keep_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO publish_keys(namespace, key, fingerprint, source, event_id, expires_at)
    VALUES (OLD.namespace, OLD.idem_key, OLD.idem_fp, OLD.source, OLD.id, OLD.idem_expires)
    ON CONFLICT (namespace, key) DO UPDATE SET fingerprint = excluded.fingerprint,
        source = excluded.source, event_id = excluded.event_id, expires_at = excluded.expires_at;
    RETURN OLD;
END $$;
CREATE TRIGGER events_keep_key BEFORE DELETE ON events
    FOR EACH ROW WHEN (OLD.idem_key IS NOT NULL) EXECUTE FUNCTION tidings_keep_key();

DROP FUNCTION tidings_append(text[], bigint[], text[], bytea[], bytea[], text[], integer[], text,
    text[], text[], text[], bigint[], text[], bytea[], bigint[]);

-- Migration 7's arguments: k_key/k_fp/k_exp per event (NULL: no key); and p_clear: give up
-- first the keys of this append whose window has passed by its earliest time.
CREATE FUNCTION tidings_append(
    p_ns text[], p_ts bigint[], p_src text[], p_data bytea[], p_headers bytea[],
    t_token text[], t_count integer[], p_origin text,
    s_scope text[], s_key text[], s_name text[], s_delta bigint[],
    k_key text[], k_fp bytea[], k_exp bigint[], p_clear boolean DEFAULT false
) RETURNS TABLE(o_seq bigint, o_id bigint, o_ts bigint)
LANGUAGE plpgsql AS $$
DECLARE
    total bigint := coalesce(array_length(p_ns, 1), 0);
    head bigint;
    kept bigint;
BEGIN
    IF p_clear THEN
        UPDATE events e SET idem_key = NULL, idem_fp = NULL, idem_expires = NULL
        FROM unnest(p_ns, k_key) AS k(ns, key)
        WHERE e.namespace = k.ns AND e.idem_key = k.key
          AND e.idem_expires <= (SELECT min(t) FROM unnest(p_ts) AS t);
    END IF;
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
            SELECT * FROM unnest(p_ns, p_ts, p_src, p_data, p_headers, k_key, k_fp, k_exp) WITH ORDINALITY
                AS x(ns, ts, src, data, headers, key, fp, exp, ord)
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
            INSERT INTO events(seq, namespace, id, prev_id, timestamp, source, data, headers,
                               idem_key, idem_fp, idem_expires)
            SELECT n.seq, n.ns, n.id, NULLIF(n.id - 1, 0), n.stamped, n.src, n.data, n.headers, n.key, n.fp,
                   CASE WHEN n.key IS NOT NULL THEN n.exp END
            FROM numbered n
            RETURNING seq, id, timestamp
        )
        SELECT ins.seq, ins.id, ins.timestamp FROM ins ORDER BY ins.seq;
        IF k_key IS NOT NULL THEN
            -- Kept keys (of deleted events) among this append's: gone, as their window has
            -- passed, or live, and the append fails. After the insert, on a snapshot of its
            -- own: a delete that committed while the insert waited on the index has moved
            -- its key here by now.
            WITH gone AS (
                DELETE FROM publish_keys pk USING unnest(p_ns, k_key) AS k(ns, key)
                WHERE pk.namespace = k.ns AND pk.key = k.key
                RETURNING pk.expires_at
            )
            SELECT count(*) INTO kept FROM gone WHERE gone.expires_at > (SELECT min(t) FROM unnest(p_ts) AS t);
            IF kept > 0 THEN
                RAISE EXCEPTION 'an idempotency key of this append is taken' USING ERRCODE = 'TDK01';
            END IF;
            INSERT INTO key_spans(first_seq, last_seq, expires_min, expires_max)
            SELECT head - total + min(k.ord), head - total + max(k.ord), min(k.exp), max(k.exp)
            FROM unnest(k_key, k_exp) WITH ORDINALITY AS k(key, exp, ord) WHERE k.key IS NOT NULL
            HAVING count(*) > 0;
        END IF;
        PERFORM pg_notify('tidings', p_origin || ' log ' || head);
    END IF;
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
END $$;

-- Clear the keys expired at p_now, span by span until at least p_limit are (or none is
-- left), then delete the expired keys kept for deleted events; returns how many.
CREATE FUNCTION tidings_expire_keys(p_now bigint, p_limit bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint := 0;
    got bigint;
    rest bigint;
    seen boolean;
    span record;
BEGIN
    LOOP
        seen := false;
        FOR span IN SELECT first_seq, last_seq FROM key_spans WHERE expires_min <= p_now
                    ORDER BY expires_min LIMIT 64 FOR UPDATE SKIP LOCKED LOOP
            seen := true;
            UPDATE events SET idem_key = NULL, idem_fp = NULL, idem_expires = NULL
            WHERE seq BETWEEN span.first_seq AND span.last_seq AND idem_key IS NOT NULL
              AND idem_expires <= p_now;
            GET DIAGNOSTICS got = ROW_COUNT;
            n := n + got;
            SELECT min(idem_expires) INTO rest FROM events
            WHERE seq BETWEEN span.first_seq AND span.last_seq AND idem_key IS NOT NULL;
            IF rest IS NULL THEN
                DELETE FROM key_spans WHERE first_seq = span.first_seq;
            ELSE  -- keys of a longer window in the same append
                UPDATE key_spans SET expires_min = rest WHERE first_seq = span.first_seq;
            END IF;
            EXIT WHEN n >= p_limit;
        END LOOP;
        EXIT WHEN NOT seen OR n >= p_limit;
    END LOOP;
    DELETE FROM publish_keys WHERE (namespace, key) IN (
        SELECT namespace, key FROM publish_keys WHERE expires_at <= p_now ORDER BY expires_at
        LIMIT greatest(p_limit - n, 0) FOR UPDATE SKIP LOCKED
    );
    GET DIAGNOSTICS got = ROW_COUNT;
    RETURN n + got;
END $$;
"""
