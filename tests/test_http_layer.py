"""What the HTTP layer answers before the app (tidings.http1), and verbs no route takes:
the documented JSON error shape, on the broker alone and behind front processes."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.http1 import MAX_HEAD_BYTES

from .conftest import ServerProcess
from .interchain_support import DistributorProcess

pytestmark = pytest.mark.e2e


def exchange(server: ServerProcess | None, request: bytes, port: str = "") -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as it is to ``server`` (or ``port``); the status, headers and body of the answer."""
    port = port or (server.url.rsplit(":", 1)[1] if server is not None else "")
    with socket.create_connection(("127.0.0.1", int(port)), 5) as s:
        s.settimeout(5)
        try:
            s.sendall(request)
        except OSError:
            pass  # refused mid-send (an oversized head): the answer is still there to read
        data = b""
        while b"\r\n\r\n" not in data or len(data) < _length(data):
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _length(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(head) + 4 + int(line.split(b":")[1])
    return len(data) + 1


def documented_error(status: int, headers: dict[str, str], body: bytes) -> str:
    """The error code of an answer in the documented shape (fails otherwise)."""
    assert headers.get("content-type", "").startswith("application/json"), (status, headers, body)
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message"} and error["message"], error
    if status == 405:
        assert headers.get("allow"), headers  # RFC 9110: a 405 says what is allowed
    return str(error["code"])


@pytest.fixture(params=["1", "3"], ids=["broker", "fronts"])
def served(request: pytest.FixtureRequest, server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    server = server_factory(workers=request.param)
    if request.param != "1":
        deadline = time.monotonic() + 20
        while len(server.children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    return server


@pytest.mark.parametrize(("request_bytes", "status", "code"), [
    (b"CONNECT /v1/tidings_whoami HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method_not_allowed"),
    (b"PROPFIND /v1/tidings_whoami HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method_not_allowed"),
    (b"POST /openapi.json HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405, "method_not_allowed"),
    (b"FOO /v1/tidings_whoami HTTP/1.1\r\nHost: x\r\n\r\n", 501, "method_not_implemented"),
    (b"CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed_request"),
    (b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", 400, "malformed_request"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400, "malformed_request"),
    (b"POST /v1/tidings_whoami HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400, "malformed_request"),
    (b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed_request"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n", 431, "headers_too_large"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Many: 0123456789\r\n" * 4000 + b"\r\n", 431, "headers_too_large"),
    (b"GET /v1/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
     400, "websocket_refused"),
    (b"GET /v1/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
     b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: bad\r\n\r\n", 400, "websocket_refused"),
], ids=["connect", "propfind", "post-openapi", "unknown-verb", "connect-authority", "bad-version", "bad-header",
        "bad-length", "non-ascii-path", "one-big-header", "many-headers", "ws-no-key", "ws-bad-key"])
def test_what_the_http_layer_refuses_speaks_the_documented_shape(
    served: ServerProcess, request_bytes: bytes, status: int, code: str
) -> None:
    for _ in range(3):  # the fronts and the broker share the port: more than one may answer
        got_status, headers, body = exchange(served, request_bytes)
        assert got_status == status, (got_status, headers, body)
        assert documented_error(got_status, headers, body) == code
        if status in (405, 501) and b"/v1/" in request_bytes.split(b"\r\n")[0]:
            assert headers["allow"] == "POST"


def test_a_head_just_under_the_bound_is_served(served: ServerProcess) -> None:
    pad = b"a" * (MAX_HEAD_BYTES - 200)
    status, _, body = exchange(served, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + pad + b"\r\n\r\n")
    assert status == 200 and json.loads(body) == {"status": "ok"}


_TOKEN = st.text(st.sampled_from("!#$%&'*+-.^_`|~ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
                 min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=_TOKEN, line=st.binary(max_size=60))
def test_any_verb_or_request_line_gets_the_documented_shape(served: ServerProcess, method: str, line: bytes) -> None:
    # Any method token on an API path: the app's 405, or the layer's 501 for one it does not know.
    status, headers, body = exchange(served, method.encode() + b" /v1/tidings_whoami HTTP/1.1\r\nHost: x\r\n"
                                              b"Content-Length: 0\r\nConnection: close\r\n\r\n")
    if method != "POST":
        assert status in (405, 501), (method, status, body)
        assert documented_error(status, headers, body) in ("method_not_allowed", "method_not_implemented")
        assert headers["allow"] == "POST"
    # Any bytes as a request line: whatever the answer, it is JSON where it has a body.
    status, headers, body = exchange(served, line.replace(b"\n", b"") + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
    if body and status >= 400:
        documented_error(status, headers, body)


def test_the_distributors_http_layer_speaks_the_same_shape(tmp_path: Path) -> None:
    """``tidings distributor serve`` serves with the same protocol (docs/interchain.md's errors)."""
    tag = uuid.uuid4().hex[:10]
    d = DistributorProcess(tmp_path, {
        "networks": [{"name": "R", "kind": "redis", "stream": f"test:http-layer:{tag}"}],
        "redis": "redis://127.0.0.1:6379/0", "redis_prefix": f"test:http-layer:{tag}:",
    })
    d.start()
    try:
        port = str(d.port)
        for request_bytes, status, code in [
            (b"FOO /health HTTP/1.1\r\nHost: x\r\n\r\n", 501, "method_not_implemented"),
            (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400, "malformed_request"),
            (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n", 431,
             "headers_too_large"),
        ]:
            got_status, headers, body = exchange(None, request_bytes, port=port)
            assert got_status == status, (got_status, headers, body)
            assert documented_error(got_status, headers, body) == code
    finally:
        d.stop()
