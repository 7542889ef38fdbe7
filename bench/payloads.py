"""What the scenarios publish: the events, the schemas they are checked against, and the
fan-out size (shared by ``suite`` and the scenarios in modules of their own)."""

from __future__ import annotations

import json
from typing import Any

# About 120 bytes of JSON: what every system stores in the publish and fan-out scenarios.
EVENT: dict[str, Any] = {"namespace": "bench.tp", "data": {"Map": [["i", {"Nat": 1}], ["name", {"Text": "x" * 32}]]}}
PAYLOAD = json.dumps(EVENT).encode()
JSON_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["i", "name"],
    "properties": {"i": {"type": "integer", "minimum": 0}, "name": {"type": "string", "maxLength": 64}},
}
AVRO_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Bench", "fields": [{"name": "i", "type": "long"}, {"name": "name", "type": "string"}],
}
PROTOBUF_SCHEMA = 'syntax = "proto3";\nmessage Bench {\n  int64 i = 1;\n  string name = 2;\n}\n'
# A rich event (nested records, a list of them, an enum, a pattern) and a JSON Schema that
# checks all of it through $refs: validation cost beside the flat one above.
_LINE = {"Map": [["sku", {"Text": "AB-1234"}], ["qty", {"Nat": 3}], ["price", {"Float": 9.5}]]}
RICH_EVENT: dict[str, Any] = {"namespace": "bench.tp", "data": {"Map": [
    ["i", {"Nat": 1}], ["name", {"Text": "x" * 32}], ["currency", {"Text": "EUR"}],
    ["customer", {"Map": [["id", {"Nat": 42}], ["email", {"Text": "a@b.org"}], ["vip", {"Bool": False}]]}],
    ["lines", {"Array": [_LINE, _LINE, _LINE]}],
]}}
RICH_JSON_SCHEMA: dict[str, Any] = {
    "$defs": {
        "line": {"type": "object", "required": ["sku", "qty"], "additionalProperties": False, "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{4}$"}, "qty": {"type": "integer", "minimum": 1},
            "price": {"type": "number", "minimum": 0}}},
        "customer": {"type": "object", "required": ["id"], "properties": {
            "id": {"type": "integer"}, "email": {"type": "string", "maxLength": 254}, "vip": {"type": "boolean"}}},
    },
    "type": "object", "required": ["i", "name", "lines"],
    "properties": {
        "i": {"type": "integer", "minimum": 0}, "name": {"type": "string", "maxLength": 64},
        "currency": {"enum": ["EUR", "USD", "ICP"]}, "customer": {"$ref": "#/$defs/customer"},
        "lines": {"type": "array", "minItems": 1, "maxItems": 100, "items": {"$ref": "#/$defs/line"}},
    },
}
FANOUT_SUBS = 100
LATENCY_WARMUP = 0.25  # seconds at the latency scenario's rate whose events are not counted
