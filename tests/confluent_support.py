"""Helpers of the Confluent-face tests: confluent-kafka's client and raw calls against a running tidings."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from .conftest import ServerProcess

MEDIA = "application/vnd.schemaregistry.v1+json"


def client(srv: ServerProcess, token: str | None = None) -> SchemaRegistryClient:
    """A fresh client (the client caches what it has seen, so a new one asks the server)."""
    return SchemaRegistryClient({"url": srv.url, "basic.auth.user.info": f"admin:{token or srv.admin_token}",
                                 "max.retries": 0})


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    with pytest.raises(SchemaRegistryError) as e:
        call(*args, **kwargs)
    return e.value.http_status_code, e.value.error_code


async def call(http: aiohttp.ClientSession, srv: ServerProcess, method: str, path: str, body: Any = None,
               token: str | None = "admin", raw: bytes | None = None, ctype: str = MEDIA) -> tuple[int, Any]:
    headers = {"content-type": ctype}
    if token is not None:
        headers["authorization"] = f"Bearer {srv.admin_token if token == 'admin' else token}"
    data = raw if raw is not None else None if body is None else json.dumps(body)
    async with http.request(method, srv.url + path, data=data, headers=headers) as resp:
        assert resp.content_type == MEDIA
        text = await resp.text()
        return resp.status, json.loads(text)


class Raw:
    """Raw calls as the admin that answer ``(status, body)``, and ``code()`` for refusals."""

    def __init__(self, http: aiohttp.ClientSession, srv: ServerProcess) -> None:
        self.http, self.srv = http, srv

    async def __call__(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await call(self.http, self.srv, method, path, body, **kw)

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, answer = await self(method, path, body, **kw)
        assert status == 200, answer
        return answer

    async def code(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, int]:
        status, answer = await self(method, path, body, **kw)
        assert set(answer) == {"error_code", "message"}, answer
        return status, answer["error_code"]
