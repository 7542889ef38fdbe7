"""The OpenAPI 3.1 document, generated from the wire Structs of the method table."""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from .. import __version__
from .methods import METHODS

__all__ = ["openapi_document"]

_REF = "#/components/schemas/{name}"


@functools.cache
def openapi_document() -> dict[str, Any]:
    methods = list(METHODS.values())
    types = [m.arg for m in methods] + [m.result for m in methods]
    schemas, components = msgspec.json.schema_components(types, ref_template=_REF)
    components["Error"] = {
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                "required": ["code", "message"],
            }
        },
        "required": ["error"],
    }
    error = {"application/json": {"schema": {"$ref": _REF.format(name="Error")}}}
    paths: dict[str, Any] = {}
    n = len(methods)
    for i, m in enumerate(methods):
        op: dict[str, Any] = {
            "operationId": m.name,
            "summary": m.summary,
            "security": [{"bearer": []}],
            "responses": {
                "200": {"description": "the result", "content": {"application/json": {"schema": schemas[n + i]}}},
                "400": {"description": "malformed or invalid body", "content": error},
                "401": {"description": "missing or unknown token", "content": error},
                "404": {"description": "unknown namespace", "content": error},
                "413": {"description": "body too large", "content": error},
            },
        }
        if m.arg is not None:
            op["requestBody"] = {
                "required": m.empty_arg is msgspec.UNSET,
                "content": {"application/json": {"schema": schemas[i]}},
            }
        paths[f"/v1/{m.name}"] = {"post": op}
    return {
        "openapi": "3.1.0",
        "info": {"title": "tidings", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
