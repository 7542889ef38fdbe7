"""Front processes (docs/scaling.md): a server of several processes answers exactly as a
server of one does, whichever process a connection lands on."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import ServerProcess

pytestmark = pytest.mark.e2e

NS = "fronts.same"


async def call(server: ServerProcess, method: str, body: bytes | str, token: str | None = None,
               headers: dict[str, str] | None = None) -> tuple[int, Any, str | None]:
    """One request on a connection of its own (so that the kernel picks a process anew)."""
    h = {"authorization": f"Bearer {token or server.admin_token}", **(headers or {})}
    async with aiohttp.ClientSession() as http, http.post(f"{server.url}/v1/{method}", data=body, headers=h) as r:
        raw = await r.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw
        return r.status, parsed, r.headers.get("Warning")


@pytest.fixture
def pair(server_factory: Callable[..., ServerProcess]) -> tuple[ServerProcess, ServerProcess]:
    one = server_factory(workers="1", max_body_bytes="4096", max_batch_items="5")
    many = server_factory(workers="3", max_body_bytes="4096", max_batch_items="5")
    deadline = time.monotonic() + 20
    while len(many.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert one.children() == [] and len(many.children()) == 2
    return one, many


CASES: list[tuple[str, bytes | str, str | None]] = [
    ("icrc72_publish", json.dumps([{"namespace": NS, "data": {"Nat": 1}}]), None),
    ("icrc72_publish", json.dumps([{"namespace": NS, "data": {"Text": "x"}, "id": "not base32!"}]), None),
    ("icrc72_publish", json.dumps([{"namespace": NS, "data": {"Nat": 1},
                                    "headers": [["icrc72:broadcaster:x", {"Nat": 1}]]}]), None),
    ("icrc72_publish", json.dumps([{"namespace": NS, "data": {"Bogus": 1}}]), None),  # 400 invalid_value
    ("icrc72_publish", json.dumps([{"namespace": "fronts.unknown", "data": {"Nat": 1}}]), None),  # 404
    ("icrc72_publish", json.dumps([{"namespace": "fronts.unknown", "data": {"Bogus": 1}}]), None),  # 404 first
    ("icrc72_publish", json.dumps([{"namespace": NS, "data": {"Nat": 1}}]), "bad-token"),  # 401
    ("icrc72_publish", json.dumps([{"namespace": NS, "data": {"Bogus": 1}}]), "bad-token"),  # 401 first
    ("icrc72_publish", "x" * 5000, None),  # 413
    ("icrc72_publish", "x" * 5000, "bad-token"),  # 401 before 413
    ("icrc72_publish", b"[{", None),  # malformed
    ("icrc72_publish", "[" * 1500 + "]" * 1500, None),  # nested past the decoder
    ("icrc72_publish", b"\xff\xfe", None),  # not UTF-8
    ("icrc72_publish", b"", None),
    ("icrc72_publish", json.dumps([{"namespace": NS, "data": {"Nat": i}} for i in range(6)]), None),  # > 5
    ("icrc72_publish", json.dumps([]), None),
    ("icrc72_get_publications", "{}", None),
    ("no_such_method", "{}", None),
]


async def test_every_answer_is_the_single_process_one(pair: tuple[ServerProcess, ServerProcess]) -> None:
    answers: dict[str, list[Any]] = {}
    for server, label in zip(pair, ("one", "many"), strict=True):
        await call(server, "icrc72_register_publication", json.dumps([{"namespace": NS, "config": []}]))
        got = []
        for method, body, token in CASES * 3:  # three times: different processes answer
            got.append(await call(server, method, body, token))
        answers[label] = got
    for case, one, many in zip(CASES * 3, answers["one"], answers["many"], strict=True):
        assert one == many, case


_values = st.recursive(
    st.builds(lambda n: {"Nat": n}, st.integers(0, 2**70)) | st.builds(lambda t: {"Text": t}, st.text(max_size=8))
    | st.just({"Bogus": 1}) | st.builds(lambda f: {"Float": f}, st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.builds(lambda xs: {"Array": xs}, st.lists(inner, max_size=3))
    | st.builds(lambda kv: {"Map": [[k, v] for k, v in kv.items()]}, st.dictionaries(st.text(max_size=3), inner,
                                                                                    max_size=3)),
    max_leaves=6,
)
_events = st.lists(st.fixed_dictionaries(
    {"namespace": st.sampled_from([NS, "fronts.unknown"]), "data": _values},
    optional={"id": st.one_of(st.integers(0, 2**64), st.text(max_size=4)),
              "headers": st.lists(st.tuples(st.sampled_from(["a", "icrc72:relay:x", "icrc77:replay:y"]), _values),
                                  max_size=2)},
), min_size=1, max_size=6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=_events)
async def test_any_batch_gets_the_same_answer(pair: tuple[ServerProcess, ServerProcess], batch: list[Any]) -> None:
    body = json.dumps(batch)
    one, many = pair
    for server in pair:
        await call(server, "icrc72_register_publication", json.dumps([{"namespace": NS, "config": []}]))
    a, b = await call(one, "icrc72_publish", body), await call(many, "icrc72_publish", body)
    # Ids differ when the two servers stored different numbers of events before; the rest may not.
    assert (a[0], _shape(a[1])) == (b[0], _shape(b[1])), body


def _shape(answer: Any) -> Any:
    if isinstance(answer, list):
        return [{"Ok": "id"} if isinstance(r, dict) and "Ok" in r else r for r in answer]
    return answer


async def test_a_deprecated_schema_warns_through_a_front(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(workers="3")
    (r,) = (await call(server, "register_schema", json.dumps([{"model": json.dumps({"type": "object"})}])))[1]
    sid = r["Ok"]["id"]
    await call(server, "icrc72_register_publication", json.dumps(
        [{"namespace": NS, "config": [["tidings:publication:schema", {"Nat": sid}]]}]))
    await call(server, "update_schema_state", json.dumps(
        [{"id": sid, "state": "Deprecated", "valid_to": time.time_ns() + 3600 * 10**9}]))
    for _ in range(6):
        status, body, warning = await call(server, "icrc72_publish", json.dumps(
            [{"namespace": NS, "data": {"Map": []}}]))
        assert status == 200 and "Ok" in body[0] and warning and "Deprecated" in warning


async def test_the_other_paths_pass_through(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(workers="3")
    for _ in range(6):
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{server.url}/openapi.json") as r:
                assert r.status == 200 and "paths" in await r.json()
            async with http.get(f"{server.url}/subjects", headers={
                    "authorization": f"Bearer {server.admin_token}"}) as r:
                assert r.status == 200 and await r.json() == []
            async with http.get(f"{server.url}/v1/icrc72_publish") as r:
                assert r.status == 405 and r.headers["Allow"] == "POST"
            async with http.head(f"{server.url}/healthz") as r:
                assert r.status in (200, 405)


async def test_the_private_routes_are_not_reachable_from_outside(pair: tuple[ServerProcess, ServerProcess]) -> None:
    """A client cannot hand the broker "prepared" rows itself (unchecked data, forged
    reserved headers): /_internal/... answers as on a server of one process, with or
    without a guessed front header, and nothing is stored."""
    import msgspec

    from tidings.core.ingest import Prepared, PublishBatch

    forged = msgspec.msgpack.encode(PublishBatch(1, 1, [Prepared(0, NS, b"not json", b"[]")], []))
    answers = []
    for server in pair:
        await call(server, "icrc72_register_publication", json.dumps([{"namespace": NS, "config": []}]))
        got = []
        for _ in range(6):
            for path in ("/_internal/publish", "/_internal/auth"):
                async with aiohttp.ClientSession() as http, http.post(
                    server.url + path, data=forged,
                    headers={"authorization": f"Bearer {server.admin_token}", "x-tidings-front": "guess"},
                ) as r:
                    got.append((r.status, await r.read()))
        answers.append(got)
        pubs = (await call(server, "icrc72_get_publications", "{}"))[1]
        stats = dict(next(p for p in pubs if p["namespace"] == NS)["stats"])
        assert stats["icrc72:publication:stats:events"] == {"Nat": 0}
    assert answers[0] == answers[1]
    assert {status for status, _ in answers[1]} == {404}


def test_a_second_server_on_a_port_in_use_refuses_to_start(server_factory: Callable[..., ServerProcess],
                                                          tmp_path: Path) -> None:
    """Every process of a server binds its port with SO_REUSEPORT; another server started
    on the same port by mistake must not join them (and take part of the connections)."""
    first = server_factory()
    other = tmp_path / "other"
    other.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "tidings", "serve", "--port", str(first.port), "--data-dir", str(other)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 1
    assert f"could not listen on 127.0.0.1:{first.port}" in out.stderr
    assert first.proc is not None and first.proc.poll() is None
    for _ in range(10):  # every connection still reaches the first server
        with urllib.request.urlopen(f"{first.url}/healthz", timeout=5) as r:
            assert r.status == 200


async def _raw_post(server: ServerProcess, path: str, headers: list[tuple[bytes, bytes]], body: bytes,
                    token: str | None = None) -> tuple[int, Any]:
    """One request written byte for byte on a connection of its own (header bytes that
    are not UTF-8, repeated headers: what an HTTP client library would not send)."""
    head = b"POST %b HTTP/1.1\r\nhost: x\r\nauthorization: Bearer %b\r\n" % (
        path.encode(), (token or server.admin_token).encode())
    head += b"".join(k + b": " + v + b"\r\n" for k, v in headers)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(head + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    raw = rest.partition(b"\r\n\r\n")[2]
    try:
        return int(status_line.split()[1]), json.loads(raw)
    except ValueError:
        return int(status_line.split()[1]), raw


_CE = [(b"ce-specversion", b"1.0"), (b"ce-id", b"1"), (b"ce-source", b"s"), (b"ce-type", b"t")]
_JSON_CT = (b"content-type", b"application/json")
CE_CASES: list[tuple[str, list[tuple[bytes, bytes]], bytes, str | None]] = [
    (NS, [*_CE, _JSON_CT], b'{"a": 1}', None),  # 200
    (NS, [*_CE, (b"ce-subject", b"\xff\xfe"), _JSON_CT], b"1", None),  # not UTF-8: 400
    # raw UTF-8: 200 (an id of its own: source and id are the event's idempotency key)
    (NS, [*_CE[:1], (b"ce-id", b"3"), *_CE[2:], (b"ce-subject", "é".encode()), _JSON_CT], b"1", None),
    (NS, [*_CE, (b"ce-id", b"2"), _JSON_CT], b"1", None),  # repeated: 400
    (NS, [*_CE, (b"ce-time", b"noon"), _JSON_CT], b"1", None),  # 400
    (NS, [*_CE, _JSON_CT], b"{", None),  # declared JSON, is not: 400
    (NS, [*_CE, _JSON_CT], b"1", "bad-token"),  # 401
    (NS, [*_CE[1:], _JSON_CT], b"1", "bad-token"),  # 401 before the missing specversion
    (NS, [*_CE, _JSON_CT], b"x" * 5000, None),  # 413
    ("fronts.unknown", [*_CE, _JSON_CT], b"1", None),  # 404
    (NS, [(b"content-type", b"application/cloudevents-batch+json")],
     json.dumps([{"specversion": "1.0", "id": str(i), "source": "s", "type": "t"} for i in range(6)]).encode(),
     None),  # more than max_batch_items: 400
    (NS, [(b"content-type", b"application/cloudevents-batch+json")], b"[]", None),  # empty: 200 []
    (NS, [(b"content-type", b"application/cloudevents+json")], b"[" * 1500 + b"]" * 1500, None),  # too deep
    (NS, [(b"content-type", b"application/cloudevents+json")],
     json.dumps({"specversion": "1.0", "id": "1", "source": "s", "type": "t",
                 "data": json.loads("[" * 900 + "]" * 900)}).encode(), None),  # deep data: a 4xx
]


async def test_cloudevents_get_the_single_process_answers(pair: tuple[ServerProcess, ServerProcess]) -> None:
    """``/v1/cloudevents/<ns>`` is taken by the fronts themselves (docs/cloudevents.md):
    byte for byte the answers of a server of one process, good and hostile requests."""
    answers: dict[str, list[Any]] = {}
    for server, label in zip(pair, ("one", "many"), strict=True):
        await call(server, "icrc72_register_publication", json.dumps([{"namespace": NS, "config": []}]))
        got = []
        for ns, headers, body, token in CE_CASES * 3:
            status, answer = await _raw_post(server, f"/v1/cloudevents/{ns}", headers, body, token)
            got.append((status, _shape(answer)))
        answers[label] = got
    for case, one, many in zip(CE_CASES * 3, answers["one"], answers["many"], strict=True):
        assert one == many, case
    assert [s for s, _ in answers["one"][:len(CE_CASES)]] == [
        200, 400, 200, 400, 400, 400, 401, 401, 413, 404, 400, 200, 400, 400]
