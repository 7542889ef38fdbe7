"""The stream face (``/v1/stream``, docs/streaming.md) against the real server: publish with
many in flight, back-pressure, crashes, refusals, and stream subscribers."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.client import Admin, ApiResponseError, EventNotification, ItemError, Publisher, Stream, TransportError

from .conftest import ServerProcess, admin_api, eventually
from .test_e2e_publish import subscribed_inbox

pytestmark = pytest.mark.e2e

NS = "com.example.stream"


def ws_url(server: ServerProcess) -> str:
    return server.url.replace("http://", "ws://") + "/v1/stream"


def publish_msg(ref: int, ns: str = NS, data: Any = None, **extra: Any) -> str:
    event = {"namespace": ns, "data": data if data is not None else {"Nat": ref}, **extra}
    return json.dumps({"op": "publish", "ref": ref, "event": event})


async def registered(server: ServerProcess, *namespaces: str) -> None:
    async with Publisher(server.url, server.admin_token) as p:
        for ns in namespaces:
            await p.register_publication(ns)


async def test_events_get_ids_in_the_order_they_were_sent(server: ServerProcess, endpoints: Any) -> None:
    await registered(server, NS)
    inbox, sub = await subscribed_inbox(server, endpoints, NS)
    await sub.close()
    n = 3000
    async with Stream(server.url, server.admin_token, window=256) as s:
        ids = await asyncio.gather(*(s.publish(NS, {"i": i}) for i in range(n)))
    assert ids == list(range(1, n + 1))
    await eventually(lambda: inbox.count(NS) == n, timeout=30)
    notes = inbox.by_ns[NS]
    assert [x.eventId for x in notes] == ids
    assert [x.data for x in notes] == [{"Map": [["i", {"Nat": i}]]} for i in range(n)]


async def test_the_server_reads_no_more_than_the_window(server_factory: Any) -> None:
    """With a window of 4, the server never has more than 4 publishes of a connection
    read and unanswered, however fast they are sent: no answer covers more than 4."""
    server = server_factory(stream_window="4")
    await registered(server, NS)
    n = 400
    async with aiohttp.ClientSession() as http, http.ws_connect(
        ws_url(server), headers={"authorization": f"Bearer {server.admin_token}"}
    ) as ws:
        for ref in range(1, n + 1):  # all at once, reading nothing meanwhile
            await ws.send_str(publish_msg(ref))
        answered: list[int] = []
        sizes = []
        while len(answered) < n:
            m = json.loads((await ws.receive(timeout=30)).data)
            assert m["op"] == "results", m
            sizes.append(len(m["refs"]))
            answered += m["refs"]
            assert all("Ok" in r for r in m["results"])
    assert answered == list(range(1, n + 1))
    assert max(sizes) <= 4
    assert len(sizes) >= n // 4


async def test_a_full_window_stops_reading_the_socket(server_factory: Any) -> None:
    """Back-pressure reaches TCP: while the store cannot commit (another process holds
    its write lock), the server reads 2 publishes, then nothing more of the socket, so
    the client's sends stop completing once the socket buffers are full. Everything
    sent is stored and answered once the lock is released."""
    server = server_factory(stream_window="2", store="")  # the embedded store, whose lock it takes
    await registered(server, NS)
    big = {"Text": "x" * 60_000}
    async with aiohttp.ClientSession() as http, http.ws_connect(
        ws_url(server), headers={"authorization": f"Bearer {server.admin_token}"}
    ) as ws:
        sent = 0

        async def flood() -> None:
            nonlocal sent
            while True:
                await ws.send_str(publish_msg(sent + 1, data=big))
                sent += 1
                await asyncio.sleep(0)

        lock = sqlite3.connect(server.data_dir / "tidings.db", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # the server's writer waits (busy_timeout 10 s)
        try:
            task = asyncio.create_task(flood())
            await asyncio.sleep(2)
            stalled_at = sent
            await asyncio.sleep(1)
            assert sent == stalled_at, "the client could still send: nothing held it back"
            assert sent < 2_000  # 120 MB: far more than socket buffers hold
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            lock.execute("ROLLBACK")
            lock.close()
        answered: list[int] = []
        while len(answered) < sent:
            m = json.loads((await ws.receive(timeout=30)).data)
            assert all("Ok" in r for r in m["results"]), m
            answered += m["refs"]
    assert answered == list(range(1, sent + 1))


async def test_nothing_acknowledged_is_lost_when_the_connection_or_server_dies(
    server_factory: Any, endpoints: Any
) -> None:
    server = server_factory(retry_initial_s="0.05", retry_max_s="0.5")
    await registered(server, NS)
    inbox, sub = await subscribed_inbox(server, endpoints, NS)
    await sub.close()
    acked: list[int] = []

    async def stream_until_dead(kill: Any) -> None:
        # One try each (deadline 0): what a retry with the same key gives is held by
        # tests/test_publish_retries.py; here, what the connection's death leaves.
        s = Stream(server.url, server.admin_token, window=64, deadline=0)
        await s.connect()

        async def one(i: int) -> None:
            try:
                acked.append(await s.publish(NS, {"i": i}))
            except TransportError:
                pass

        tasks = [asyncio.create_task(one(i)) for i in range(20_000)]
        await eventually(lambda: len(acked) > 500 * (1 + kills), timeout=30)
        kill(s)
        await asyncio.gather(*tasks)
        await s.close()

    kills = 0
    # 1. the client's socket is cut (no close handshake) with publishes in flight
    await stream_until_dead(lambda s: s._ws._response.connection.transport.get_extra_info("socket").shutdown(2))
    kills += 1
    # 2. the server is SIGKILLed with publishes in flight
    await stream_until_dead(lambda s: server.stop(signal.SIGKILL))
    server.start()
    assert len(acked) == len(set(acked))
    await eventually(lambda: {n.eventId for n in inbox.by_ns[NS]} >= set(acked), timeout=60)


async def test_a_bad_token_and_too_many_connections_are_refused(server_factory: Any) -> None:
    server = server_factory(stream_max_connections_per_principal="2")
    with pytest.raises(ApiResponseError) as e:
        async with Stream(server.url, "not-a-token"):
            pass
    assert (e.value.status, e.value.code) == (401, "unauthenticated")
    async with Stream(server.url, server.admin_token), Stream(server.url, server.admin_token):
        with pytest.raises(ApiResponseError) as e:
            async with Stream(server.url, server.admin_token):
                pass
        assert (e.value.status, e.value.code) == (429, "too_many_connections")
    async with Stream(server.url, server.admin_token):  # closed ones no longer count
        pass


async def test_missing_authorization_header_gets_401(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as e:
            await http.ws_connect(ws_url(server))
    assert e.value.status == 401


_DEEP = "[" * 1000 + "]" * 1000


@pytest.mark.parametrize(
    ("send", "code"),
    [
        (lambda ws: ws.send_str(publish_msg(1, data={"Text": "y" * 5000})), 1009),
        (lambda ws: ws.send_bytes(b"\x00\x01"), 1008),
        (lambda ws: ws.send_str("{not json"), 1007),
        (lambda ws: ws.send_str('{"op": "dance"}'), 1007),
        # Nested deeper than the decoder goes: its ref cannot be read, so it is closed as one without.
        (lambda ws: ws.send_str('{"op": "ack", "push": 1, "results": ' + _DEEP + "}"), 1007),
        (lambda ws: ws.send_str('{"op": "dance", "ref": 3, "x": ' + _DEEP + "}"), 1007),
        (lambda ws: ws.send_str('{"op": "publish", "ref": 3, "event": {"namespace": "a", "data": ' + _DEEP + "}}"),
         1007),
    ],
    ids=["oversize", "binary", "malformed", "unknown-op-without-ref", "deep-ack", "deep-unknown-op", "deep-publish"],
)
async def test_bad_messages_close_with_a_clear_code(server_factory: Any, send: Any, code: int) -> None:
    server = server_factory(stream_max_frame_bytes="4096")
    await registered(server, NS)
    async with aiohttp.ClientSession() as http, http.ws_connect(
        ws_url(server), headers={"authorization": f"Bearer {server.admin_token}"}
    ) as ws:
        await ws.send_str(publish_msg(7))
        ok = json.loads((await ws.receive(timeout=10)).data)
        assert ok == {"op": "results", "refs": [7], "results": [{"Ok": [1]}]}
        await send(ws)
        msg = await ws.receive(timeout=10)
        assert msg.type is aiohttp.WSMsgType.CLOSE, msg
        assert ws.close_code == code
    # The server is still well, and stored nothing of the refused message.
    async with Stream(server.url, server.admin_token) as s:
        assert await s.publish(NS, 1) == 2


async def test_errors_are_itemised_and_the_connection_goes_on(server: ServerProcess) -> None:
    await registered(server, NS)
    async with Admin(server.url, server.admin_token) as admin:
        bob = await admin.create_principal("bob")
    async with aiohttp.ClientSession() as http, http.ws_connect(
        ws_url(server), headers={"authorization": f"Bearer {bob}"}
    ) as ws:
        await ws.send_str(publish_msg(1))  # bob is not a publisher of NS
        await ws.send_str(publish_msg(2, ns="com.example.nowhere"))
        await ws.send_str(publish_msg(3, data={"Nat": -1}))
        await ws.send_str(json.dumps({"op": "publish", "ref": 4, "event": {"namespace": 5}}))
        await ws.send_str(json.dumps({"op": "listen", "ref": 5, "subscriptions": [1]}))
        answers = {}
        while len(answers) < 5:
            m = json.loads((await ws.receive(timeout=10)).data)
            for ref in m.get("refs", [m.get("ref")]):
                answers[ref] = m
    assert "Unauthorized" in answers[1]["results"][0]["Err"]
    assert (answers[2]["op"], answers[2]["code"]) == ("error", "namespace_not_found")
    assert (answers[3]["op"], answers[3]["code"]) == ("error", "invalid_value")
    assert (answers[4]["op"], answers[4]["code"]) == ("error", "invalid_argument")
    assert "NotFound" in answers[5]["results"][0]["Err"]
    async with Stream(server.url, bob) as s:
        with pytest.raises(ItemError) as e:
            await s.publish(NS, {"a": 1})
        assert e.value.code == "Unauthorized"


BIG = [2**63, -(2**63) - 1, 2**64, 10**40]


@pytest.mark.parametrize("n", BIG)
@pytest.mark.parametrize(
    ("message", "where"),
    [
        (lambda n: {"op": "confirm", "ref": 1, "ids": [5, n]}, "$.ids[1]"),
        (lambda n: {"op": "confirm", "ref": n, "ids": [5]}, "$.ref"),
        (lambda n: {"op": "listen", "ref": 1, "subscriptions": [n]}, "$.subscriptions[0]"),
        (lambda n: {"op": "publish", "ref": n, "event": {"namespace": NS, "data": {"Nat": 1}}}, "$.ref"),
    ],
    ids=["confirm-ids", "confirm-ref", "listen", "publish-ref"],
)
async def test_integers_past_int64_are_refused_under_the_ref_and_the_connection_goes_on(
    server: ServerProcess, message: Any, where: str, n: int
) -> None:
    # As icrc72_confirm_notifications over HTTP answers 400 out_of_range: one past int64
    # reached the store and closed the connection with no close frame.
    await registered(server, NS)
    m = message(n)
    async with aiohttp.ClientSession() as http, http.ws_connect(
        ws_url(server), headers={"authorization": f"Bearer {server.admin_token}"}
    ) as ws:
        await ws.send_str(json.dumps(m))
        answer = json.loads((await ws.receive(timeout=10)).data)
        assert answer["op"] == "error" and answer["code"] == "out_of_range", answer
        assert answer["ref"] == m["ref"] and where in answer["message"]
        await ws.send_str(publish_msg(2))  # the connection goes on
        ok = json.loads((await ws.receive(timeout=10)).data)
        assert ok["op"] == "results" and ok["refs"] == [2] and "Ok" in ok["results"][0]
    assert "Traceback" not in (server.data_dir / "server.log").read_text()


_ints = st.integers(-(2**70), 2**70) | st.integers(-3, 3)
_leaf = st.none() | st.booleans() | _ints | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
_shallow = _leaf | st.lists(_leaf, max_size=3) | st.dictionaries(st.text(max_size=6), _leaf, max_size=3)
_json = _shallow | st.lists(_shallow, max_size=3) | st.dictionaries(st.text(max_size=6), _shallow, max_size=3)
_some_ints = st.lists(_ints, min_size=1, max_size=4)
_event = st.fixed_dictionaries(
    {"namespace": st.sampled_from([NS, "x.y", ""]), "data": _json},
    optional={"id": _ints | st.text(max_size=4), "headers": _json, "timestamp": _ints},
)
_messages = st.one_of(
    # Well-formed but for their values, as a client that knows the protocol sends them ...
    st.fixed_dictionaries({"op": st.just("publish"), "ref": _ints, "event": _event}),
    st.fixed_dictionaries({"op": st.just("confirm"), "ref": _ints, "ids": _some_ints}),
    st.fixed_dictionaries({"op": st.just("listen"), "ref": _ints, "subscriptions": _some_ints}),
    st.fixed_dictionaries({"op": st.just("ack"), "push": _ints}, optional={"results": _json}),
    st.fixed_dictionaries({"op": st.just("nack"), "push": _ints},
                          optional={"status": _ints, "retryAfter": st.floats(allow_nan=False, allow_infinity=False)}),
    # ... and anything else.
    st.dictionaries(st.sampled_from(["op", "ref", "push", "ids", "event", "results"]), _json, max_size=4),
    _json,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(_messages, min_size=1, max_size=4))
async def test_any_message_is_answered_or_closed_with_a_clear_code(server: ServerProcess, messages: list[Any]) -> None:
    # Whatever a client sends: an answer, or a close code of the protocol's; never a
    # dropped connection (1006) or an internal error (1011), and nothing in the log.
    await registered(server, NS)
    log_path = server.data_dir / "server.log"
    seen = log_path.stat().st_size  # the server lives through all examples: only this one's lines
    async with aiohttp.ClientSession() as http, http.ws_connect(
        ws_url(server), headers={"authorization": f"Bearer {server.admin_token}"}
    ) as ws:
        for m in messages:
            await ws.send_str(json.dumps(m))
        await ws.send_str(publish_msg(1))
        while True:
            msg = await ws.receive(timeout=10)
            if msg.type is not aiohttp.WSMsgType.TEXT:
                assert msg.type is aiohttp.WSMsgType.CLOSE and ws.close_code in (1007, 1008, 1009), (msg, messages)
                break
            answer = json.loads(msg.data)
            if answer.get("op") == "results" and 1 in answer["refs"] and answer["results"][answer["refs"].index(1)]:
                break  # the connection went on to the last publish
    with log_path.open("rb") as f:
        f.seek(seen)
        log = f.read().decode(errors="replace")
    assert "Traceback" not in log and "ERROR" not in log, (messages, log[-2000:])


async def test_clients_leaving_through_a_front_leave_no_error_behind(server_factory: Any) -> None:
    server = server_factory(workers="3")
    await eventually(lambda: len(server.children()) == 2)
    await registered(server, NS)
    for i in range(12):  # on connections of their own: most land on a front
        async with aiohttp.ClientSession() as http, http.ws_connect(
            ws_url(server), headers={"authorization": f"Bearer {server.admin_token}"}
        ) as ws:
            await ws.send_str(publish_msg(i))
            assert json.loads((await ws.receive(timeout=10)).data)["op"] == "results"
            for k in range(50):  # left unanswered: the answers meet a closed connection
                await ws.send_str(publish_msg(1000 + k))
    async with Stream(server.url, server.admin_token) as s:
        assert await s.publish(NS, 1) > 12
    await asyncio.sleep(0.5)
    log = (server.data_dir / "server.log").read_text()
    assert "Task exception was never retrieved" not in log and "Traceback" not in log, log[-3000:]


async def _stream_subscription(http: aiohttp.ClientSession, server: ServerProcess, mode: str = "trusted",
                               **config: Any) -> int:
    reg: dict[str, Any] = {"namespace": NS, "endpoint": "stream:test", "mode": mode}
    if config:
        reg["config"] = [[k, {"Nat": v}] for k, v in config.items()]
    (r,) = await admin_api(http, server, "icrc72_register_subscription", [reg])
    return int(r["Ok"])


async def test_a_stream_subscriber_receives_in_order_and_a_failure_is_pushed_again(
    server_factory: Any, http: aiohttp.ClientSession
) -> None:
    server = server_factory(retry_initial_s="0.05", retry_max_s="0.2")
    await registered(server, NS)
    sub_id = await _stream_subscription(http, server)
    got: list[int] = []
    failed_once: set[int] = set()

    async def handler(n: EventNotification) -> None:
        if n.eventId == 5 and n.eventId not in failed_once:
            failed_once.add(n.eventId)
            raise RuntimeError("not yet")
        got.append(n.eventId)

    async with Stream(server.url, server.admin_token, handler=handler) as listener:
        (r,) = await listener.listen([sub_id])
        assert r is not None and r.Ok is True
        async with Stream(server.url, server.admin_token) as pub:
            await asyncio.gather(*(pub.publish(NS, i) for i in range(50)))
        await eventually(lambda: len(got) == 50, timeout=20)
    assert failed_once == {5}
    assert sorted(got) == list(range(1, 51))
    assert got[:4] == [1, 2, 3, 4]  # order holds up to the failure (it is retried after its batch)


async def test_pushes_wait_for_the_subscriber_to_connect_and_oneshot_confirms_over_the_stream(
    server_factory: Any, http: aiohttp.ClientSession
) -> None:
    server = server_factory(retry_initial_s="0.05", retry_max_s="0.2", ack_deadline_s="2")
    await registered(server, NS)
    sub_id = await _stream_subscription(http, server, mode="oneshot")
    async with Stream(server.url, server.admin_token) as pub:
        ids = [await pub.publish(NS, i) for i in range(10)]  # nobody listens yet
    got: list[int] = []

    def handler(n: EventNotification) -> None:
        got.append(n.eventId)

    async with Stream(server.url, server.admin_token, handler=handler) as listener:
        await listener.listen([sub_id])
        await eventually(lambda: sorted(set(got)) == ids, timeout=20)
        await asyncio.sleep(2.5)  # past the ack deadline: confirmed ones are not sent again
    assert sorted(got) == ids


async def test_listening_to_an_http_subscription_is_refused(server: ServerProcess, endpoints: Any) -> None:
    await registered(server, NS)
    _inbox, sub = await subscribed_inbox(server, endpoints, NS)
    await sub.close()
    async with Admin(server.url, server.admin_token) as admin:
        (info,) = await admin.get_subscriptions()
    async with Stream(server.url, server.admin_token, handler=lambda n: None) as s:
        (r,) = await s.listen([info.id])
    assert r is not None and r.Err is not None and r.Err.code == "ImproperConfig"


async def test_a_revoked_token_closes_the_connection(server: ServerProcess, http: aiohttp.ClientSession) -> None:
    await registered(server, NS)
    async with Admin(server.url, server.admin_token) as admin:
        carol = await admin.create_principal("carol")
    async with http.ws_connect(ws_url(server), headers={"authorization": f"Bearer {carol}"}) as ws:
        await admin_api(http, server, "tidings_revoke_tokens", {"principal": "carol"})
        await asyncio.sleep(2.5)  # past the connection's next token check
        for ref in range(1, 100):
            await ws.send_str(publish_msg(ref))
            msg = await ws.receive(timeout=10)
            if msg.type is aiohttp.WSMsgType.CLOSE:
                break
        assert ws.close_code == 4401
