"""The replay tables and the credit ledger in the SQLite store (mixed into ``SQLiteStore``)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ..core.replay import ACTIVE, append_pairs
from ..errors import LimitReached
from ._cluster import Fence
from ._records import Stat, StoredEvent
from ._replays import InsufficientCredit, ReplayCounts, ReplayRecord, ReplayStore
from ._sqlite_db import SQLiteAccess, insert_notifications, insert_rows, take_ids
from ._sqlite_deliveries import insert_confirmed
from ._sqlite_writer import lazy

__all__ = ["REPLAY_DDL", "SQLiteReplayStore", "range_rows"]

REPLAY_DDL = """
CREATE TABLE IF NOT EXISTS replays (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    requester TEXT NOT NULL,
    namespace TEXT NOT NULL,
    subscription_id INTEGER NOT NULL,
    from_id INTEGER NOT NULL,
    to_id INTEGER NOT NULL,
    open_end INTEGER NOT NULL,
    config BLOB NOT NULL,
    memo TEXT,
    state TEXT NOT NULL,
    detail TEXT NOT NULL,
    position INTEGER NOT NULL,
    sent INTEGER NOT NULL,
    expected INTEGER NOT NULL,
    price INTEGER NOT NULL,
    charged INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS replays_state ON replays(state, id);
CREATE TABLE IF NOT EXISTS replay_notes (
    id INTEGER PRIMARY KEY,
    replay_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    prev_id INTEGER,
    timestamp INTEGER NOT NULL,
    source TEXT NOT NULL,
    headers BLOB NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS replay_notes_replay ON replay_notes(replay_id, id);
CREATE TABLE IF NOT EXISTS replay_ids (
    replay_id INTEGER PRIMARY KEY,
    base INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS credits (
    principal TEXT PRIMARY KEY,
    balance INTEGER NOT NULL
) WITHOUT ROWID;
"""

_FIELDS = (
    "id", "requester", "namespace", "subscription_id", "from_id", "to_id", "open_end", "config", "memo",
    "state", "detail", "position", "sent", "expected", "price", "charged", "created_at", "updated_at",
)
_COLS = ", ".join(_FIELDS)
_EVENT_COLS = "seq, namespace, id, prev_id, timestamp, source, data, headers"


def range_rows(
    c: sqlite3.Connection, namespace: str, after_id: int, before_id: int, limit: int, pairs: bytes | None
) -> list[StoredEvent]:
    """A namespace's events with ``after_id < id < before_id``, at most ``limit``, in id
    order, with the header ``pairs`` appended (``read_range``; ``range_reader``)."""
    # Not the namespace column: it is the one asked for, and a string made per row is a
    # good part of what reading a row costs.
    rows = c.execute(
        "SELECT seq, id, prev_id, timestamp, source, data, headers FROM events "
        "WHERE namespace = ? AND id > ? AND id < ? ORDER BY id LIMIT ?",
        (namespace, after_id, before_id, limit),
    )
    return [
        StoredEvent(seq=r[0], namespace=namespace, id=r[1], prev_id=r[2], timestamp=r[3], source=r[4], data=r[5],
                    headers=r[6] if pairs is None else append_pairs(r[6], pairs))
        for r in rows
    ]


def _record(r: tuple[Any, ...]) -> ReplayRecord:
    d = dict(zip(_FIELDS, r, strict=True))
    d["open_end"] = bool(d["open_end"])
    d["config"] = msgspec.json.decode(d["config"])
    return ReplayRecord(**d)


def _stats(c: sqlite3.Connection, stats: Iterable[Stat]) -> None:
    agg: dict[tuple[str, str, str], int] = {}
    for s in stats:
        agg[(s.scope, s.key, s.name)] = agg.get((s.scope, s.key, s.name), 0) + s.delta
    rows = [(*k, v) for k, v in agg.items() if v]
    if rows:
        c.executemany(
            "INSERT INTO stats(scope, key, name, value) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(scope, key, name) DO UPDATE SET value = value + excluded.value",
            rows,
        )


def _debit(c: sqlite3.Connection, replay_id: int, subscription_id: int, n: int, *, done: bool = False) -> str | None:
    """Debit a replay's requester for ``n`` events; the subscriber, or None (nothing
    written): the replay is not running or the subscription is gone, or, for pushes
    already ``done``, the replay does not exist (the subscriber is then ``''`` if gone)."""
    row = c.execute("SELECT state, requester, price FROM replays WHERE id = ?", (replay_id,)).fetchone()
    if row is None or (row[0] != "running" and not done):
        return None
    sub = c.execute("SELECT subscriber FROM subscriptions WHERE id = ?", (subscription_id,)).fetchone()
    if sub is None and not done:
        return None
    debit = row[2] * n
    if debit:
        cur = c.execute(
            "UPDATE credits SET balance = balance - ? WHERE principal = ? AND balance >= ?", (debit, row[1], debit)
        )
        if cur.rowcount == 0:
            raise InsufficientCredit(f"{row[1]}'s credit does not cover {debit}")
        c.execute("UPDATE replays SET charged = charged + ? WHERE id = ?", (debit, replay_id))
    return "" if sub is None else str(sub[0])


def _advance(c: sqlite3.Connection, replay_id: int, position: int, sent: int, now: int) -> None:
    c.execute(
        "UPDATE replays SET position = ?, sent = sent + ?, updated_at = ? WHERE id = ?",
        (position, sent, now, replay_id),
    )


def _marks(n: int) -> str:
    return ",".join("?" * n)


class SQLiteReplayStore(SQLiteAccess, ReplayStore):
    """Relies on ``SQLiteStore``'s ``_read`` and ``_write`` (the single writer thread)."""

    async def create_replay(
        self, record: ReplayRecord, *, limit: int | None = None, total: int | None = None
    ) -> ReplayRecord:
        def job(c: sqlite3.Connection, w: object) -> ReplayRecord:
            r = record
            if total is not None:
                active = sorted(ACTIVE)
                held = c.execute(
                    f"SELECT COUNT(*) FROM replays WHERE state IN ({_marks(len(active))})", active
                ).fetchone()[0]
                if held >= total:
                    raise LimitReached(f"{total} replays are active already", limit=total, everyone=True)
            if limit is not None:  # in the insert's writer job: no write between them
                active = sorted(ACTIVE)
                held = c.execute(
                    f"SELECT COUNT(*) FROM replays WHERE requester = ? AND state IN ({_marks(len(active))})",
                    (r.requester, *active),
                ).fetchone()[0]
                if held >= limit:
                    raise LimitReached(f"{r.requester} has {limit} replays active already", limit=limit)
            cur = c.execute(
                f"INSERT INTO replays({_COLS[4:]}) VALUES ({_marks(len(_FIELDS) - 1)})",
                (r.requester, r.namespace, r.subscription_id, r.from_id, r.to_id, int(r.open_end),
                 msgspec.json.encode(r.config), r.memo, r.state, r.detail, r.position, r.sent, r.expected,
                 r.price, r.charged, r.created_at, r.updated_at),
            )
            r.id = int(cur.lastrowid or 0)
            return r

        fut: asyncio.Future[ReplayRecord] = self._write(job)
        return await fut

    async def list_replays(
        self,
        after: int | None = None,
        limit: int | None = None,
        *,
        namespace: str | None = None,
        states: Sequence[str] | None = None,
        requester: str | None = None,
    ) -> list[ReplayRecord]:
        where, args = ["id > ?"], [after or 0]
        if namespace is not None:
            where.append("namespace = ?")
            args.append(namespace)  # type: ignore[arg-type]
        if requester is not None:
            where.append("requester = ?")
            args.append(requester)  # type: ignore[arg-type]
        if states is not None:
            where.append(f"state IN ({_marks(len(states))})")
            args.extend(states)  # type: ignore[arg-type]
        sql = f"SELECT {_COLS} FROM replays WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"

        def q(c: sqlite3.Connection) -> list[ReplayRecord]:
            return [_record(r) for r in c.execute(sql, (*args, -1 if limit is None else limit))]

        result: list[ReplayRecord] = await self._read(q)
        return result

    async def get_replays(self, ids: Sequence[int]) -> list[ReplayRecord]:
        def q(c: sqlite3.Connection) -> list[ReplayRecord]:
            out: list[ReplayRecord] = []
            for i in range(0, len(ids), 500):
                chunk = list(ids[i : i + 500])
                out.extend(_record(r) for r in c.execute(
                    f"SELECT {_COLS} FROM replays WHERE id IN ({_marks(len(chunk))})", chunk
                ))
            return sorted(out, key=lambda r: r.id)

        result: list[ReplayRecord] = await self._read(q)
        return result

    async def move_replay(
        self, replay_id: int, state: str, *, detail: str = "", from_states: Iterable[str], now: int
    ) -> ReplayRecord | None:
        allowed = list(from_states)

        def job(c: sqlite3.Connection, w: object) -> ReplayRecord | None:
            cur = c.execute(
                f"UPDATE replays SET state = ?, detail = ?, updated_at = ? WHERE id = ? "
                f"AND state IN ({_marks(len(allowed))})",
                (state, detail, now, replay_id, *allowed),
            )
            if cur.rowcount == 0:
                return None
            return _record(c.execute(f"SELECT {_COLS} FROM replays WHERE id = ?", (replay_id,)).fetchone())

        fut: asyncio.Future[ReplayRecord | None] = self._write(job)
        return await fut

    async def record_replay_batch(
        self,
        replay_id: int,
        subscription_id: int,
        events: Sequence[StoredEvent],
        position: int,
        stats: Iterable[Stat] = (),
        *,
        now: int,
        ids: Sequence[int] | None = None,
        fence: Fence | None = None,
    ) -> list[int] | None:
        stats = list(stats)
        kept = None if ids is None else list(ids)

        def job(c: sqlite3.Connection, w: object) -> list[int] | None:
            if _debit(c, replay_id, subscription_id, len(events)) is None:
                return None
            ids = insert_notifications(c, subscription_id, events, now, kept) if events else []
            insert_rows(
                c, "INSERT INTO replay_notes(id, replay_id, seq, namespace, event_id, prev_id, timestamp, source, "
                "headers, data) VALUES ", "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(i, replay_id, e.seq, e.namespace, e.id, e.prev_id, e.timestamp, e.source, e.headers, e.data)
                 for i, e in zip(ids, events, strict=True)],
            )
            _advance(c, replay_id, position, len(events), now)
            _stats(c, stats)
            return ids

        fut: asyncio.Future[list[int] | None] = self._write(job)
        return await fut

    async def replay_id_base(self, replay_id: int, n: int) -> int:
        def job(c: sqlite3.Connection, w: object) -> int:
            kept = c.execute("SELECT base FROM replay_ids WHERE replay_id = ?", (replay_id,)).fetchone()
            if kept is not None:
                return int(kept[0])
            base = take_ids(c, n)
            c.execute("INSERT INTO replay_ids(replay_id, base) VALUES (?, ?)", (replay_id, base))
            return base

        fut: asyncio.Future[int] = self._write(job)
        return await fut

    async def record_replay_confirmed(
        self,
        replay_id: int,
        subscription_id: int,
        confirmed: Sequence[tuple[int, StoredEvent]],
        position: int,
        stats: Iterable[Stat] = (),
        *,
        created_at: int,
        now: int,
        fence: Fence | None = None,
    ) -> bool:
        stats = list(stats)

        @lazy  # lost to a power failure, the position goes back and the batch is pushed again
        def job(c: sqlite3.Connection, w: object) -> bool:
            subscriber = _debit(c, replay_id, subscription_id, len(confirmed), done=True)
            if subscriber is None:
                return False
            insert_confirmed(c, subscription_id, subscriber, confirmed, created_at, now, replay=True)
            _advance(c, replay_id, position, len(confirmed), now)
            _stats(c, stats)
            return True

        fut: asyncio.Future[bool] = self._write(job)
        return await fut

    async def replay_events(self, notification_ids: Sequence[int]) -> dict[int, StoredEvent]:
        def q(c: sqlite3.Connection) -> dict[int, StoredEvent]:
            out: dict[int, StoredEvent] = {}
            for i in range(0, len(notification_ids), 500):
                chunk = list(notification_ids[i : i + 500])
                for r in c.execute(
                    "SELECT id, seq, namespace, event_id, prev_id, timestamp, source, data, headers "
                    f"FROM replay_notes WHERE id IN ({_marks(len(chunk))})",
                    chunk,
                ):
                    out[r[0]] = StoredEvent(
                        seq=r[1], namespace=r[2], id=r[3], prev_id=r[4], timestamp=r[5], source=r[6],
                        data=r[7], headers=r[8],
                    )
            return out

        result: dict[int, StoredEvent] = await self._read(q)
        return result

    async def replay_counts(self, replay_ids: Sequence[int]) -> dict[int, ReplayCounts]:
        def q(c: sqlite3.Connection) -> dict[int, ReplayCounts]:
            out = {}
            for rid in replay_ids:
                pending = c.execute(
                    "SELECT COUNT(*) FROM replay_notes r JOIN notifications n ON n.id = r.id WHERE r.replay_id = ?",
                    (rid,),
                ).fetchone()[0]
                dead = c.execute(
                    "SELECT COUNT(*) FROM replay_notes r JOIN dead_letters d ON d.id = r.id WHERE r.replay_id = ?",
                    (rid,),
                ).fetchone()[0]
                out[rid] = ReplayCounts(int(pending), int(dead))
            return out

        result: dict[int, ReplayCounts] = await self._read(q)
        return result

    async def sweep_replay_notes(self, limit: int | None = None) -> int:
        def job(c: sqlite3.Connection, w: object) -> int:
            return int(c.execute(
                "DELETE FROM replay_notes WHERE id IN (SELECT r.id FROM replay_notes r "
                "WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = r.id) "
                "AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.id = r.id) LIMIT ?)",
                (-1 if limit is None else limit,),
            ).rowcount)

        fut: asyncio.Future[int] = self._write(job)
        return await fut

    async def read_range(
        self, namespace: str, after_id: int, before_id: int, limit: int, *, pairs: bytes | None = None
    ) -> list[StoredEvent]:
        result: list[StoredEvent] = await self._read(
            lambda c: range_rows(c, namespace, after_id, before_id, limit, pairs)
        )
        return result

    async def last_event_id(self, namespace: str) -> int:
        def q(c: sqlite3.Connection) -> int:
            return int(c.execute(
                "SELECT MAX(COALESCE((SELECT MAX(id) FROM events WHERE namespace = ?), 0), "
                "COALESCE((SELECT last_event_id FROM publications WHERE namespace = ?), 0), "
                "COALESCE((SELECT value FROM meta WHERE key = 'last_event_id:' || ?), 0))",
                (namespace, namespace, namespace),
            ).fetchone()[0])

        result: int = await self._read(q)
        return result

    async def fund_credit(self, principal: str, amount: int) -> int:
        def job(c: sqlite3.Connection, w: object) -> int:
            row = c.execute("SELECT balance FROM credits WHERE principal = ?", (principal,)).fetchone()
            balance = (row[0] if row else 0) + amount
            if balance < 0:
                raise InsufficientCredit(f"{principal}'s credit is {balance - amount}; cannot take {-amount}")
            c.execute(
                "INSERT INTO credits(principal, balance) VALUES (?, ?) "
                "ON CONFLICT(principal) DO UPDATE SET balance = excluded.balance",
                (principal, balance),
            )
            return int(balance)

        fut: asyncio.Future[int] = self._write(job)
        return await fut

    async def credit_balance(self, principal: str) -> int:
        def q(c: sqlite3.Connection) -> int:
            row = c.execute("SELECT balance FROM credits WHERE principal = ?", (principal,)).fetchone()
            return int(row[0]) if row else 0

        result: int = await self._read(q)
        return result
