"""The registry's limits stay within the specification's bounds (docs/schemas.md,
"Registration checks"), whichever way they arrive: an update, or a stored value that an
older version let past them."""

from __future__ import annotations

from tidings.core.schemas import BOUNDS, DEFAULT_LIMITS
from tidings.schemas import SchemaRegistry
from tidings.store import SchemaChange
from tidings.store.memory import MemoryStore


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
