"""The SQLite store's idempotency keys: columns of their events' rows, found through an
index the single writer keeps in memory.

Why not a table ordered by the key: a B-tree ordered by a 36-character key costs about
4 µs of the writer's time per key even when keys come in order, as much as the event's
own row, and made a keyed publish-100 0.6-0.7 times a plain one (BENCHMARKS.md,
"Idempotency keys"). Three columns of the event's row (``idem_key``, ``idem_fp``,
``idem_expires``) cost next to nothing: the row is written anyway, in ``seq`` order. An
index on ``idem_expires`` did cost: a keyed publish-100 was 0.68-0.84 of a plain one
with it, 0.87-0.98 without. So each transaction that writes keys records one
``key_spans`` row instead: the seqs its keyed rows lie between and their earliest and
latest expiry. The reclaimer and a start find the live keys through the spans, reading
only the rows within them.

The writer maps ``hash((namespace, key))`` to the seq of the event that holds the key.
Keys in ``publish_keys`` (written before schema version 3, or whose event was deleted
while they lived, which a trigger moves there: retention and the archive delete events,
a key outlives them for its window) are found by the key itself, at location 0.
JetStream keeps its duplicate window in memory the same way; the cost is in
BENCHMARKS.md. The index holds at most ``MAX_LIVE_KEYS`` keys (about 500 MiB): past
that a keyed append fails with ``KeysFull`` (answered ``Busy``) until windows pass.

What keeps it right: a hit is always checked against the row it points to, so a stale
entry or two keys of one hash never make an event a repeat; a *missing* entry could
store a repeat twice, so an entry is added in the transaction that writes its row
(undone if that transaction fails) and removed only after the commit that clears its
row. A key whose hash an entry holds for another key goes to ``spill``,
looked up by the key itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any, Final

from ._records import KeyRecord

__all__ = ["KEY_COLS", "MAX_LIVE_KEYS", "V_KEYS_IN_EVENTS", "V_KEY_COLUMNS", "KeyIndex", "expire", "record_span"]

KEY_COLS: Final = "idem_key, idem_fp, idem_expires"

MAX_LIVE_KEYS = 5_000_000
"""The most keys the writer's index holds (about 104 MiB per million, BENCHMARKS.md)."""

V_KEY_COLUMNS: Final = (
    ("events", "idem_key TEXT"), ("events", "idem_fp BLOB"), ("events", "idem_expires INTEGER"),
    # The seq a kept key came from: the writer's index entry may name that row, and only a
    # seq says whose an entry is (``KeyIndex.drop``).
    ("publish_keys", "seq INTEGER"),
)
"""Schema version 3 (``_sqlite_migrations``): the columns it adds, as (table, column)."""

V_KEYS_IN_EVENTS: Final = (
    "CREATE TABLE IF NOT EXISTS key_spans (first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, "
    "expires_min INTEGER NOT NULL, expires_max INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS key_spans_expiry ON key_spans(expires_min)",
    # A keyed event deleted while its key may live (retention, the archive): the key
    # stays for its window, in publish_keys. Keys the reclaimer has cleared are not moved.
    "CREATE TRIGGER IF NOT EXISTS events_keep_key BEFORE DELETE ON events WHEN OLD.idem_key IS NOT NULL "
    "BEGIN INSERT OR REPLACE INTO publish_keys(namespace, key, fingerprint, source, event_id, expires_at, seq) "
    "VALUES (OLD.namespace, OLD.idem_key, OLD.idem_fp, OLD.source, OLD.id, OLD.idem_expires, OLD.seq); END",
)
"""Schema version 3, after its columns."""

_Key = tuple[str, str]
_hash = hash
"""Of ``(namespace, key)``: any function will do, collisions included (tests use a bad one)."""


class KeyIndex:
    """Where each live key's row is. Written by the writer thread only; ``find`` is read
    from the readers' threads (a dict read is atomic). Entries of the transaction in
    progress are in the maps at once, with an undo log: a reader that meets one finds no
    committed row there, as if it were not yet written."""

    def __init__(self) -> None:
        self.limit = MAX_LIVE_KEYS
        self._where: dict[int, int] = {}
        self._spill: dict[_Key, int] = {}
        self._undo: list[int | tuple[bool, Any, int | None]] = []
        """What this transaction set: a hash it added to ``_where`` (the common case, kept
        small), or (in spill, the map's key, its previous value or None)."""
        self._drops: list[tuple[int, _Key, int]] = []
        """(hash, key, location) to remove once the transaction in progress commits."""

    def __len__(self) -> int:
        return len(self._where) + len(self._spill)

    # --- the writer's transaction -------------------------------------------------

    def load(self, c: sqlite3.Connection) -> None:
        """Rebuild from the store (at start, before any job): every key a row holds."""
        self._where.clear()
        self._spill.clear()
        # Kept keys by the key itself: all of them are at location 0.
        self._spill.update(((ns, key), 0) for ns, key in c.execute("SELECT namespace, key FROM publish_keys"))
        spans = c.execute("SELECT first_seq, last_seq FROM key_spans ORDER BY first_seq").fetchall()
        rows: Iterable[tuple[int, str, str]] = chain.from_iterable(
            c.execute("SELECT seq, namespace, idem_key FROM events WHERE seq BETWEEN ? AND ? "
                      "AND idem_key IS NOT NULL ORDER BY seq", span).fetchall()
            for span in spans
        )
        for seq, ns, key in rows:
            self._stage(c, ns, key, seq, reuse=False)
        self.commit()

    def snapshot(self) -> tuple[int, int]:
        return len(self._undo), len(self._drops)

    def restore(self, snap: tuple[int, int]) -> None:
        undo = self._undo
        while len(undo) > snap[0]:
            item = undo.pop()
            if isinstance(item, int):
                del self._where[item]
                continue
            spilled, key, before = item
            target: dict[Any, int] = self._spill if spilled else self._where
            if before is None:
                del target[key]
            else:
                target[key] = before
        del self._drops[snap[1]:]

    def commit(self) -> None:
        self._undo.clear()
        for h, k, loc in self._drops:
            if loc and self._where.get(h) == loc:  # a seq names one row, so one key
                del self._where[h]
            if self._spill.get(k) == loc:
                del self._spill[k]
        self._drops.clear()

    def abort(self) -> None:
        self.restore((0, 0))

    def claim(self, k: _Key, seq: int) -> bool:
        """Stage the key ``k`` (namespace, key) at ``seq`` if no entry names its hash or the
        key itself (every key but a retried one); False: look at the rows (``taken``, then
        ``add``). The publish path's one call per key: kept to a hash and a look-up or two."""
        h = _hash(k)
        where = self._where
        if h in where or (self._spill and k in self._spill):
            return False
        where[h] = seq
        self._undo.append(h)
        return True

    def claim_all(self, ks: Sequence[_Key], seqs: Sequence[int]) -> bool:
        """Stage every key of ``ks`` at its seq if none of them needs a look at the rows
        (no entry names its hash or the key, no two share a hash); else stage nothing and
        return False: the caller claims them one by one (:meth:`claim`). An append of fresh
        keys, nearly every one, so pays a few loops in C rather than a call per key."""
        hs = list(map(_hash, ks))
        where = self._where
        if (self._spill and not self._spill.keys().isdisjoint(ks)) or not where.keys().isdisjoint(hs) \
                or len(set(hs)) < len(hs):
            return False
        where.update(zip(hs, seqs, strict=True))
        self._undo.extend(hs)
        return True

    def taken(self, c: sqlite3.Connection, ns: str, key: str, now: int) -> bool:
        """Whether a row of this transaction or a committed one holds ``key`` live at ``now``."""
        return bool(self.find(c, [(ns, key)], now))

    def add(self, c: sqlite3.Connection, ns: str, key: str, seq: int) -> None:
        """``key`` is written in the row ``seq`` of this transaction."""
        self._stage(c, ns, key, seq)

    def drop(self, ns: str, key: str, loc: int) -> None:
        """The row at ``loc`` no longer holds ``key`` once this transaction commits. By
        hash only an entry naming a seq goes (a seq is one row, so one key); location 0
        is the key's own entry in ``_spill``."""
        self._drops.append((_hash((ns, key)), (ns, key), loc))

    def _stage(self, c: sqlite3.Connection, ns: str, key: str, seq: int, reuse: bool = True) -> None:
        h, k = _hash((ns, key)), (ns, key)
        spilled = self._spill.get(k)
        if reuse:
            # Its earlier rows, wherever they are (its window has passed: ``taken`` said
            # so): kept in publish_keys when its event was deleted, or a spilled entry's.
            self._clear(c, ns, key, 0)
            if spilled is not None:
                self._clear(c, ns, key, spilled)
        held = self._where.get(h)
        if held is None or _holds(c, ns, key, held):  # free, or this key's own earlier row
            if held is not None and reuse:  # its window has passed: the row gives it up
                self._clear(c, ns, key, held)
            self._set(False, h, seq)
        else:  # another key's, or a row not written yet (an earlier event of this append)
            self._set(True, k, seq)

    def _set(self, spilled: bool, key: Any, seq: int) -> None:
        target: dict[Any, int] = self._spill if spilled else self._where
        self._undo.append((spilled, key, target.get(key)))
        target[key] = seq

    def _clear(self, c: sqlite3.Connection, ns: str, key: str, loc: int) -> None:
        """A key taken again after its window: its earlier row gives it up, so each key
        has one row (the reclaimer counts keys, not rows)."""
        if loc:
            c.execute("UPDATE events SET idem_key = NULL, idem_fp = NULL, idem_expires = NULL "
                      "WHERE seq = ? AND namespace = ? AND idem_key = ?", (loc, ns, key))
            self.drop(ns, key, loc)
            return
        for (seq,) in c.execute("DELETE FROM publish_keys WHERE namespace = ? AND key = ? RETURNING seq",
                                (ns, key)).fetchall():
            _drop_kept(self, ns, key, seq)

    def _candidates(self, ns: str, key: str) -> list[int]:
        found = (self._where.get(_hash((ns, key))), self._spill.get((ns, key)))
        return [loc for loc in found if loc is not None]

    # --- readers --------------------------------------------------------------------

    def find(self, c: sqlite3.Connection, keys: Sequence[_Key], now: int) -> dict[_Key, KeyRecord]:
        """The live records of ``keys`` (committed), on any connection."""
        out: dict[_Key, KeyRecord] = {}
        for ns, key in keys:
            for loc in (*self._candidates(ns, key), 0):
                rec = _record(c, ns, key, loc, now)
                if rec is not None:
                    out[(ns, key)] = rec
                    break
        return out


def _holds(c: sqlite3.Connection, ns: str, key: str, seq: int) -> bool:
    return c.execute(
        "SELECT 1 FROM events WHERE seq = ? AND namespace = ? AND idem_key = ?", (seq, ns, key)
    ).fetchone() is not None


def _record(c: sqlite3.Connection, ns: str, key: str, loc: int, now: int) -> KeyRecord | None:
    if loc:
        r = c.execute(
            "SELECT idem_fp, source, id, idem_expires FROM events WHERE seq = ? AND namespace = ? AND idem_key = ? "
            "AND idem_expires > ?", (loc, ns, key, now)
        ).fetchone()
    else:
        r = c.execute(
            "SELECT fingerprint, source, event_id, expires_at FROM publish_keys WHERE namespace = ? AND key = ? "
            "AND expires_at > ?", (ns, key, now)
        ).fetchone()
    return None if r is None else KeyRecord(ns, key, bytes(r[0]), r[1], r[2], r[3])


def record_span(c: sqlite3.Connection, seqs: Sequence[int], expiries: Sequence[int]) -> None:
    """The keys just written in the rows ``seqs`` (in order) of this transaction."""
    c.execute("INSERT INTO key_spans VALUES (?, ?, ?, ?)", (seqs[0], seqs[-1], min(expiries), max(expiries)))


def expire(c: sqlite3.Connection, index: KeyIndex, now: int, limit: int) -> int:
    """Clear the keys expired at ``now``, span by span until at least ``limit`` are
    (writer job); their index entries go when the transaction commits."""
    n = 0
    while n < limit:
        spans = c.execute(
            "SELECT first_seq, last_seq FROM key_spans WHERE expires_min <= ? ORDER BY expires_min LIMIT 64", (now,)
        ).fetchall()
        if not spans:
            break
        for lo, hi in spans:
            rows = c.execute(
                "SELECT seq, namespace, idem_key, idem_expires FROM events WHERE seq BETWEEN ? AND ? "
                "AND idem_key IS NOT NULL", (lo, hi),
            ).fetchall()
            gone = [r for r in rows if r[3] <= now]
            for i in range(0, len(gone), 500):
                chunk = [r[0] for r in gone[i : i + 500]]
                c.execute(
                    "UPDATE events SET idem_key = NULL, idem_fp = NULL, idem_expires = NULL "
                    f"WHERE seq IN ({','.join('?' * len(chunk))})", chunk,
                )
            for seq, ns, key, _ in gone:
                index.drop(ns, key, seq)
            rest = [r[3] for r in rows if r[3] > now]
            if rest:  # keys of a longer window in the same transaction
                c.execute("UPDATE key_spans SET expires_min = ? WHERE first_seq = ?", (min(rest), lo))
            else:
                c.execute("DELETE FROM key_spans WHERE first_seq = ?", (lo,))
            n += len(gone)
            if n >= limit:
                break
    kept = c.execute(
        "SELECT namespace, key, seq FROM publish_keys WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
        (now, max(0, limit - n)),
    ).fetchall()
    for ns, key, seq in kept:
        c.execute("DELETE FROM publish_keys WHERE namespace = ? AND key = ?", (ns, key))
        _drop_kept(index, ns, key, seq)
    return n + len(kept)


def _drop_kept(index: KeyIndex, ns: str, key: str, seq: int | None) -> None:
    # Its entry: at location 0 (kept at start), or the seq of the event the trigger moved
    # it from (its entry was made when that row was written).
    index.drop(ns, key, 0)
    if seq is not None:
        index.drop(ns, key, seq)
