"""The OpenAPI 3.1 document, generated from the wire Structs of the method table."""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from .. import __version__
from .confluent import ENDPOINTS
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
                "400": {"description": "malformed or invalid body, or a number out of range", "content": error},
                "401": {"description": "missing, unknown or revoked token", "content": error},
                "403": {"description": "the caller may not call this method (docs/rights.md)", "content": error},
                "404": {"description": "unknown method or namespace", "content": error},
                "409": {"description": "conflicts with what exists (e.g. the principal exists)", "content": error},
                "405": {"description": "another verb than POST (the Allow header says so)", "content": error},
                "413": {"description": "body too large", "content": error},
                "429": {"description": "a limit of the caller is reached (docs/security.md)", "content": error},
                "503": {"description": "the service is overloaded or stopping; try again", "content": error},
            },
        }
        if m.arg is not None:
            op["requestBody"] = {
                "required": m.empty_arg is msgspec.UNSET,
                "content": {"application/json": {"schema": schemas[i]}},
            }
        paths[f"/v1/{m.name}"] = {"post": op}
    paths.update(_confluent_paths())
    components["ConfluentError"] = {
        "type": "object",
        "properties": {"error_code": {"type": "integer"}, "message": {"type": "string"}},
        "required": ["error_code", "message"],
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "tidings", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "basic": {"type": "http", "scheme": "basic"}},
        },
    }


_CONFLUENT_STATUSES = {
    "400": "bad request", "401": "missing or unknown credentials", "403": "not allowed (docs/rights.md)",
    "404": "no such subject, version or schema (Confluent codes 40401-40409)",
    "405": "method not allowed", "409": "incompatible schema (40901)", "413": "body too large",
    "415": "unsupported media type", "422": "invalid schema, version, level or mode (42201-42209)",
    "429": "a limit of the caller is reached", "503": "the service is overloaded or stopping",
}


def _confluent_paths() -> dict[str, Any]:
    """The Confluent-compatible face (docs/confluent.md): its answers are Confluent's, so
    their bodies are described loosely here; errors have Confluent's shape."""
    error = {"application/vnd.schemaregistry.v1+json": {"schema": {"$ref": _REF.format(name="ConfluentError")}},
             "application/json": {"schema": {"$ref": _REF.format(name="ConfluentError")}}}
    out: dict[str, Any] = {}
    for verb, pattern, name in ENDPOINTS:
        names = iter(("subject", "version") if pattern[0] in ("subjects", "compatibility") else ("id",) * 2)
        parts, params = [], []
        for seg in pattern:
            if seg == "*":
                pname = next(names, "arg")
                parts.append(f"{{{pname}}}")
                params.append({"name": pname, "in": "path", "required": True, "schema": {"type": "string"}})
            else:
                parts.append(seg)
        op: dict[str, Any] = {
            "operationId": f"confluent_{verb.lower()}_{'_'.join(p.strip('{}') for p in parts)}",
            "summary": f"Confluent Schema Registry: {name.replace('_', ' ')}",
            "tags": ["confluent"],
            "security": [{"bearer": []}, {"basic": []}],
            "parameters": params,
            "responses": {
                "200": {"description": "Confluent's answer", "content": {
                    "application/vnd.schemaregistry.v1+json": {"schema": {}}, "application/json": {"schema": {}},
                }},
                **{code: {"description": text, "content": error} for code, text in _CONFLUENT_STATUSES.items()},
            },
        }
        if verb in ("POST", "PUT"):
            op["requestBody"] = {"required": True, "content": {
                "application/vnd.schemaregistry.v1+json": {"schema": {"type": "object"}},
                "application/json": {"schema": {"type": "object"}},
            }}
        out.setdefault("/" + "/".join(parts), {})[verb.lower()] = op
    return out
