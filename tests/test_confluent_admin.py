"""Admin-only calls on the Confluent face refuse everyone else in one shape, as the ICRC
API does (docs/rights.md): HTTP 403 with Confluent's ``{"error_code": 40301, "message"}``,
before anything about the subject is looked at, and nothing changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from .confluent_support import Raw
from .conftest import ServerProcess, admin_api

pytestmark = pytest.mark.e2e

SCHEMA = json.dumps({"type": "record", "name": "A", "fields": [{"name": "a", "type": "string", "default": ""}]})

# Every call of the face that only an admin may make.
ADMIN_ONLY = [
    ("PUT", "/config", {"compatibility": "NONE"}),
    ("DELETE", "/config", None),
    ("PUT", "/config/{s}", {"compatibility": "NONE"}),
    ("DELETE", "/config/{s}", None),
    ("PUT", "/mode", {"mode": "READONLY"}),
    ("DELETE", "/mode", None),
    ("PUT", "/mode/{s}", {"mode": "READONLY"}),
    ("DELETE", "/mode/{s}", None),
    ("DELETE", "/subjects/{s}", None),
    ("DELETE", "/subjects/{s}?permanent=true", None),
    ("DELETE", "/subjects/{s}/versions/1", None),
    ("DELETE", "/subjects/{s}/versions/latest?permanent=true", None),
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("confluent-admin")))
    s.start(new_port_if_taken=True)
    yield s
    s.stop()


@pytest.mark.parametrize("subject", ["admin-owned", "no-such-subject"])
async def test_admin_only_calls_refuse_others_with_40301(
    srv: ServerProcess, http: aiohttp.ClientSession, subject: str
) -> None:
    raw = Raw(http, srv)
    await raw.ok("POST", "/subjects/admin-owned/versions", {"schema": SCHEMA})
    await raw.ok("PUT", "/config/admin-owned", {"compatibility": "FULL"})
    reader = (await admin_api(http, srv, "tidings_create_principal", {"name": f"reader-{subject}"}))["token"]
    for method, path, body in ADMIN_ONLY:
        status, answer = await raw(method, path.format(s=subject), body, token=reader)
        assert (status, answer.get("error_code")) == (403, 40301), (method, path, status, answer)
        assert set(answer) == {"error_code", "message"} and "admin" in answer["message"], answer
    # Nothing changed.
    assert await raw.ok("GET", "/subjects/admin-owned/versions") == [1]
    assert await raw.ok("GET", "/config/admin-owned") == {"compatibilityLevel": "FULL"}
    assert (await raw.ok("GET", "/mode"))["mode"] == "READWRITE"
    assert (await raw.ok("GET", "/config"))["compatibilityLevel"] == "BACKWARD"
