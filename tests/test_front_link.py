"""The link a front hands checked publishes to its broker over (docs/scaling.md, "The
link"): the broker serves only its own fronts on it, answers each request by its number
whatever the order the commits end in, and a link lost mid-request is a 503 that says the
events may be stored; never a request sent twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import msgspec
import pytest

from tidings.core import ingest
from tidings.core.link_wire import HEAD_BYTES, LinkAnswer, LinkRequest, frame, length
from tidings.core.wire import Event
from tidings.front.app import FrontConfig, front_app

from .conftest import ServerProcess
from .front_support import serving

NS = "link.ns"
_answer = msgspec.msgpack.Decoder(LinkAnswer).decode
_request = msgspec.msgpack.Decoder(LinkRequest).decode
_encode = msgspec.msgpack.Encoder().encode


def _batch(n: int = 1) -> ingest.PublishBatch:
    events = [Event(namespace=NS, data={"Nat": i}) for i in range(n)]
    now = time.time_ns()
    rows, refused = ingest.prepare(events, now)
    return ingest.PublishBatch(n, now, rows, [(i, ns, r) for i, (ns, r) in refused.items()])


def _front_secret(server: ServerProcess) -> str:
    """What the broker gave its front at start (in the front's environment: this user's)."""
    (child,) = server.children()
    env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
    conf = next(v for v in env if v.startswith(b"TIDINGS_FRONT_CONFIG="))
    return str(json.loads(conf.partition(b"=")[2])["secret"])


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    return await reader.readexactly(length(await reader.readexactly(HEAD_BYTES)))


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


@pytest.fixture
def fronted(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    server = server_factory(workers="2")
    deadline = time.monotonic() + 20
    while len(server.children()) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return server


async def _register(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/icrc72_register_publication", data=json.dumps([{"namespace": NS}]),
        headers={"authorization": f"Bearer {server.admin_token}"},
    ) as r:
        assert r.status == 200, await r.text()


@pytest.mark.e2e
async def test_the_broker_serves_the_link_only_to_its_own_fronts(fronted: ServerProcess) -> None:
    await _register(fronted)
    path = fronted.data_dir / "broker-link.sock"
    assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0  # this user's alone
    request = frame(_encode(LinkRequest(1, f"Bearer {fronted.admin_token}", _batch())))

    # A stranger who can reach the socket but does not know the secret: closed, unserved.
    for hello in (b"guess", b"", b"x" * 5000):
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(frame(hello) + request)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""
        await _close(writer)

    # The front's secret: served, exactly as the HTTP face answers.
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(frame(_front_secret(fronted).encode()) + request)
    answer = _answer(await asyncio.wait_for(_read_frame(reader), 10))
    assert (answer.ref, answer.status) == (1, 200)
    assert json.loads(answer.body) == [{"Ok": [1]}]
    assert ("content-type", "application/json") in answer.headers

    # A bad token is the caller's 401, on a connection that goes on serving.
    writer.write(frame(_encode(LinkRequest(2, "Bearer nope", _batch()))))
    answer = _answer(await asyncio.wait_for(_read_frame(reader), 10))
    assert (answer.ref, answer.status) == (2, 401)
    await _close(writer)

    # A frame past the largest batch, or one that is not a request (not msgpack, the wrong
    # shape, an empty frame, a header that is not UTF-8, 2^64 - 1 as its number with no
    # batch): the connection ends.
    not_utf8 = _encode(LinkRequest(3, "Bearer x", _batch())).replace(b"Bearer x", b"Bearer \xff")
    past_64 = b"\x93\xcf" + b"\xff" * 8 + b"\xa0\x90"  # [2^64 - 1, "", []]
    for bad in ((2**31).to_bytes(HEAD_BYTES, "big"), frame(b"\xc1not msgpack"), frame(_encode([1, "two"])),
                frame(b""), frame(not_utf8), frame(past_64)):
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(frame(_front_secret(fronted).encode()) + bad)
        assert await asyncio.wait_for(reader.read(), 10) == b""
        await _close(writer)

    # Only the one good request was stored.
    async with aiohttp.ClientSession() as http, http.post(
        f"{fronted.url}/v1/icrc72_publish", data=json.dumps([{"namespace": NS, "data": {"Nat": 9}}]),
        headers={"authorization": f"Bearer {fronted.admin_token}"},
    ) as r:
        assert await r.json() == [{"Ok": [2]}]


class FakeBroker:
    """The broker's end of a link, scripted: it holds requests until ``hold`` have come."""

    def __init__(self, hold: int, then: str) -> None:
        self.hold, self.then = hold, then
        self.hellos: list[bytes] = []
        self.requests: list[LinkRequest] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.hellos.append(await _read_frame(reader))
            held: list[LinkRequest] = []
            while True:
                req = _request(await _read_frame(reader))
                self.requests.append(req)
                held.append(req)
                if len(held) < self.hold:
                    continue
                if self.then == "close":
                    return
                for r in reversed(held):  # answered in the other order than sent
                    body = json.dumps([{"Ok": [r.batch.rows[0].data.decode()]}]).encode()
                    writer.write(frame(_encode(LinkAnswer(r.ref, 200, [("content-type", "application/json")], body))))
                held = []
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def _front(tmp_path: Path, fake: FakeBroker) -> AsyncIterator[str]:
    link = tmp_path / "link.sock"
    server = await asyncio.start_unix_server(fake.serve, path=str(link))
    config = FrontConfig(str(tmp_path / "nothing-here.sock"), "s3cret", max_body_bytes=1 << 20,
                         max_batch_items=100, max_frame_bytes=1 << 20, link=str(link))
    try:
        async with serving(front_app(config)) as url:
            yield url
    finally:
        server.close()


async def _publish(http: aiohttp.ClientSession, url: str, i: int) -> tuple[int, dict[str, str], object]:
    async with http.post(f"{url}/v1/icrc72_publish", data=json.dumps([{"namespace": NS, "data": {"Nat": i}}]),
                         headers={"authorization": "Bearer t"}) as r:
        return r.status, dict(r.headers), await r.json()


async def test_publishes_in_flight_on_one_link_each_get_their_own_answer(tmp_path: Path) -> None:
    fake = FakeBroker(hold=8, then="answer")
    async with _front(tmp_path, fake) as url, aiohttp.ClientSession() as http:
        got = await asyncio.gather(*(_publish(http, url, i) for i in range(8)))
    assert fake.hellos == [b"s3cret"]  # one connection, opened once, for all eight
    for i, (status, _, body) in enumerate(got):
        assert status == 200
        assert body == [{"Ok": [json.dumps({"Nat": i}, separators=(",", ":"))]}]
    assert len(fake.requests) == 8


async def test_a_link_lost_mid_publish_is_a_503_that_says_the_events_may_be_stored(tmp_path: Path) -> None:
    fake = FakeBroker(hold=3, then="close")
    async with _front(tmp_path, fake) as url, aiohttp.ClientSession() as http:
        got = await asyncio.gather(*(_publish(http, url, i) for i in range(3)))
        for status, headers, body in got:
            assert status == 503
            assert headers.get("Retry-After") == "1"
            assert "may have been stored" in body["error"]["message"]  # type: ignore[index]
        assert len(fake.requests) == 3  # none was sent again
        fake.then = "answer"
        fake.hold = 1
        # The next publish opens a new connection and is served on it.
        status, _, _ = await _publish(http, url, 7)
        assert status == 200
    assert len(fake.hellos) == 2 and len(fake.requests) == 4


async def test_a_broker_not_listening_is_a_503(tmp_path: Path) -> None:
    fake = FakeBroker(hold=1, then="answer")
    async with _front(tmp_path, fake) as url, aiohttp.ClientSession() as http:
        os.unlink(tmp_path / "link.sock")
        status, headers, _ = await _publish(http, url, 1)
    assert status == 503 and headers.get("Retry-After") == "1"


@pytest.mark.e2e
@pytest.mark.parametrize("stopped", ["broker", "front"])
async def test_a_broker_or_front_stopped_mid_link_loses_nothing_and_stores_nothing_twice(
    fronted: ServerProcess, stopped: str,
) -> None:
    """SIGSTOP aimed at the link: for 4 s, the broker (its commits and the link's far end
    frozen, the front's requests waiting on it) or the front (the broker's answers queued
    on a peer that does not read). Publishers time out and retry with the same keys
    through whatever process answers the port. Afterwards every event is stored once,
    under the id it was answered with, and both processes serve on."""
    from tidings.client import Publisher

    from .test_publish_retries import NS as RNS
    from .test_publish_retries import assert_exactly_once, register

    await register(fronted)
    (front,) = fronted.children()
    assert fronted.proc is not None
    pid = fronted.proc.pid if stopped == "broker" else front
    answered: dict[str, int] = {}
    per, n = 4, 120

    async def publish_all(c: int) -> None:
        async with Publisher(fronted.url, fronted.admin_token, deadline=60, timeout=1) as pub:
            for i in range(0, n, 2):
                names = [f"c{c}-{j}" for j in range(i, i + 2)]
                for name, eid in zip(names, await pub.publish_many(RNS, names), strict=True):
                    answered[name] = eid

    tasks = [asyncio.create_task(publish_all(c)) for c in range(per)]
    while len(answered) < per * n // 4:
        await asyncio.sleep(0.005)
    os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(4)
    finally:
        os.kill(pid, signal.SIGCONT)
    await asyncio.wait_for(asyncio.gather(*tasks), 90)
    assert len(answered) == per * n
    assert_exactly_once(fronted, answered)
    assert fronted.children() == [front] and fronted.proc.poll() is None
    # A stopped broker is not a stalled store: its commits waited for it, not the disk.
    log = (fronted.data_dir / "server.log").read_text()
    assert "has not committed" not in log and ("did not run" in log) == (stopped == "broker")
