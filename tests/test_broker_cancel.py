"""The broker's long-lived loops stop when asked, even when a call they wait in turns the
cancellation into an error of its own, or returns as if done (``tidings.tasks``).

A client library cancelled while it waits (asyncpg, aiohttp) may close its connection
and raise its own error in place of the ``CancelledError``: asyncpg's, which the store
wraps as ``StoreUnavailable``, or a ConnectionError, a TimeoutError. A loop that retries
on that error went on after it was cancelled, and whatever awaited it (the cluster's
task group, ``Broker.stop``) hung. Each test here cancels one loop while it waits in
such a call and asks that it end within a bound; each hung without its loop's check.
The same story for the interchain distributor: tests/test_interchain_cancel.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidings.broker import Broker
from tidings.core.retry import Outcome
from tidings.core.wire import Event, PublicationRegistration, SubscriptionRegistration
from tidings.errors import StoreUnavailable
from tidings.settings import Settings
from tidings.store import MemoryStore, PostgresStore, PrincipalRecord

from .conftest import eventually
from .pg_support import fresh_schema

ADMIN = PrincipalRecord(name="admin", admin=True)
BOUND_S = 10.0
"""How long a cancelled loop may take to end; a passing one takes milliseconds."""
NS = "t.cancel"


class _Swallow:
    """Blocks the first call of ``method`` made from the task named ``task`` (a glob), and
    turns the cancellation that lands there into ``error``, as a client closing its
    connection might; with no error, the call goes on as if nothing happened (a library
    that hides the cancel whole). Only the first: a test that fails still ends."""

    def __init__(self, method: str, task: str, error: Exception | None, *, after: int = 0) -> None:
        self.method, self.task, self.error = method, task, error
        self.after = after
        """Calls let through first (a loop's round before it reaches its retry loop)."""
        self.entered = asyncio.Event()
        self.swallowed = False

    async def at(self, method: str) -> None:
        me = asyncio.current_task()
        if method != self.method or self.entered.is_set() or me is None:
            return
        if not fnmatch.fnmatch(me.get_name(), self.task):
            return
        if self.after > 0:
            self.after -= 1
            return
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.swallowed = True
            if self.error is not None:
                raise self.error from None


class _Hooks:
    """Store calls that pass through ``swallow`` first, and fail at once while named in
    ``failing`` (a store that refuses)."""

    swallow: _Swallow | None = None
    failing: frozenset[str] = frozenset()

    async def _at(self, method: str) -> None:
        if method in self.failing:
            raise StoreUnavailable("connection refused")
        if self.swallow is not None:
            await self.swallow.at(method)

    async def listen(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("listen")
        return await super().listen(*args, **kwargs)  # type: ignore[misc]

    async def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("heartbeat")
        return await super().heartbeat(*args, **kwargs)  # type: ignore[misc]

    async def read_after(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("read_after")
        return await super().read_after(*args, **kwargs)  # type: ignore[misc]

    async def list_publications(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("list_publications")
        return await super().list_publications(*args, **kwargs)  # type: ignore[misc]

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("append")
        return await super().append(*args, **kwargs)  # type: ignore[misc]

    async def list_replays(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("list_replays")
        return await super().list_replays(*args, **kwargs)  # type: ignore[misc]

    async def pending(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("pending")
        return await super().pending(*args, **kwargs)  # type: ignore[misc]

    async def list_subscriptions(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("list_subscriptions")
        return await super().list_subscriptions(*args, **kwargs)  # type: ignore[misc]

    async def schema_seq(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("schema_seq")
        return await super().schema_seq(*args, **kwargs)  # type: ignore[misc]

    async def sweep_replay_notes(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("sweep_replay_notes")
        return await super().sweep_replay_notes(*args, **kwargs)  # type: ignore[misc]

    async def move_replay(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("move_replay")
        return await super().move_replay(*args, **kwargs)  # type: ignore[misc]

    async def expire_keys(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("expire_keys")
        return await super().expire_keys(*args, **kwargs)  # type: ignore[misc]


class _PgStore(_Hooks, PostgresStore):
    pass


class _MemStore(_Hooks, MemoryStore):
    pass


def _task(name: str) -> asyncio.Task[Any]:
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == name]
    return task


async def _cancel_ends_it(
    task: asyncio.Task[Any], swallow: _Swallow, caplog: pytest.LogCaptureFixture, level: int = logging.WARNING,
) -> None:
    """Cancel ``task`` where ``swallow`` holds it; it must end, cancelled, within the bound,
    and its loop must not report the cancel as a failure (nothing logged at ``level``) on
    its way out."""
    await eventually(swallow.entered.is_set, timeout=BOUND_S)
    before = len(caplog.records)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(BOUND_S):  # without the check: never
            await asyncio.shield(task)
    assert swallow.swallowed and task.cancelled()
    failed = [r.getMessage() for r in caplog.records[before:] if r.levelno >= level]
    assert failed == [], "a cancel was taken for a failure"


async def _unstick(pattern: str) -> None:
    """After a failure: cancel again what is still going, so the broker can stop."""
    left = [t for t in asyncio.all_tasks() if fnmatch.fnmatch(t.get_name(), pattern) and not t.done()]
    for t in left:
        t.cancel()
    if left:
        await asyncio.wait(left, timeout=5)


_ERRORS = [
    pytest.param(StoreUnavailable("connection was closed in the middle of operation"), id="store-error"),
    pytest.param(ConnectionError("connection closed while reading"), id="connection-error"),
    pytest.param(None, id="returns"),
]


# -- the cluster: a broadcaster on PostgreSQL ----------------------------------------------


@contextlib.asynccontextmanager
async def _member(pg_database: str, tmp_path: Path, swallow: _Swallow) -> AsyncIterator[Broker]:
    async with fresh_schema(pg_database) as schema:
        store = _PgStore(pg_database, server_settings={"search_path": schema})
        store.swallow = swallow
        settings = Settings(data_dir=tmp_path, broadcaster_id="b0", heartbeat_s=0.1, lease_s=1.0,
                            retention_interval_s=0)
        b = Broker(settings, store)
        await b.start()
        try:
            yield b
        finally:
            await _unstick("tidings-cluster*")
            await b.stop()


@pytest.mark.parametrize("error", _ERRORS)
@pytest.mark.parametrize(("method", "task"), [
    ("listen", "tidings-cluster"),  # taking part, retried by ``run``
    ("heartbeat", "tidings-cluster"),
    ("read_after", "tidings-cluster-log"),
    ("list_publications", "tidings-cluster-registry"),
], ids=["take-part", "heartbeat", "follow-log", "follow-registry"])
async def test_a_cancel_turned_into_an_error_still_stops_the_cluster(
    pg_database: str, tmp_path: Path, method: str, task: str, error: Exception | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    swallow = _Swallow(method, task, error)
    # Listening and a heartbeat report a store's error themselves, as an outage, and
    # return: the loop then stops at its next round.
    told = isinstance(error, StoreUnavailable) and method in ("listen", "heartbeat")
    async with _member(pg_database, tmp_path, swallow) as b:
        assert b.cluster is not None
        await _cancel_ends_it(_task("tidings-cluster"), swallow, caplog, logging.ERROR if told else logging.WARNING)


async def test_a_heartbeat_whose_cancel_became_a_timeout_stops_too(
    pg_database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Not the lease term's timeout (that one the loop took back): the task's own cancel."""
    swallow = _Swallow("heartbeat", "tidings-cluster", TimeoutError())
    async with _member(pg_database, tmp_path, swallow):
        await _cancel_ends_it(_task("tidings-cluster"), swallow, caplog)


@pytest.mark.parametrize("error", _ERRORS)
async def test_the_control_plane_s_sender_stops_when_cancelled(
    pg_database: str, tmp_path: Path, error: Exception | None, caplog: pytest.LogCaptureFixture,
) -> None:
    swallow = _Swallow("append", "tidings-cluster-commands", error)
    async with _member(pg_database, tmp_path, swallow) as b:
        # A change made here goes to the other broadcasters as a command on the log.
        await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(namespace=NS)])
        await _cancel_ends_it(_task("tidings-cluster"), swallow, caplog)


@pytest.mark.parametrize("error", _ERRORS)
async def test_the_watchdog_stops_when_cancelled_while_it_lets_go(
    pg_database: str, tmp_path: Path, error: Exception | None, caplog: pytest.LogCaptureFixture,
) -> None:
    swallow = _Swallow("list_replays", "tidings-cluster-watchdog", error)
    async with _member(pg_database, tmp_path, swallow) as b:
        await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(namespace=NS)])
        await b.orchestrator.register_subscriptions(
            ADMIN, [SubscriptionRegistration(namespace=NS, endpoint="http://127.0.0.1:9/")]
        )
        await eventually(lambda: b.membership.held, timeout=BOUND_S)
        # The store refuses the heartbeats: once the leases may have lapsed, the watchdog
        # stops their delivery, and asks the store about replays as it does.
        b.store.failing = frozenset({"heartbeat"})  # type: ignore[attr-defined]
        # Letting go reports a store's error about replays itself, and returns.
        told = isinstance(error, StoreUnavailable)
        await _cancel_ends_it(_task("tidings-cluster"), swallow, caplog, logging.ERROR if told else logging.WARNING)


# -- delivery and retention: one broadcaster in memory -------------------------------------


@contextlib.asynccontextmanager
async def _alone(tmp_path: Path, swallow: _Swallow, **settings: Any) -> AsyncIterator[Broker]:
    store = _MemStore()
    store.swallow = swallow
    b = Broker(Settings(data_dir=tmp_path, retry_initial_s=0.01, retry_max_s=0.02, **settings), store)
    b.delivery.sleep = lambda s: asyncio.sleep(min(s, 0.01))  # the worker's back-off, in milliseconds
    await b.start()
    try:
        yield b
    finally:
        await _unstick("tidings-sub-*")
        await _unstick("tidings-retention")
        await _unstick("tidings-replay*")
        await _unstick("tidings-key-reclaim")
        await b.stop()


async def _subscribe(b: Broker) -> int:
    await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(namespace=NS)])
    (r,) = await b.orchestrator.register_subscriptions(
        ADMIN, [SubscriptionRegistration(namespace=NS, endpoint="http://127.0.0.1:9/")]
    )
    return int(r.Ok)  # type: ignore[union-attr]


@pytest.mark.parametrize("error", _ERRORS)
async def test_a_worker_cancelled_in_a_store_call_does_not_restart(
    tmp_path: Path, error: Exception, caplog: pytest.LogCaptureFixture,
) -> None:
    swallow = _Swallow("pending", "tidings-sub-*", error)
    async with _alone(tmp_path, swallow) as b:
        sub_id = await _subscribe(b)
        await _cancel_ends_it(_task(f"tidings-sub-{sub_id}"), swallow, caplog)


@pytest.mark.parametrize("error", [
    pytest.param(StoreUnavailable("connection was closed in the middle of operation"), id="store-error"),
    pytest.param(None, id="returns"),
])
async def test_a_worker_cancelled_while_it_reads_itself_back_does_not_restart(
    tmp_path: Path, error: Exception | None, caplog: pytest.LogCaptureFixture,
) -> None:
    """After a failure the worker reads its subscription back, retrying while the store
    cannot answer, then starts again: not once it was cancelled."""
    swallow = _Swallow("list_subscriptions", "tidings-sub-*", error)
    async with _alone(tmp_path, swallow) as b:
        b.store.failing = frozenset({"pending"})  # type: ignore[attr-defined]
        sub_id = await _subscribe(b)
        await eventually(swallow.entered.is_set, timeout=BOUND_S)
        b.store.failing = frozenset()  # type: ignore[attr-defined]
        await _cancel_ends_it(_task(f"tidings-sub-{sub_id}"), swallow, caplog)


async def test_a_worker_cancelled_in_a_push_does_not_push_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A push answers every failure with a code (``Outbound``): a cancel that became a
    ConnectionError there is "no answer", which the worker retries."""
    swallow = _Swallow("post", "tidings-sub-*", ConnectionError("connection closed while reading"))
    async with _alone(tmp_path, swallow) as b:
        post = b.delivery.post

        async def swallowing(*args: Any) -> Any:
            try:
                await swallow.at("post")
            except ConnectionError:
                return Outcome.NO_ANSWER, None, "connection_error", None
            return await post(*args)

        b.delivery.post = swallowing
        sub_id = await _subscribe(b)
        await b.broadcaster.publish(ADMIN, [Event(namespace=NS, data={"Nat": 1})])
        await _cancel_ends_it(_task(f"tidings-sub-{sub_id}"), swallow, caplog)


@pytest.mark.parametrize("error", _ERRORS)
async def test_retention_stops_when_cancelled_in_a_round(
    tmp_path: Path, error: Exception | None, caplog: pytest.LogCaptureFixture,
) -> None:
    swallow = _Swallow("schema_seq", "tidings-retention", error)
    async with _alone(tmp_path, swallow, retention_interval_s=0.01):
        await _cancel_ends_it(_task("tidings-retention"), swallow, caplog)


@pytest.mark.parametrize("error", [
    pytest.param(StoreUnavailable("connection was closed in the middle of operation"), id="store-error"),
    pytest.param(None, id="returns"),
])
async def test_the_replays_sweeper_stops_when_cancelled_in_a_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception | None, caplog: pytest.LogCaptureFixture,
) -> None:
    from tidings.broker.replay import _replays

    monkeypatch.setattr(_replays, "_SWEEP_S", 0.01)
    swallow = _Swallow("sweep_replay_notes", "tidings-replays", error, after=1)  # not the sweep at start
    async with _alone(tmp_path, swallow):
        await _cancel_ends_it(_task("tidings-replays"), swallow, caplog)


@pytest.mark.parametrize("error", [
    pytest.param(StoreUnavailable("connection was closed in the middle of operation"), id="store-error"),
    pytest.param(ConnectionError("connection closed while reading"), id="connection-error"),
])
async def test_a_replay_cancelled_in_a_store_call_stays_active_for_the_restart(
    tmp_path: Path, error: Exception, caplog: pytest.LogCaptureFixture,
) -> None:
    """A shutdown is not the replay's failure: it is not finished as errored, nor paused
    as if the store had failed; the next start goes on with it."""
    from tidings.core.wire_replay import ReplayRegistration

    swallow = _Swallow("move_replay", "tidings-replay-*", error)
    async with _alone(tmp_path, swallow) as b:
        await _subscribe(b)
        await b.broadcaster.publish(ADMIN, [Event(namespace=NS, data={"Nat": i}) for i in range(3)])
        (r,) = await b.replays.register(ADMIN, [ReplayRegistration(namespace=NS, range=(1, None))])
        rid = int(r.Ok)  # type: ignore[union-attr,arg-type]
        await _cancel_ends_it(_task(f"tidings-replay-{rid}"), swallow, caplog)
        (rec,) = await b.store.list_replays(states=["pending", "running"])
        assert rec.id == rid


async def test_the_key_reclaimer_stops_when_cancelled_in_a_round(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    swallow = _Swallow("expire_keys", "tidings-key-reclaim", StoreUnavailable("connection was closed"))
    async with _alone(tmp_path, swallow, key_reclaim_interval_s=0.01):
        await _cancel_ends_it(_task("tidings-key-reclaim"), swallow, caplog)
