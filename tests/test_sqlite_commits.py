"""The SQLite writer's two kinds of commit: publishes (and most other writes) are fsynced
before they are answered; a worker's notification bookkeeping (opening notifications for
events it read from the log, settling them) is not fsynced on its own, yet survives a
process crash (docs/semantics.md, "Durability")."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidings.store import NewEvent, SQLiteStore, SubscriptionRecord
from tidings.store._sqlite_writer import Writer


def _ev(n: int) -> NewEvent:
    return NewEvent(namespace="a", source="src", timestamp=1_000 + n, data=b'{"Nat":%d}' % n)


async def _subscribed(store: SQLiteStore) -> SubscriptionRecord:
    from tests.test_store_contract import sub

    return await store.create_subscription(sub("a", subscriber="carol"))


@contextlib.asynccontextmanager
async def _open(tmp_path: Path) -> AsyncIterator[tuple[SQLiteStore, SubscriptionRecord, Writer]]:
    """A store with one subscription, and its writer."""
    store = SQLiteStore(tmp_path / "t.db")
    await store.open()
    try:
        s = await _subscribed(store)
        assert store._writer is not None
        yield store, s, store._writer
    finally:
        await store.close()


async def test_settling_commits_without_its_own_fsync_and_everything_else_with_one(tmp_path: Path) -> None:
    async with _open(tmp_path) as (store, s, w):
        before = dict(w.commits)
        events = await store.append([_ev(1), _ev(2)])
        assert w.commits == {"durable": before["durable"] + 1, "lazy": before["lazy"]}
        ids = await store.open_notifications(s.id, events, events[-1].seq)
        assert w.commits == {"durable": before["durable"] + 1, "lazy": before["lazy"] + 1}
        assert w.opened == {s.id: events[-1].seq}  # what routing at append goes on from
        assert await store.settle_notifications(ids[:1]) == ids[:1]
        assert w.commits == {"durable": before["durable"] + 1, "lazy": before["lazy"] + 2}
        # The connection goes back to fsyncing for the next publish...
        await store.append([_ev(3)])
        assert w.commits == {"durable": before["durable"] + 2, "lazy": before["lazy"] + 2}
        # ... and for any other write, such as a dead letter.
        from tidings.store import DeadLetter

        letter = DeadLetter(id=ids[1], subscription_id=s.id, subscriber="carol", seq=events[1].seq, namespace="a",
                            event_id=events[1].id, attempts=1, reason="HTTP 500", dead_at=1)
        assert await store.dead_letter([letter]) == [ids[1]]
        assert w.commits == {"durable": before["durable"] + 3, "lazy": before["lazy"] + 2}
        assert await store.pending(s.id) == []


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
async def test_a_settlement_answered_survives_the_process_being_killed(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    await store.open()
    s = await _subscribed(store)
    ids = await store.open_notifications(s.id, await store.append([_ev(1), _ev(2), _ev(3)]), 3)
    await store.close()
    # Another process opens a notification for a fourth event and settles two, and is
    # killed the moment the store has answered.
    script = textwrap.dedent(f"""
        import asyncio, os, signal
        from tidings.store import NewEvent, SQLiteStore
        async def main():
            store = SQLiteStore({str(path)!r})
            await store.open()
            fourth = await store.append([NewEvent(namespace="a", source="src", timestamp=9, data=b'{{"Nat":4}}')])
            print(*await store.open_notifications({s.id}, fourth, fourth[-1].seq), flush=True)
            assert await store.settle_notifications({ids[:2]!r}) == {ids[:2]!r}
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()
    opened = [int(x) for x in proc.stdout.split()]
    store = SQLiteStore(path)
    await store.open()
    try:
        assert [p.id for p in await store.pending(s.id)] == [*ids[2:], *opened]
        assert sorted(r.notification_id for r in await store.deliveries()) == ids[:2]
    finally:
        await store.close()


async def test_an_open_is_remembered_only_once_committed(tmp_path: Path) -> None:
    """What routing at append is told a subscription's worker opened must be in the
    store: a job that fails takes its open back with it."""
    async with _open(tmp_path) as (store, s, w):

        def failing(c: object, writer: object) -> None:
            assert writer is w
            w.staged_opened[s.id] = 7
            raise RuntimeError("no")

        with pytest.raises(RuntimeError):
            await store._write(failing)
        assert s.id not in w.opened
        events = await store.append([_ev(1)])
        await store.open_notifications(s.id, events, events[-1].seq)
        assert w.opened[s.id] == events[-1].seq


async def test_what_the_writer_remembers_of_opens_is_bounded(tmp_path: Path) -> None:
    """An entry per subscription ever opened would grow with churn: past a bound, the old
    entries go (which only costs routing one event per subscription)."""
    from tidings.store._sqlite_writer import _OPENED_MAX

    async with _open(tmp_path) as (store, s, w):
        w.opened.update({-i: i for i in range(1, _OPENED_MAX + 2)})  # deleted subscriptions' entries
        events = await store.append([_ev(1)])
        await store.open_notifications(s.id, events, events[-1].seq)
        assert w.opened == {s.id: events[-1].seq}


@pytest.mark.parametrize("fsync", [True, False])
async def test_commit_fsync_decides_how_a_publish_is_committed(tmp_path: Path, fsync: bool) -> None:
    """``commit_fsync`` (on by default): a write that is answered only once durable runs
    at ``synchronous=FULL``; without it, at NORMAL, like the lazy bookkeeping."""
    store = SQLiteStore(tmp_path / "t.db", fsync=fsync)
    await store.open()
    try:
        s = await _subscribed(store)
        events = await store.append([_ev(1)])
        assert await store._write(lambda c, w: c.execute("PRAGMA synchronous").fetchone()[0]) == (2 if fsync else 1)
        await store.open_notifications(s.id, events, events[-1].seq)  # lazy: NORMAL either way
        assert await store._write(lambda c, w: c.execute("PRAGMA synchronous").fetchone()[0]) == (2 if fsync else 1)
    finally:
        await store.close()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
async def test_a_publish_answered_without_fsync_survives_the_process_being_killed(tmp_path: Path) -> None:
    """Without ``commit_fsync`` an answered publish is in the WAL file, not yet on the
    disk: a process crash (SIGKILL) keeps it; only a power failure could take it back."""
    path = tmp_path / "t.db"
    script = textwrap.dedent(f"""
        import asyncio, os, signal
        from tidings.store import NewEvent, SQLiteStore
        async def main():
            store = SQLiteStore({str(path)!r}, fsync=False)
            await store.open()
            for n in range(50):
                stored = await store.append([NewEvent(namespace="a", source="src", timestamp=n, data=b'1')])
                print(stored[-1].seq, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()
    answered = [int(x) for x in proc.stdout.split()]
    store = SQLiteStore(path)
    await store.open()
    try:
        assert [e.seq for e in await store.read_after(0, ["a"], 100)] == answered
    finally:
        await store.close()
