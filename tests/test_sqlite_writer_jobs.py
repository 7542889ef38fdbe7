"""The SQLite writer's jobs: a job that fails undoes only its own writes, whether it was
alone in its transaction (no savepoint then) or shared it with others (its savepoint),
and the writer goes on with the right ids and seqs after it (``store._sqlite_writer``)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.errors import KeyTaken
from tidings.store import NewEvent, SQLiteStore

_KEY_EXPIRES = 2**62


def _ev(n: int, key: str | None = None) -> NewEvent:
    return NewEvent(namespace="a", source="s", timestamp=1_000 + n, data=b'{"Nat":%d}' % n, key=key,
                    fingerprint=b"f%d" % n if key else b"", key_expires=_KEY_EXPIRES if key else 0)


class _Boom(Exception):
    pass


def _row(value: int, fail: bool) -> Any:
    def job(conn: sqlite3.Connection, _w: Any) -> int:
        conn.execute("INSERT INTO scratch(v) VALUES (?)", (value,))
        if fail:
            raise _Boom(value)
        return value

    return job


# Each step: a row written by a job that fails or not, or an append (with a key already
# taken: it fails). Steps are sent in rounds: a round's jobs are queued together and may
# share a transaction; a round of one is alone in its own.
_step = st.one_of(
    st.tuples(st.just("row"), st.booleans()),
    st.tuples(st.just("append"), st.booleans()),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.lists(_step, min_size=1, max_size=4), min_size=1, max_size=6))
async def test_a_failed_job_undoes_only_itself_alone_or_together(
    tmp_path_factory: Any, rounds: list[list[tuple[str, bool]]],
) -> None:
    store = SQLiteStore(tmp_path_factory.mktemp("w") / "t.db")
    await store.open()
    try:
        await store._write(lambda c, _w: c.execute("CREATE TABLE scratch(v INTEGER)"))
        (first,) = await store.append([_ev(0, key="taken")])
        rows_kept: list[int] = []
        ids: list[int] = [first.id]
        n = 0
        for steps in rounds:
            futures: list[tuple[str, bool, int, asyncio.Future[Any]]] = []
            for kind, fail in steps:
                n += 1
                if kind == "row":
                    futures.append((kind, fail, n, store._write(_row(n, fail))))
                else:
                    coro = store.append([_ev(n, key="taken" if fail else f"k{n}")])
                    futures.append((kind, fail, n, asyncio.ensure_future(coro)))
            for kind, fail, value, fut in futures:
                if fail:
                    try:
                        await fut
                    except (_Boom, KeyTaken):
                        continue
                    raise AssertionError(f"{kind} {value} should have failed")
                got = await fut
                if kind == "row":
                    rows_kept.append(got)
                else:
                    ids.append(got[0].id)
        # What failed left nothing; what did not, everything; the ids have no gap.
        assert await store._read(lambda c: [v for (v,) in c.execute("SELECT v FROM scratch ORDER BY v")]) == rows_kept
        assert ids == list(range(ids[0], ids[0] + len(ids)))
        stored = await store.read_after(0, None, 1000)
        assert [e.id for e in stored] == ids
        assert [e.seq for e in stored] == list(range(stored[0].seq, stored[0].seq + len(stored)))
    finally:
        await store.close()


async def test_a_failed_job_alone_leaves_the_writer_taking_jobs(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    await store.open()
    try:
        await store._write(lambda c, _w: c.execute("CREATE TABLE scratch(v INTEGER)"))
        for i in range(3):
            try:
                await store._write(_row(i, True))
            except _Boom:
                pass
        assert await store._write(_row(7, False)) == 7
        assert await store._read(lambda c: c.execute("SELECT count(*) FROM scratch").fetchone()[0]) == 1
    finally:
        await store.close()
