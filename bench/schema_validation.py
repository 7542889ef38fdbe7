"""Validations per second of a 10-field event against a JSON Schema, an Avro and a Protobuf schema.

    .venv/bin/python bench/schema_validation.py [--seconds 2]

Measures ``Model.validate`` end to end (ICRC-16 wire value → instance → validation), the
work the publish path adds per event, for a valid event and for an invalid one (where the
error and its path are built). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from tidings.schemas.formats import Model, parse_model

JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0},
        "user": {"type": "string", "minLength": 1},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD", "ICP"]},
        "paid": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": ["string", "null"]},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "owner": {"type": "string"},
    },
    "required": ["id", "user", "amount", "currency", "paid"],
    "additionalProperties": False,
}

AVRO_SCHEMA = {
    "type": "record",
    "name": "Payment",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD", "ICP"]}},
        {"name": "paid", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "count", "type": "int"},
        {"name": "ratio", "type": "double"},
        {"name": "owner", "type": "string"},
    ],
}


PROTOBUF_SCHEMA = """syntax = "proto3";
package bench;
enum Currency { EUR = 0; USD = 1; ICP = 2; }
message Payment {
  int64 id = 1;
  string user = 2;
  double amount = 3;
  Currency currency = 4;
  bool paid = 5;
  repeated string tags = 6;
  optional string note = 7;
  int32 count = 8;
  double ratio = 9;
  string owner = 10;
}
"""


def event(amount: Any) -> dict[str, Any]:
    return {
        "Map": [
            ["id", {"Nat": 123456}],
            ["user", {"Text": "alice"}],
            ["amount", amount],
            ["currency", {"Text": "ICP"}],
            ["paid", {"Bool": True}],
            ["tags", {"Array": [{"Text": "a"}, {"Text": "b"}]}],
            ["note", {"Option": None}],
            ["count", {"Int": -3}],
            ["ratio", {"Float": 0.25}],
            ["owner", {"Principal": "aaaaa-aa"}],
        ]
    }


def rate(model: Model, value: Any, seconds: float) -> float:
    validate, n, start = model.validate, 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(1000):
            validate(value)
        n += 1000
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    args = parser.parse_args()
    good, bad = event({"Float": 12.5}), event({"Text": "twelve"})
    print(f"{'format':<8} {'event':<8} {'validations/s':>14}  {'µs each':>8}")
    for name, schema in (("JSON", JSON_SCHEMA), ("AVRO", AVRO_SCHEMA), ("PROTOBUF", PROTOBUF_SCHEMA)):
        model = parse_model(name, schema if isinstance(schema, str) else json.dumps(schema))
        if model.validate(good) is not None or model.validate(bad) is None:
            raise SystemExit(f"{name}: the sample events do not validate as expected")
        for label, value in (("valid", good), ("invalid", bad)):
            r = rate(model, value, args.seconds)
            print(f"{name:<8} {label:<8} {r:>14,.0f}  {1e6 / r:>8.2f}")


if __name__ == "__main__":
    main()
