"""Idempotency keys on publish (docs/wire-format.md, "Idempotency keys"): the store's
contract on every backend, the dedup rules as properties over an in-process broker, and
the answers over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.broker import Broker
from tidings.core.ingest import ERR_BAD_KEY, ERR_KEY_REUSED
from tidings.core.wire import Event, ItemResult, PublicationRegistration
from tidings.errors import KeyTaken
from tidings.settings import Settings
from tidings.store import MemoryStore, NewEvent, PostgresStore, PrincipalRecord, SQLiteStore, Store

from .conftest import ServerProcess
from .pg_support import fresh_schema

NS = "keys.a"
ADMIN = PrincipalRecord(name="admin", admin=True)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store
    if request.param == "postgresql":
        async with fresh_schema(request.getfixturevalue("pg_database")) as schema:
            s = PostgresStore(request.getfixturevalue("pg_database"), server_settings={"search_path": schema})
            await s.open()
            try:
                yield s
            finally:
                await s.close()
        return
    s = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "t.db")
    await s.open()
    try:
        yield s
    finally:
        await s.close()


def keyed(key: str | None, n: int, *, at: int = 1_000, expires: int = 10_000, ns: str = NS) -> NewEvent:
    return NewEvent(namespace=ns, source="alice", timestamp=at, data=b'{"Nat":%d}' % n, key=key,
                    fingerprint=b"f%d" % n, key_expires=expires)


async def test_a_key_is_written_with_its_event_and_a_live_one_refuses_the_append(store: Store) -> None:
    (first, plain) = await store.append([keyed("k", 1), keyed(None, 2)])
    held = await store.find_keys([(NS, "k"), (NS, "other"), ("keys.b", "k")], 5_000)
    assert list(held) == [(NS, "k")]
    k = held[(NS, "k")]
    assert (k.event_id, k.fingerprint, k.source, k.expires_at) == (first.id, b"f1", "alice", 10_000)
    # Live: a second append of it fails whole, and stores nothing.
    with pytest.raises(KeyTaken):
        await store.append([keyed(None, 3), keyed("k", 4)])
    assert await store.head() == plain.seq
    # The same key in another namespace is another key.
    (other,) = await store.append([keyed("k", 5, ns="keys.b")])
    assert other.id == 1


async def test_the_same_key_twice_in_one_append_stores_nothing(store: Store) -> None:
    with pytest.raises(KeyTaken):
        await store.append([keyed("k", 1), keyed("k", 1)])
    assert await store.head() == 0 and await store.find_keys([(NS, "k")], 0) == {}


async def test_concurrent_appends_of_one_key_store_one_event(store: Store) -> None:
    got = await asyncio.gather(*(store.append([keyed("k", i)]) for i in range(8)), return_exceptions=True)
    stored = [g for g in got if isinstance(g, list)]
    assert len(stored) == 1 and all(isinstance(g, KeyTaken) for g in got if not isinstance(g, list))
    assert await store.head() == 1
    assert (await store.find_keys([(NS, "k")], 0))[(NS, "k")].event_id == stored[0][0].id


async def test_an_expired_key_is_forgotten_taken_again_and_reclaimed(store: Store) -> None:
    await store.append([keyed("old", 1, expires=2_000), keyed("live", 2, expires=50_000)])
    assert set(await store.find_keys([(NS, "old"), (NS, "live")], 1_999)) == {(NS, "old"), (NS, "live")}
    assert set(await store.find_keys([(NS, "old"), (NS, "live")], 2_000)) == {(NS, "live")}
    # Past its window the key names a new event.
    (again,) = await store.append([keyed("old", 3, at=3_000, expires=9_000)])
    assert (await store.find_keys([(NS, "old")], 3_000))[(NS, "old")].event_id == again.id == 3
    await store.append([keyed("gone", 4, expires=4_000)])
    assert await store.expire_keys(5_000) == 1  # "gone" only: "old" lives until 9,000 now
    assert await store.expire_keys(5_000) == 0
    assert await store.expire_keys(60_000, limit=1) == 1
    assert await store.expire_keys(60_000) == 1
    assert await store.find_keys([(NS, "old"), (NS, "live"), (NS, "gone")], 0) == {}


async def test_sqlite_keys_survive_a_reopen(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "t.db")
    await s.open()
    await s.append([keyed("k", 1)])
    await s.close()
    s = SQLiteStore(tmp_path / "t.db")
    await s.open()
    try:
        assert (await s.find_keys([(NS, "k")], 0))[(NS, "k")].event_id == 1
    finally:
        await s.close()


# The dedup rules as properties: any sequence of publishes, some in the same request, some
# at once, over a few keys and contents.

_event = st.tuples(st.sampled_from([None, "a", "b", "c"]), st.integers(0, 1))
_request = st.lists(_event, min_size=1, max_size=4)


async def _run(requests: list[list[tuple[str | None, int]]], concurrent: bool) -> None:
    b = Broker(Settings(data_dir=Path("/nonexistent"), key_reclaim_interval_s=0), MemoryStore())
    async with b:
        await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(namespace=NS)])

        async def send(req: list[tuple[str | None, int]]) -> list[ItemResult | None]:
            return await b.broadcaster.publish(
                ADMIN, [Event(namespace=NS, data={"Nat": n}, idempotencyKey=k) for k, n in req]
            )

        if concurrent:
            answers = await asyncio.gather(*(send(r) for r in requests))
        else:
            answers = [await send(r) for r in requests]
        log = {e.id: e for e in await b.store.read_after(0, [NS], -1)}
        first_of: dict[str, int] = {}  # key -> the id it was first stored under
        stored_plain = 0
        for req, ans in zip(requests, answers, strict=True):
            for (k, n), r in zip(req, ans, strict=True):
                assert r is not None
                if isinstance(r.Ok, list):
                    (eid,) = r.Ok
                    # Every id answered is that event: its content.
                    assert msgspec.json.decode(log[eid].data) == {"Nat": n}
                    if k is None:
                        assert not r.repeat
                        stored_plain += 1
                    else:
                        assert first_of.setdefault(k, eid) == eid  # one id per key, repeat or not
                else:
                    # Refused only as another event reusing a stored key.
                    assert k is not None and r.Err.code == "GenericError"
                    assert r.Err.GenericError.error_code == ERR_KEY_REUSED
        # Each key stored once, nothing else stored, and its first answer was not a repeat.
        assert len(log) == stored_plain + len(first_of)
        for k, eid in first_of.items():
            fresh = [r for req, ans in zip(requests, answers, strict=True)
                     for (kk, _), r in zip(req, ans, strict=True) if kk == k and r is not None and not r.repeat
                     and isinstance(r.Ok, list)]
            assert len(fresh) == 1 and fresh[0].Ok == [eid]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(_request, min_size=1, max_size=5), concurrent=st.booleans())
def test_each_key_is_stored_once_and_every_answer_names_its_event(
    requests: list[list[tuple[str | None, int]]], concurrent: bool
) -> None:
    asyncio.run(_run(requests, concurrent))


# Over HTTP.

async def _publish(http: aiohttp.ClientSession, server: ServerProcess, events: list[dict[str, Any]],
                   headers: dict[str, str] | None = None) -> Any:
    async with http.post(
        f"{server.url}/v1/icrc72_publish", json=events,
        headers={"authorization": f"Bearer {server.admin_token}", **(headers or {})},
    ) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _stats(http: aiohttp.ClientSession, server: ServerProcess) -> int:
    async with http.post(
        f"{server.url}/v1/icrc72_get_publications", json={},
        headers={"authorization": f"Bearer {server.admin_token}"},
    ) as resp:
        infos = await resp.json()
    (info,) = [i for i in infos if i["namespace"] == NS]
    return int(dict(info["stats"]).get("icrc72:publication:stats:events", {"Nat": 0})["Nat"])


async def test_over_http_a_repeat_answers_the_first_id_stores_and_counts_nothing(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as http:
        await _publish(http, server, [])  # a token check
        async with http.post(f"{server.url}/v1/icrc72_register_publication", json=[{"namespace": NS}],
                             headers={"authorization": f"Bearer {server.admin_token}"}) as resp:
            assert resp.status == 200
        e = {"namespace": NS, "data": {"Nat": 1}, "idempotencyKey": "order-17"}
        assert await _publish(http, server, [e]) == [{"Ok": [1]}]
        repeat, reused = await _publish(http, server, [e, {**e, "data": {"Nat": 2}}])
        assert repeat == {"Ok": [1], "repeat": True}
        assert reused["Err"]["GenericError"]["error_code"] == ERR_KEY_REUSED
        assert await _publish(http, server, [{"namespace": NS, "data": {"Nat": 3}}]) == [{"Ok": [2]}]
        assert await _stats(http, server) == 2
        # The Idempotency-Key header keys a request of one event.
        one = {"namespace": NS, "data": {"Nat": 4}}
        assert await _publish(http, server, [one], {"Idempotency-Key": "h-1"}) == [{"Ok": [3]}]
        assert await _publish(http, server, [one], {"Idempotency-Key": "h-1"}) == [{"Ok": [3], "repeat": True}]
        # Malformed keys are refused item by item.
        bad = await _publish(http, server, [{**one, "idempotencyKey": k} for k in ("", "a\nb", "x" * 256)])
        assert [r["Err"]["GenericError"]["error_code"] for r in bad] == [ERR_BAD_KEY] * 3
        assert await _stats(http, server) == 3



@given(st.permutations([("a", {"Nat": 1}), ("b", {"Text": "x"}), ("c", {"Bool": True}), ("d", {"Nat": 2})]))
def test_an_event_s_fingerprint_does_not_depend_on_its_headers_order(headers: list[tuple[str, Any]]) -> None:
    """Headers are a map: a retry that sends them in another order (a CloudEvent sent again
    in the other HTTP mode) is the same event, not a key reused for another."""
    from tidings.core import ingest

    def fp(hs: list[tuple[str, Any]]) -> bytes:
        e = Event(namespace="a.b", data={"Nat": 7}, headers=hs, idempotencyKey="k-1")
        rows, refused = ingest.prepare([e], 1)
        assert not refused
        return rows[0].fingerprint

    base = [("a", {"Nat": 1}), ("b", {"Text": "x"}), ("c", {"Bool": True}), ("d", {"Nat": 2})]
    assert fp(list(headers)) == fp(base)
    assert fp([*base[:3], ("d", {"Nat": 3})]) != fp(base)


@given(st.text(max_size=64), st.sampled_from([None, [], "trace"]))
def test_a_header_less_event_s_fingerprint_is_the_one_stored_keys_were_made_with(text: str, how: Any) -> None:
    """Fingerprints are stored with their keys: a retry after an upgrade must compute the
    same bytes for the same event, with no headers, an empty list, or only a trace context
    (which is the try's, not the event's)."""
    import hashlib

    from tidings.core import ingest, tracecontext

    headers = [(tracecontext.TRACEPARENT, {"Text": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})] if how == "trace" \
        else how
    e = Event(namespace="a.b", data={"Text": text}, headers=headers, idempotencyKey="k-1")
    rows, refused = ingest.prepare([e], 1)
    assert not refused
    data = msgspec.json.encode({"Text": text})
    assert rows[0].data == data
    assert rows[0].fingerprint == hashlib.sha256(hashlib.sha256(data).digest() + b"[]").digest()


async def test_a_taken_key_in_the_first_appends_after_a_restart_fails_only_its_own(tmp_path: Path) -> None:
    """The first commit after a start reads the log's highest seq inside the appends' group;
    when a taken key fails that group, the appends run again one by one and must read it
    again, not number from zero (which stored nothing and answered 500)."""
    path = tmp_path / "t.db"
    s = SQLiteStore(path)
    await s.open()
    await s.append([keyed("k", 0), keyed(None, 1)])
    await s.close()
    s = SQLiteStore(path)
    await s.open()
    try:
        jobs = [[keyed("k", 2)], *([keyed(f"j{i}", 10 + i)] for i in range(20))]
        got = await asyncio.gather(*(s.append(j) for j in jobs), return_exceptions=True)
        assert isinstance(got[0], KeyTaken), got[0]
        stored = [e for g in got[1:] for e in g]  # type: ignore[union-attr]
        assert sorted(e.seq for e in stored) == list(range(3, 23))
        assert sorted(e.id for e in stored) == list(range(3, 23)) and await s.head() == 22
    finally:
        await s.close()


async def test_the_reclaimer_deletes_every_expired_key_each_interval_not_one_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyed rate above one round of deletions per interval must not outgrow the reclaimer."""
    from tidings.broker.publish import _broadcaster

    monkeypatch.setattr(_broadcaster, "_RECLAIM_ROUND", 3)
    store = SQLiteStore(tmp_path / "t.db")
    b = Broker(Settings(data_dir=tmp_path, key_reclaim_interval_s=0), store)
    async with b:
        await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(
            namespace=NS, config=[("tidings:publication:dedupWindowMs", {"Nat": 1})])])
        answers = await b.broadcaster.publish(
            ADMIN, [Event(namespace=NS, data={"Nat": n}, idempotencyKey=f"k{n}") for n in range(7)])
        assert all(a is not None and isinstance(a.Ok, list) for a in answers)
        await asyncio.sleep(0.01)  # past the 1 ms window
        with pytest.raises(asyncio.TimeoutError):  # one interval: its first round, and the rest
            await asyncio.wait_for(b.broadcaster.reclaim_keys(1.0), 1.9)
        assert await store.expire_keys(b.clock.now_ns()) == 0


async def test_past_the_sqlite_key_index_s_bound_keyed_events_are_busy_and_plain_ones_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's index of live keys is bounded: past it a keyed event is refused as
    ``Busy`` (nothing of its request stored, safe to retry with its key), a request
    without keys is stored, and keys free up as their windows pass."""
    from tidings.store import _sqlite_keys

    monkeypatch.setattr(_sqlite_keys, "MAX_LIVE_KEYS", 3)
    store = SQLiteStore(tmp_path / "t.db")
    b = Broker(Settings(data_dir=tmp_path, key_reclaim_interval_s=0), store)
    async with b:
        await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(
            namespace=NS, config=[("tidings:publication:dedupWindowMs", {"Nat": 200})])])

        async def publish(*keys: str | None) -> list[ItemResult | None]:
            return await b.broadcaster.publish(
                ADMIN, [Event(namespace=NS, data={"Nat": 1}, idempotencyKey=k) for k in keys])

        assert all(isinstance(r and r.Ok, list) for r in await publish("k1", "k2", "k3"))
        # A request is one append: its unkeyed events wait with its keyed ones.
        assert [r and r.Err and r.Err.code for r in await publish("k4", None)] == ["Busy", "Busy"]
        (plain,) = await publish(None)
        assert plain is not None and isinstance(plain.Ok, list)
        assert set(await store.find_keys([(NS, "k4")], b.clock.now_ns())) == set()  # nothing of it stored
        await asyncio.sleep(0.25)  # past the 200 ms window
        assert await store.expire_keys(b.clock.now_ns()) == 3
        (again,) = await publish("k4")
        assert again is not None and isinstance(again.Ok, list) and not again.repeat
