"""The schema registry's HTTP methods (MRC names; tidings' additions prefixed ``tidings_``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from ..broker import Broker
from ..core.config import PublicationConfig
from ..core.wire_schemas import (
    CompatibilityConfig,
    CompatibilityIssue,
    RetentionRun,
    SchemaChangeInfo,
    SchemaCompatibilityCheck,
    SchemaHistoryQuery,
    SchemaInfo,
    SchemaLimits,
    SchemaLimitsUpdate,
    SchemaPolicy,
    SchemaQuery,
    SchemaRegistration,
    SchemaResult,
    SchemaRetentionUpdate,
    SchemaStateUpdate,
    SchemaValidity,
    SchemaVersionInfo,
    schema_err,
)
from ..errors import Forbidden
from ..store import PrincipalRecord
from ._method import Method

__all__ = ["SCHEMA_METHODS"]

_RESULTS = list[SchemaResult]


def _batch(fn: Callable[[Broker, PrincipalRecord, Any], Awaitable[list[SchemaResult]]]) -> Any:
    async def call(b: Broker, c: PrincipalRecord, a: list[Any]) -> list[SchemaResult]:
        limit = b.settings.max_batch_items
        if len(a) > limit:
            return [schema_err("GenericBatchError", f"a batch holds at most {limit} items")] * len(a)
        return await fn(b, c, a)

    return call


def _take(b: Broker, take: int | None) -> int:
    return b.settings.max_batch_items if take is None else max(0, min(take, b.settings.max_batch_items))


async def _delete(b: Broker, c: PrincipalRecord, ids: list[int]) -> list[SchemaResult]:
    """``delete_schema``, refusing item by item what would leave a publication without its
    schema (every event it publishes would then be refused): the same rule as the
    Confluent face's 40960, which has ``force``; here the publication is rebound first."""
    if not c.admin:
        raise Forbidden("only an admin deletes schemas")
    gone = set(ids)
    results: list[SchemaResult | None] = [None] * len(ids)
    # The publications as stored, not as this broadcaster last heard of them: one bound
    # through another broadcaster a moment ago counts.
    configs = {p.namespace: PublicationConfig.read(p.config) for p in await b.store.list_publications()}
    for i, sid in enumerate(ids):
        bound = _binders(b, configs, sid, gone)
        if bound:
            results[i] = schema_err("InvalidState", (
                f"publication(s) {', '.join(map(repr, bound))} bind schema {sid}: deleting it would refuse "
                "every event they publish; rebind or unbind them first (icrc72_update_publication)"))
    rest = [(i, sid) for i, sid in enumerate(ids) if results[i] is None]
    for (i, _), r in zip(rest, await b.schemas.delete(c, [sid for _, sid in rest]), strict=True):
        results[i] = r
    return [r for r in results if r is not None]


def _binders(b: Broker, configs: dict[str, PublicationConfig], sid: int, gone: set[int]) -> list[str]:
    """The publications that bind schema ``sid`` by id, or by a name whose every live
    version is among those deleted."""
    out = []
    for ns, conf in configs.items():
        ref = conf.schema
        if ref == sid and not isinstance(ref, bool):
            out.append(ns)
        elif isinstance(ref, str):
            live = [v.schema_id for v in b.schemas.versions_of(ref)]
            if sid in live and all(x in gone for x in live):
                out.append(ns)
    return sorted(out)


async def _history(b: Broker, c: PrincipalRecord, q: SchemaHistoryQuery) -> list[SchemaChangeInfo]:
    return await b.schemas.history(q.schema_id, q.prev, _take(b, q.take))


async def _check(b: Broker, c: PrincipalRecord, a: SchemaCompatibilityCheck) -> list[CompatibilityIssue]:
    return b.schemas.test_compatibility(a.name, a.format, a.model)


async def _apply_retention(b: Broker, c: PrincipalRecord, a: None) -> RetentionRun:
    if not c.admin:
        raise Forbidden("only an admin runs retention on demand")
    return await b.retention.apply()


async def _limits(b: Broker, c: PrincipalRecord, a: None) -> SchemaLimits:
    return b.schemas.limits_info()


SCHEMA_METHODS: list[Method] = [
    Method(
        "register_schema", list[SchemaRegistration], _RESULTS,
        _batch(lambda b, c, a: b.schemas.register(c, a)),
        "Register schemas (JSON Schema, Avro or Protobuf); Ok is the id, or the existing id of an identical schema.",
    ),
    Method(
        "get_schema", list[int], list[SchemaInfo | None],
        lambda b, c, a: _async(b.schemas.get(a)),
        "Schemas by id: model, format, names and versions, state, retention, what it replaces.",
    ),
    Method(
        "get_schema_state", list[int], list[SchemaValidity | None],
        lambda b, c, a: _async(b.schemas.get_state(a)),
        "The state of schemas and the window in which a Deprecated one stays valid.",
    ),
    Method(
        "update_schema_state", list[SchemaStateUpdate], _RESULTS,
        _batch(lambda b, c, a: b.schemas.update_state(c, a)),
        "Deprecate (with a validity window), retract or reactivate schemas, in bulk (admin only).",
    ),
    Method(
        "delete_schema", list[int], _RESULTS,
        _batch(lambda b, c, a: _delete(b, c, a)),
        "Delete schemas, in bulk (admin only); their ids are never reused. A schema a publication "
        "binds (by id, or as the last version of the name it binds) is refused: rebind it first.",
    ),
    Method(
        "update_schema_retention", list[SchemaRetentionUpdate], _RESULTS,
        _batch(lambda b, c, a: b.schemas.update_retention(c, a)),
        "Set how long events under schemas are kept, in seconds (admin only).",
    ),
    Method(
        "get_retention_period", list[int], list[SchemaPolicy | None],
        lambda b, c, a: _async(b.schemas.get_retention(a)),
        "Retention and starting position (what the store has trimmed up to) of schemas.",
    ),
    Method(
        "tidings_get_schemas", SchemaQuery, list[SchemaInfo],
        lambda b, c, a: _async(b.schemas.query(a, _take(b, a.take))),
        "Schemas by id, paged with prev/take, optionally of one name or state.", SchemaQuery(),
    ),
    Method(
        "tidings_get_schema_versions", list[str], list[list[SchemaVersionInfo] | None],
        lambda b, c, a: _async(b.schemas.get_versions(a)),
        "The versions of schema names, oldest first.",
    ),
    Method(
        "tidings_get_schema_replacements", list[int], list[list[int] | None],
        lambda b, c, a: _async(b.schemas.get_replacements(a)),
        "The schemas that name each of these as the one they replace.",
    ),
    Method(
        "tidings_get_schema_history", SchemaHistoryQuery, list[SchemaChangeInfo],
        _history, "Every change to the registry: who, when, what.", SchemaHistoryQuery(),
    ),
    Method(
        "tidings_get_schema_limits", None, SchemaLimits, _limits,
        "The registry's limits and default compatibility mode, and how many schemas exist.", None,
    ),
    Method(
        "tidings_update_schema_limits", SchemaLimitsUpdate, SchemaLimits,
        lambda b, c, a: b.schemas.update_limits(c, a),
        "Change the registry's limits or default compatibility mode (admin only).",
    ),
    Method(
        "tidings_set_schema_compatibility", list[CompatibilityConfig], _RESULTS,
        _batch(lambda b, c, a: b.schemas.set_compatibility(c, a)),
        "Set (or with null remove) a name's compatibility mode (admin only).",
    ),
    Method(
        "tidings_get_schema_compatibility", list[str], list[str],
        lambda b, c, a: _async([b.schemas.compatibility(n) for n in a]),
        "The compatibility mode in force for each name.",
    ),
    Method(
        "tidings_check_schema_compatibility", SchemaCompatibilityCheck, list[CompatibilityIssue],
        _check, "What would make a model incompatible as the next version of a name; nothing is stored.",
    ),
    Method(
        "tidings_apply_retention", None, RetentionRun, _apply_retention,
        "Trim events past their schema's retention now (admin only; also runs on a timer).", None,
    ),
]


async def _async(value: Any) -> Any:
    return value


def _fresh(handler: Any) -> Any:
    async def call(b: Broker, c: PrincipalRecord, a: Any) -> Any:
        # Another broadcaster may have changed the registry: read or decide on it as stored.
        await b.schemas.refresh()
        return await handler(b, c, a)

    return call


SCHEMA_METHODS[:] = [replace(m, handler=_fresh(m.handler)) for m in SCHEMA_METHODS]

