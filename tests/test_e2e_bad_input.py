"""Bad input through the real server process: a 4xx JSON error with a stable code, never a 500.

Every test publishes a few events first, sends bad input, then checks that the server
still works and nothing stored was lost: the earlier events are delivered in order, the
publication's event count is right, and a new publish continues the id chain.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, eventually, read_body, respond

pytestmark = pytest.mark.e2e

MAX_BODY = 2000
MAX_ITEMS = 3


class Recorder:
    """An ASGI subscriber endpoint that records every push and answers 200 (trusted: confirms)."""

    def __init__(self) -> None:
        self.notifications: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.notifications.extend(json.loads(await read_body(receive)))
        await respond(send)


@pytest.fixture(scope="module")
def bad_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the whole module, with small limits so they are easy to exceed."""
    s = ServerProcess(
        Path(tmp_path_factory.mktemp("bad-input")),
        env={
            "TIDINGS_MAX_BODY_BYTES": str(MAX_BODY),
            "TIDINGS_MAX_BATCH_ITEMS": str(MAX_ITEMS),
            "TIDINGS_RETRY_INITIAL_S": "0.05",
            "TIDINGS_RETRY_MAX_S": "0.2",
            "TIDINGS_ACK_DEADLINE_S": "1",
        },
    )
    s.start(new_port_if_taken=True)
    yield s
    s.stop()


_ADMIN = object()


@dataclass
class Harness:
    server: ServerProcess
    session: aiohttp.ClientSession
    ns: str
    recorder: Recorder
    ids: list[int] = field(default_factory=list)

    async def raw(
        self,
        name: str,
        body: bytes | None,
        *,
        token: Any = _ADMIN,
        headers: dict[str, str] | None = None,
        method: str = "POST",
        path: str | None = None,
    ) -> tuple[int, Any]:
        hdrs = {"content-type": "application/json", **(headers or {})}
        if token is _ADMIN:
            hdrs.setdefault("authorization", f"Bearer {self.server.admin_token}")
        elif token is not None:
            hdrs["authorization"] = f"Bearer {token}"
        url = self.server.url + (path or f"/v1/{name}")
        async with self.session.request(method, url, data=body, headers=hdrs) as resp:
            raw = await resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw

    async def call(self, name: str, arg: Any, **kw: Any) -> tuple[int, Any]:
        return await self.raw(name, json.dumps(arg).encode(), **kw)

    async def ok(self, name: str, arg: Any, **kw: Any) -> Any:
        status, body = await self.call(name, arg, **kw)
        assert status == 200, body
        return body

    async def publish(self, n: int) -> list[int]:
        items = await self.ok("icrc72_publish", [{"namespace": self.ns, "data": {"Nat": i}} for i in range(n)])
        new = [item["Ok"][0] for item in items]
        self.ids.extend(new)
        return new

    async def check_intact(self) -> None:
        """Earlier events delivered in order, counted, and the id chain continues."""
        last = self.ids[-1] if self.ids else 0
        (new,) = await self.publish(1)
        assert new == last + 1
        assert self.ids == list(range(1, len(self.ids) + 1))
        await eventually(lambda: len(self.recorder.notifications) >= len(self.ids))
        got = self.recorder.notifications
        assert [n["eventId"] for n in got] == self.ids
        assert [n["prev_id"] for n in got] == [None, *self.ids[:-1]]
        pubs = await self.ok("icrc72_get_publications", {"take": 1000})
        (pub,) = [p for p in pubs if p["namespace"] == self.ns]
        assert dict(pub["stats"])["icrc72:publication:stats:events"] == {"Nat": len(self.ids)}
        async with self.session.get(self.server.url + "/healthz") as resp:
            assert resp.status == 200
        log = (self.server.data_dir / "server.log").read_text()
        assert "Traceback" not in log, log


@pytest.fixture
async def h(bad_server: ServerProcess, endpoints: Any) -> AsyncIterator[Harness]:
    """A fresh namespace with a trusted subscriber and two events already published."""
    recorder = Recorder()
    ep = await endpoints(recorder)
    async with aiohttp.ClientSession() as session:
        harness = Harness(bad_server, session, f"com.example.bad.t{uuid.uuid4().hex[:10]}", recorder)
        (r,) = await harness.ok("icrc72_register_publication", [{"namespace": harness.ns}])
        assert r == {"Ok": harness.ns}
        (r,) = await harness.ok("icrc72_register_subscription", [{"namespace": harness.ns, "endpoint": ep.url}])
        assert "Ok" in r
        assert await harness.publish(2) == [1, 2]
        yield harness


def assert_error(status: int, body: Any, want_status: int, want_code: str) -> None:
    assert (status, body["error"]["code"] if isinstance(body, dict) and "error" in body else body) == (
        want_status, want_code,
    )
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


# -- request-level errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b'[{"namespace": ', b"not json", b"[1, 2,]", b"\xff\xfe\x00", b'{"a": 1} trailing'],
    ids=["truncated", "text", "trailing-comma", "not-utf8", "trailing-garbage"],
)
async def test_malformed_json(h: Harness, body: bytes) -> None:
    for method in ("icrc72_publish", "icrc72_register_subscription", "icrc72_confirm_notifications"):
        status, answer = await h.raw(method, body)
        assert_error(status, answer, 400, "malformed_json")
    await h.check_intact()


async def test_wrong_types(h: Harness) -> None:
    cases: list[tuple[str, Any]] = [
        ("icrc72_publish", [{"namespace": 5, "data": {"Nat": 1}}]),
        ("icrc72_publish", {"namespace": h.ns, "data": {"Nat": 1}}),  # an object where a list is expected
        ("icrc72_publish", [{"namespace": h.ns}]),  # data missing
        ("icrc72_publish", [{"namespace": h.ns, "data": {"Nat": 1}, "headers": {"k": {"Nat": 1}}}]),
        ("icrc72_publish", [{"namespace": h.ns, "data": {"Nat": 1}, "timestamp": "now"}]),
        ("icrc72_publish", "hello"),
        ("icrc72_register_publication", [{"namespace": [h.ns]}]),
        ("icrc72_register_subscription", [{"namespace": h.ns, "endpoint": 5}]),
        ("icrc72_register_subscription", [{"namespace": h.ns, "endpoint": "http://x/", "mode": "sometimes"}]),
        ("icrc72_confirm_notifications", ["one"]),
        ("icrc72_confirm_notifications", {"ids": [1]}),
        ("icrc72_get_publications", {"take": "ten"}),
        ("icrc72_get_subscriptions", {"prev": "x"}),
        ("tidings_create_principal", {"name": 7}),
    ]
    for method, arg in cases:
        status, answer = await h.call(method, arg)
        assert_error(status, answer, 400, "invalid_argument")
    # A method that needs a body and got none.
    status, answer = await h.raw("icrc72_publish", b"")
    assert_error(status, answer, 400, "invalid_argument")
    await h.check_intact()


@pytest.mark.parametrize(
    "data",
    [
        {"Nat": -1},
        {"Foo": 1},
        123,
        "text",
        None,
        {"Nat": 1, "Int": 2},
        {"Nat": True},
        {"Nat8": 256},
        {"Blob": "not base64!"},
        {"Map": [["k"]]},
        {"Map": [[1, {"Nat": 1}]]},
        {"Array": [{"Nat": 1}, {"Bad": 2}]},
        {"Class": [{"name": "x", "value": {"Nat": 1}}]},
        {"Float": "1.5"},
    ],
    ids=repr,
)
async def test_malformed_icrc16_data(h: Harness, data: Any) -> None:
    good = {"namespace": h.ns, "data": {"Nat": 1}}
    # The bad event comes second: the whole batch is refused and the good one is not stored.
    status, answer = await h.call("icrc72_publish", [good, {"namespace": h.ns, "data": data}])
    assert_error(status, answer, 400, "invalid_value")
    await h.check_intact()


async def test_malformed_icrc16_header(h: Harness) -> None:
    status, answer = await h.call(
        "icrc72_publish", [{"namespace": h.ns, "data": {"Nat": 1}, "headers": [["x-bad", {"Nat": -5}]]}]
    )
    assert_error(status, answer, 400, "invalid_value")
    await h.check_intact()


async def test_deeply_nested_input_is_a_400(server_factory: Any) -> None:
    """Nesting deeper than the decoder or the value check follows is refused, not a crash."""
    server = server_factory()
    h = Harness(server, aiohttp.ClientSession(), "com.example.deep", Recorder())
    try:
        await h.ok("icrc72_register_publication", [{"namespace": h.ns}])
        await h.publish(2)
        too_deep_json = b'{"Array":[' * 600 + b'{"Nat":1}' + b"]}" * 600
        deep_option = b'{"Option":' * 990 + b'{"Nat":1}' + b"}" * 990
        for data in (too_deep_json, deep_option):
            body = b'[{"namespace":"com.example.deep","data":' + data + b"}]"
            status, answer = await h.raw("icrc72_publish", body)
            assert status == 400, answer
            assert answer["error"]["code"] in ("invalid_argument", "invalid_value"), answer
            body = b'[{"namespace":"com.example.other","config":[["k",' + data + b"]]}]"
            status, answer = await h.raw("icrc72_register_publication", body)
            assert status in (200, 400), answer
            if status == 200:
                assert list(answer[0]["Err"]) == ["ImproperConfig"]
        # The Recorder has no endpoint here: check the chain and the log only.
        (new,) = await h.publish(1)
        assert new == 3
        assert "Traceback" not in (server.data_dir / "server.log").read_text()
    finally:
        await h.session.close()


async def test_unknown_namespace(h: Harness, endpoints: Any) -> None:
    status, answer = await h.call("icrc72_publish", [{"namespace": "com.example.nowhere", "data": {"Nat": 1}}])
    assert_error(status, answer, 404, "namespace_not_found")
    assert "com.example.nowhere" in answer["error"]["message"]
    # One unknown namespace refuses the whole batch: the known one is not stored either.
    status, answer = await h.call(
        "icrc72_publish",
        [{"namespace": h.ns, "data": {"Nat": 1}}, {"namespace": "com.example.nowhere", "data": {"Nat": 2}}],
    )
    assert_error(status, answer, 404, "namespace_not_found")
    status, answer = await h.call(
        "icrc72_register_subscription", [{"namespace": "com.example.nowhere", "endpoint": "http://127.0.0.1:9/"}]
    )
    assert_error(status, answer, 404, "namespace_not_found")
    status, answer = await h.call("icrc72_get_subscriptions", {"namespace": "com.example.nowhere"})
    assert_error(status, answer, 404, "namespace_not_found")
    await h.check_intact()


async def test_oversized_body(h: Harness) -> None:
    big = [{"namespace": h.ns, "data": {"Text": "x" * MAX_BODY}}]
    body = json.dumps(big).encode()
    # With a Content-Length header: refused before it is read.
    status, answer = await h.raw("icrc72_publish", body)
    assert_error(status, answer, 413, "payload_too_large")

    # Chunked, without a Content-Length: refused while it is read.
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 500):
            yield body[i : i + 500]

    hdrs = {"content-type": "application/json", "authorization": f"Bearer {h.server.admin_token}"}
    async with h.session.post(f"{h.server.url}/v1/icrc72_publish", data=chunks(), headers=hdrs) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == "payload_too_large"
    # Just under the limit is fine.
    fits = [{"namespace": h.ns, "data": {"Text": "x" * (MAX_BODY - 200)}}]
    items = await h.ok("icrc72_publish", fits)
    h.ids.append(items[0]["Ok"][0])
    await h.check_intact()


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer tid_not-a-token", "Basic YWRtaW46YWRtaW4=", "Bearer", "Bearer    ", "tid_no-scheme"],
    ids=["missing", "unknown", "basic", "scheme-only", "blank-token", "no-scheme"],
)
async def test_unauthenticated(h: Harness, authorization: str | None) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    for method, arg in [
        ("icrc72_publish", [{"namespace": h.ns, "data": {"Nat": 1}}]),
        ("icrc72_get_publications", {}),
        ("tidings_whoami", None),
    ]:
        status, answer = await h.raw(method, json.dumps(arg).encode(), token=None, headers=headers)
        assert_error(status, answer, 401, "unauthenticated")
    await h.check_intact()


async def test_unknown_method_and_wrong_verb(h: Harness) -> None:
    status, answer = await h.call("icrc72_does_not_exist", [])
    assert_error(status, answer, 404, "unknown_method")
    status, answer = await h.call("icrc72_does_not_exist", [], token=None)  # the method is looked up first
    assert_error(status, answer, 404, "unknown_method")
    for verb in ("GET", "PUT", "DELETE", "PATCH"):
        status, answer = await h.raw("icrc72_publish", None, method=verb)
        assert_error(status, answer, 405, "method_not_allowed")
    status, answer = await h.raw("", b"[]", path="/v2/icrc72_publish")
    assert_error(status, answer, 404, "not_found")
    await h.check_intact()


async def test_non_admin_may_not_create_principals(h: Harness) -> None:
    created = await h.ok("tidings_create_principal", {"name": f"user-{uuid.uuid4().hex[:8]}"})
    assert created["admin"] is False
    status, answer = await h.call("tidings_create_principal", {"name": "mallory"}, token=created["token"])
    assert_error(status, answer, 403, "forbidden")
    status, answer = await h.call(
        "tidings_create_principal", {"name": "mallory", "admin": True}, token=created["token"]
    )
    assert_error(status, answer, 403, "forbidden")
    # The refused call created nothing: an admin can still take the name.
    created = await h.ok("tidings_create_principal", {"name": f"mallory-{uuid.uuid4().hex[:8]}"})
    assert created["token"].startswith("tid_")
    await h.check_intact()


# -- item-level errors: 200 with an Err per bad item --------------------------------------


async def test_invalid_subscription_endpoint(h: Harness) -> None:
    bad = [
        {"namespace": h.ns, "endpoint": "ftp://x"},
        {"namespace": h.ns},
        {"namespace": h.ns, "endpoint": ""},
        {"namespace": h.ns, "endpoint": "not a url"},
        {"namespace": h.ns, "endpoint": "http://"},
        {"namespace": h.ns, "endpoint": "http://127.0.0.1:9/", "config": [["k", {"Nat": -1}]]},
    ]
    for i in range(0, len(bad), MAX_ITEMS):
        items = await h.ok("icrc72_register_subscription", bad[i : i + MAX_ITEMS])
        assert [list(item["Err"]) for item in items] == [["ImproperConfig"]] * MAX_ITEMS
    # None of them was created.
    subs = await h.ok("icrc72_get_subscriptions", {"namespace": h.ns})
    assert len(subs) == 1
    await h.check_intact()


async def test_reserved_header_is_refused_per_item(h: Harness) -> None:
    last = h.ids[-1]
    items = await h.ok(
        "icrc72_publish",
        [
            {"namespace": h.ns, "data": {"Nat": 1}, "headers": [["x-mine", {"Text": "ok"}]]},
            {"namespace": h.ns, "data": {"Nat": 2}, "headers": [["icrc72:broadcaster:received", {"Nat": 1}]]},
            {"namespace": h.ns, "data": {"Nat": 3}},
        ],
    )
    assert items[0] == {"Ok": [last + 1]}
    err = items[1]["Err"]["GenericError"]
    assert err["error_code"] == 1 and "icrc72:broadcaster:received" in err["message"]
    assert items[2] == {"Ok": [last + 2]}  # the refused one left no gap
    h.ids += [last + 1, last + 2]
    for key in ("icrc72:broadcaster:sent", "icrc72:eventData:hash", "icrc72:relay:sent", "icrc77:replay:id"):
        (item,) = await h.ok(
            "icrc72_publish",
            [{"namespace": h.ns, "data": {"Nat": 1}, "headers": [["x-ok", {"Nat": 1}], [key, {"Nat": 1}]]}],
        )
        assert item["Err"]["GenericError"]["error_code"] == 1, key
    await h.check_intact()


@pytest.mark.parametrize("bad_id", [-1, "U*", "", "!!", 1.5], ids=repr)
async def test_bad_publisher_id(h: Harness, bad_id: Any) -> None:
    last = h.ids[-1]
    status, answer = await h.call(
        "icrc72_publish",
        [{"namespace": h.ns, "data": {"Nat": 1}, "id": bad_id}, {"namespace": h.ns, "data": {"Nat": 2}, "id": "7Z"}],
    )
    if isinstance(bad_id, float):  # not int | str | None: the body does not decode
        assert_error(status, answer, 400, "invalid_argument")
    else:
        assert status == 200, answer
        assert list(answer[0]["Err"]) == ["ImproperId"]
        assert answer[1] == {"Ok": [last + 1]}
        h.ids.append(last + 1)
    await h.check_intact()


async def test_batch_over_the_limit(h: Harness) -> None:
    events = [{"namespace": h.ns, "data": {"Nat": i}} for i in range(MAX_ITEMS + 1)]
    items = await h.ok("icrc72_publish", events)
    assert len(items) == MAX_ITEMS + 1
    assert all(list(item["Err"]) == ["GenericBatchError"] for item in items)
    # At the limit is fine.
    items = await h.ok("icrc72_publish", events[:MAX_ITEMS])
    assert [item["Ok"] for item in items] == [[3], [4], [5]]
    h.ids += [3, 4, 5]
    # The limit holds for every batch method, and the refused batch did nothing.
    over = MAX_ITEMS + 1
    items = await h.ok("icrc72_register_publication", [{"namespace": f"{h.ns}.x{i}"} for i in range(over)])
    assert all(list(item["Err"]) == ["GenericBatchError"] for item in items) and len(items) == over
    items = await h.ok(
        "icrc72_register_subscription", [{"namespace": h.ns, "endpoint": "http://127.0.0.1:9/"}] * over
    )
    assert all(list(item["Err"]) == ["GenericBatchError"] for item in items) and len(items) == over
    for method in ("icrc72_confirm_notifications", "icrc72_confirm_messages"):
        answer = await h.ok(method, list(range(1, over + 1)))
        assert [list(item["Err"]) for item in answer["itemized"]] == [["GenericBatchError"]] * over
    assert len(await h.ok("icrc72_get_subscriptions", {"namespace": h.ns})) == 1
    names = [p["namespace"] for p in await h.ok("icrc72_get_publications", {"take": 1000})]
    assert not [n for n in names if n.startswith(h.ns + ".")]
    await h.check_intact()
