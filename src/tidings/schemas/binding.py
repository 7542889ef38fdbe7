"""Which schema a publication's events are checked against, asked once per batch.

A publication binds a schema with ``tidings:publication:schema``: a Nat is a schema id,
a Text a name, meaning the name's latest Active version at the time of publishing (or,
when no version is Active, its latest Deprecated one still inside its window). The
answer is cached per binding until the registry changes; only the deprecation window
is looked at on every call, since it depends on the time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import schemas as rules
from .formats import MalformedSchema, Model
from .registry import SchemaRegistry

__all__ = ["Binding", "SchemaBinder"]


@dataclass(frozen=True, slots=True)
class Binding:
    """What a namespace's events are checked against at one moment."""

    schema_id: int | None
    model: Model | None
    refused: str | None = None
    """Why every event is refused (the schema is Retracted, deleted, expired), or None."""
    warning: str | None = None
    """Set when events are accepted under a Deprecated schema."""


class SchemaBinder:
    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry
        self._cache: dict[int | str, tuple[int, int | None]] = {}
        self._generation = -1

    def _resolve(self, ref: int | str, now: int) -> int | None:
        reg = self._registry
        if isinstance(ref, int):
            return ref if reg.live(ref) is not None else None
        fallback = None
        for v in reversed(reg.versions_of(ref)):
            r = reg.schemas[v.schema_id]
            if r.state == rules.SchemaState.Active:
                return v.schema_id
            if fallback is None and rules.usability(reg.validity(r), now)[0] is rules.Usability.WARN:
                fallback = v.schema_id
        return fallback

    def bind(self, ref: int | str, now: int) -> Binding:
        reg = self._registry
        if self._generation != reg.generation:
            self._cache.clear()
            self._generation = reg.generation
        hit = self._cache.get(ref)
        if hit is None or (hit[1] is not None and reg.live(hit[1]) is None):
            hit = self._cache[ref] = (reg.generation, self._resolve(ref, now))
        schema_id = hit[1]
        if schema_id is None:
            what = f"schema {ref}" if isinstance(ref, int) else f"no usable version of schema {ref!r}"
            return Binding(None, None, refused=f"{what} does not exist" if isinstance(ref, int) else f"there is {what}")
        r = reg.schemas[schema_id]
        use, why = rules.usability(reg.validity(r), now)
        if use is rules.Usability.REFUSED:
            return Binding(schema_id, None, refused=f"schema {schema_id}: {why}")
        warning = f"schema {schema_id}: {why}" if use is rules.Usability.WARN else None
        try:
            model = reg.model(schema_id)
        except MalformedSchema as e:  # stored text this version cannot read: refused, never a 5xx
            return Binding(schema_id, None, refused=f"schema {schema_id} cannot be read: {e}")
        return Binding(schema_id, model, warning=warning)
