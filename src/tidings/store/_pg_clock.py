"""Migration: an event's timestamp never goes back within its namespace (``core.clock``).

``tidings_append`` stores each event with the later of the timestamp it was given and its
namespace's previous one (the previous event's, or the one before it in the same call),
and returns what it stored. The previous event is read after the ``log_head`` row is
locked: every append before this one has committed by then, and each statement of the
function takes a new snapshot, so it is seen. An event trimmed by retention is older
than any new stamp, so its absence changes nothing.
"""

from __future__ import annotations

from typing import Final

__all__ = ["V_CLOCK"]

V_CLOCK: Final = r"""
DROP FUNCTION tidings_append(text[], bigint[], text[], bytea[], bytea[], text[], integer[], text,
                             text[], text[], text[], bigint[]);

CREATE FUNCTION tidings_append(
    p_ns text[], p_ts bigint[], p_src text[], p_data bytea[], p_headers bytea[],
    t_token text[], t_count integer[], p_origin text,
    s_scope text[], s_key text[], s_name text[], s_delta bigint[]
) RETURNS TABLE(o_seq bigint, o_id bigint, o_ts bigint)
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
        PERFORM pg_notify('tidings', p_origin || ' log ' || head);
    END IF;
    PERFORM tidings_add_stats(s_scope, s_key, s_name, s_delta);
END $$;
"""
