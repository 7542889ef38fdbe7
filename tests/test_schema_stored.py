"""What an older tidings stored is read back within today's rules (docs/schemas.md,
"Registration checks"): limits past the specification's bounds are brought back within
them, and a schema accepted under an older rule stays readable."""

from __future__ import annotations

import json
import pickle
import time

import pytest

from tidings.core.schemas import BOUNDS, DEFAULT_LIMITS
from tidings.core.wire_schemas import SchemaRegistration
from tidings.schemas import SchemaBinder, SchemaRegistry
from tidings.schemas.formats import MalformedSchema, parse_model
from tidings.store import PrincipalRecord, SchemaChange, SchemaRecord
from tidings.store.memory import MemoryStore

ADMIN = PrincipalRecord(name="admin", admin=True)


async def test_stored_limits_past_the_bounds_are_brought_back_at_start() -> None:
    store = MemoryStore()
    await store.open()
    stored = {"max_count": 10**9, "min_size": 0, "max_size": 10**7, "open_registration": False, "registrars": ["r"]}
    await store.put_schema_setting("limits", stored, SchemaChange(schema_id=None, at=0, by="test", action="limits"))
    reg = SchemaRegistry(store)
    await reg.load()
    assert (reg.limits.max_count, reg.limits.min_size, reg.limits.max_size) == (
        BOUNDS["max_count"][1], BOUNDS["min_size"][0], BOUNDS["max_size"][1])
    assert reg.limits.problem() is None
    # What was within the bounds is kept as it was.
    assert (reg.limits.open_registration, reg.limits.registrars) == (False, ("r",))
    assert DEFAULT_LIMITS.problem() is None


UNION_DEFAULT_LATER_BRANCH = json.dumps({"type": "record", "name": "Note", "fields": [
    {"name": "text", "type": ["string", "null"], "default": None}]})


async def test_a_schema_stored_under_older_rules_stays_readable() -> None:
    """An older tidings accepted an Avro union's default of any branch. Such a stored
    schema is still read (and events checked against it); a new registration of the same
    text is refused by the current rule (docs/schemas.md)."""
    store = MemoryStore()
    await store.open()
    rec = SchemaRecord(format="AVRO", model=UNION_DEFAULT_LATER_BRANCH, canonical="old")
    stored = await store.create_schema(rec, [], SchemaChange(schema_id=None, at=0, by="old", action="register"))
    reg = SchemaRegistry(store)
    await reg.load()
    binding = SchemaBinder(reg).bind(stored.id, time.time_ns())
    assert binding.refused is None and binding.model is not None
    assert binding.model.validate({"Map": [["text", {"Text": "hi"}]]}) is None
    assert binding.model.validate({"Map": [["text", {"Nat": 1}]]}) is not None
    again = pickle.loads(pickle.dumps(binding.model))  # as Spark ships it
    assert again.validate({"Map": [["text", {"Text": "hi"}]]}) is None
    with pytest.raises(MalformedSchema, match="first branch"):
        parse_model("AVRO", UNION_DEFAULT_LATER_BRANCH)
    (result,) = await reg.register(ADMIN, [SchemaRegistration(model=UNION_DEFAULT_LATER_BRANCH, format="AVRO")])
    assert result.Err is not None and "first branch" in str(result.Err)
