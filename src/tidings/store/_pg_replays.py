"""The replay tables and the credit ledger in the PostgreSQL store."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg
import msgspec

from ..core.replay import ACTIVE
from ..errors import LimitReached, StoreError
from ._cluster import CHANGE_REGISTRY, Fence
from ._pg_db import EVENT_COLS, PgAccess, event_row, fence_args, lock_quota, stat_arrays, stat_rows
from ._pg_deliveries import confirmed_arrays
from ._pg_functions import NO_CREDIT
from ._records import Stat, StoredEvent
from ._replays import InsufficientCredit, ReplayCounts, ReplayRecord, ReplayStore, with_pairs

__all__ = ["RANGE_SQL", "PgReplayStore"]

RANGE_SQL = f"SELECT {EVENT_COLS} FROM events WHERE namespace = $1 AND id > $2 AND id < $3 ORDER BY id LIMIT $4"
"""A namespace's events by id range (``read_range``; ``range_reader``)."""

_FIELDS = (
    "id", "requester", "namespace", "subscription_id", "from_id", "to_id", "open_end", "config", "memo",
    "state", "detail", "position", "sent", "expected", "price", "charged", "created_at", "updated_at",
)
_COLS = ", ".join(_FIELDS)


def _record(r: Any) -> ReplayRecord:
    d = dict(zip(_FIELDS, r, strict=True))
    d["config"] = msgspec.json.decode(d["config"])
    return ReplayRecord(**d)


def _no_credit(e: StoreError) -> Exception:
    """The requester's credit not covering a batch is :class:`InsufficientCredit`."""
    cause = e.__cause__
    if getattr(cause, "sqlstate", None) == NO_CREDIT:
        return InsufficientCredit(str(getattr(cause, "message", cause)))
    return e


class PgReplayStore(PgAccess, ReplayStore):
    async def create_replay(
        self, record: ReplayRecord, *, limit: int | None = None, total: int | None = None
    ) -> ReplayRecord:
        r = record
        marks = ", ".join(f"${i}" for i in range(1, len(_FIELDS)))

        async def job(c: asyncpg.Connection) -> int:
            if total is not None:  # first: every creation takes this lock, in one order
                await lock_quota(c, "replays", "")  # no principal is named "" (valid_principal_name)
                held = await c.fetchval("SELECT count(*) FROM replays WHERE state = ANY($1)", sorted(ACTIVE))
                if held >= total:
                    raise LimitReached(f"{total} replays are active already", limit=total, everyone=True)
            if limit is not None:
                await lock_quota(c, "replays", r.requester)
                held = await c.fetchval(
                    "SELECT count(*) FROM replays WHERE requester = $1 AND state = ANY($2)", r.requester, sorted(ACTIVE)
                )
                if held >= limit:
                    raise LimitReached(f"{r.requester} has {limit} replays active already", limit=limit)
            made = await c.fetchval(
                f"INSERT INTO replays({_COLS[4:]}) VALUES ({marks}) RETURNING id",
                r.requester, r.namespace, r.subscription_id, r.from_id, r.to_id, bool(r.open_end),
                msgspec.json.encode(r.config), r.memo, r.state, r.detail, r.position, r.sent, r.expected, r.price,
                r.charged, r.created_at, r.updated_at,
            )
            # The broadcaster that delivers the subscription runs the replay (docs/scaling.md).
            await self._signal(c, CHANGE_REGISTRY, f"replay:{r.subscription_id}")
            return int(made)

        new_id = await self._tx(job)
        r.id = int(new_id)
        return r

    async def list_replays(
        self,
        after: int | None = None,
        limit: int | None = None,
        *,
        namespace: str | None = None,
        states: Sequence[str] | None = None,
        requester: str | None = None,
    ) -> list[ReplayRecord]:
        where, args = ["id > $1"], [after or 0]
        for col, value in (("namespace", namespace), ("requester", requester)):
            if value is not None:
                args.append(value)  # type: ignore[arg-type]
                where.append(f"{col} = ${len(args)}")
        if states is not None:
            args.append(list(states))  # type: ignore[arg-type]
            where.append(f"state = ANY(${len(args)}::text[])")
        args.append(2**62 if limit is None or limit < 0 else limit)
        rows = await self._fetch(
            f"SELECT {_COLS} FROM replays WHERE {' AND '.join(where)} ORDER BY id LIMIT ${len(args)}", *args
        )
        return [_record(r) for r in rows]

    async def get_replays(self, ids: Sequence[int]) -> list[ReplayRecord]:
        rows = await self._fetch(f"SELECT {_COLS} FROM replays WHERE id = ANY($1::bigint[]) ORDER BY id", list(ids))
        return [_record(r) for r in rows]

    async def move_replay(
        self, replay_id: int, state: str, *, detail: str = "", from_states: Iterable[str], now: int
    ) -> ReplayRecord | None:
        allowed = list(from_states)
        row = await self._tx(lambda c: c.fetchrow(
            f"UPDATE replays SET state = $1, detail = $2, updated_at = $3 WHERE id = $4 AND state = ANY($5::text[]) "
            f"RETURNING {_COLS}",
            state, detail, now, replay_id, allowed,
        ))
        return None if row is None else _record(row)

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
        rows = stat_rows(stats)
        try:
            made = await self._call(
                "fetchval",
                "SELECT tidings_record_replay_batch($1, $2, $3, $4, $5, $6, $7, $8::bigint[], $9::bigint[], "
                "$10::text[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], $15::bytea[], $16::bytea[], "
                "$17::text[], $18::text[], $19::text[], $20::bigint[])",
                *fence_args(fence), replay_id, subscription_id, position, now, None if ids is None else list(ids),
                [e.seq for e in events], [e.namespace for e in events], [e.id for e in events],
                [e.prev_id for e in events], [e.timestamp for e in events], [e.source for e in events],
                [e.headers for e in events], [e.data for e in events], *stat_arrays(rows),
            )
        except StoreError as e:
            raise _no_credit(e) from e
        return None if made is None else list(made)

    async def replay_id_base(self, replay_id: int, n: int) -> int:
        return int(await self._call("fetchval", "SELECT tidings_replay_id_base($1, $2)", replay_id, n))

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
        rows = stat_rows(stats)
        try:
            return bool(await self._call(
                "fetchval",
                "SELECT tidings_record_replay_confirmed($1, $2, $3, $4, $5, $6, $7, $8, $9::bigint[], $10::text[], "
                "$11::bigint[], $12::bigint[], $13::text[], $14::bigint[], $15::text[], $16::text[], $17::text[], "
                "$18::bigint[])",
                *fence_args(fence), replay_id, subscription_id, position, created_at, now,
                *confirmed_arrays(confirmed), *stat_arrays(rows),
            ))
        except StoreError as e:
            raise _no_credit(e) from e

    async def replay_events(self, notification_ids: Sequence[int]) -> dict[int, StoredEvent]:
        rows = await self._fetch(
            "SELECT id, seq, namespace, event_id, prev_id, timestamp, source, data, headers "
            "FROM replay_notes WHERE id = ANY($1::bigint[])",
            list(notification_ids),
        )
        return {r[0]: event_row(tuple(r)[1:]) for r in rows}

    async def replay_counts(self, replay_ids: Sequence[int]) -> dict[int, ReplayCounts]:
        async def q(c: asyncpg.Connection) -> dict[int, ReplayCounts]:
            out = {}
            for rid in replay_ids:
                pending = await c.fetchval(
                    "SELECT COUNT(*) FROM replay_notes r JOIN notifications n ON n.id = r.id WHERE r.replay_id = $1",
                    rid,
                )
                dead = await c.fetchval(
                    "SELECT COUNT(*) FROM replay_notes r JOIN dead_letters d ON d.id = r.id WHERE r.replay_id = $1",
                    rid,
                )
                out[rid] = ReplayCounts(int(pending), int(dead))
            return out

        return await self._read(q)

    async def sweep_replay_notes(self, limit: int | None = None) -> int:
        async def job(c: asyncpg.Connection) -> int:
            status = await c.execute(
                "DELETE FROM replay_notes WHERE id IN (SELECT r.id FROM replay_notes r "
                "WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = r.id) "
                "AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.id = r.id) LIMIT $1)",
                2**62 if limit is None or limit < 0 else limit,
            )
            return int(status.split()[-1])

        return await self._tx(job)

    async def read_range(
        self, namespace: str, after_id: int, before_id: int, limit: int, *, pairs: bytes | None = None
    ) -> list[StoredEvent]:
        rows = await self._fetch(RANGE_SQL, namespace, after_id, before_id, 2**62 if limit < 0 else limit)
        return with_pairs([event_row(r) for r in rows], pairs)

    async def last_event_id(self, namespace: str) -> int:
        found = await self._fetchval("SELECT last_id FROM namespace_heads WHERE namespace = $1", namespace)
        return int(found or 0)

    async def fund_credit(self, principal: str, amount: int) -> int:
        async def job(c: asyncpg.Connection) -> int:
            before = await c.fetchval("SELECT balance FROM credits WHERE principal = $1 FOR UPDATE", principal) or 0
            balance = before + amount
            if balance < 0:
                raise InsufficientCredit(f"{principal}'s credit is {before}; cannot take {-amount}")
            await c.execute(
                "INSERT INTO credits(principal, balance) VALUES ($1, $2) "
                "ON CONFLICT (principal) DO UPDATE SET balance = excluded.balance",
                principal, balance,
            )
            return int(balance)

        return await self._tx(job)

    async def credit_balance(self, principal: str) -> int:
        found = await self._fetchval("SELECT balance FROM credits WHERE principal = $1", principal)
        return int(found or 0)
