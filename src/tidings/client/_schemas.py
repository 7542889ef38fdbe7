from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any

from msgspec import UNSET, structs

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
    SchemaRegistered,
    SchemaRegistration,
    SchemaResult,
    SchemaRetentionUpdate,
    SchemaStateUpdate,
    SchemaValidity,
    SchemaVersionInfo,
)
from ._errors import ItemError
from ._http import Connection

_RESULTS = list[SchemaResult]


def schema_result(result: SchemaResult) -> Any:
    """The ``Ok`` value of a schema item result, or :class:`ItemError` for ``Err``."""
    if result.Err is not UNSET:
        code = result.Err.code
        raise ItemError(code, structs.asdict(result.Err)[code])
    return result.Ok


def _text(model: str | dict[str, Any] | list[Any]) -> str:
    return model if isinstance(model, str) else json.dumps(model)


class Schemas:
    """The schema registry: register, read, govern (states, retention, limits: admins).

    A model is given as text, or as a dict/list that is sent as its JSON text.

    ::

        async with Schemas("http://127.0.0.1:8072", token) as reg:
            s = await reg.register({"type": "object", "required": ["amount"]}, name="pay.transfer")
            await pub.register_publication("pay", {"tidings:publication:schema": s.id})
    """

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self._conn = Connection(url, token, timeout=timeout)

    async def __aenter__(self) -> Schemas:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._conn.close()

    async def _batch(self, method: str, items: Sequence[Any]) -> list[Any]:
        return [schema_result(r) for r in await self._conn.call(method, list(items), _RESULTS)]

    # -- registration and reads ------------------------------------------------------------

    async def register(
        self,
        model: str | dict[str, Any] | list[Any],
        *,
        format: str = "JSON",
        name: str | None = None,
        replaces: int | None = None,
    ) -> SchemaRegistered:
        """Register one schema; an identical one already stored comes back with ``duplicate``."""
        reg = SchemaRegistration(model=_text(model), format=format, name=name, replaces=replaces)
        (r,) = await self._batch("register_schema", [reg])
        assert isinstance(r, SchemaRegistered)
        return r

    async def register_batch(self, regs: Sequence[SchemaRegistration]) -> list[SchemaResult]:
        """``register_schema`` as it is: one result per item, errors not raised."""
        return await self._conn.call("register_schema", list(regs), _RESULTS)

    async def get(self, schema_id: int) -> SchemaInfo | None:
        (info,) = await self._conn.call("get_schema", [schema_id], list[SchemaInfo | None])
        return info

    async def state(self, schema_id: int) -> SchemaValidity | None:
        (v,) = await self._conn.call("get_schema_state", [schema_id], list[SchemaValidity | None])
        return v

    async def list(
        self, *, prev: int | None = None, take: int | None = None, name: str | None = None, state: str | None = None
    ) -> builtins.list[SchemaInfo]:
        q = SchemaQuery(prev=prev, take=take, name=name, state=state)  # type: ignore[arg-type]
        return await self._conn.call("tidings_get_schemas", q, list[SchemaInfo])

    async def versions(self, name: str) -> builtins.list[SchemaVersionInfo]:
        (vs,) = await self._conn.call("tidings_get_schema_versions", [name], list[list[SchemaVersionInfo] | None])
        return vs or []

    async def replacements(self, schema_id: int) -> builtins.list[int]:
        (ids,) = await self._conn.call("tidings_get_schema_replacements", [schema_id], list[list[int] | None])
        return ids or []

    async def history(
        self, schema_id: int | None = None, *, prev: int | None = None, take: int | None = None
    ) -> builtins.list[SchemaChangeInfo]:
        q = SchemaHistoryQuery(schema_id=schema_id, prev=prev, take=take)
        return await self._conn.call("tidings_get_schema_history", q, list[SchemaChangeInfo])

    # -- evolution ---------------------------------------------------------------------

    async def compatibility(self, name: str) -> str:
        (mode,) = await self._conn.call("tidings_get_schema_compatibility", [name], list[str])
        return mode

    async def set_compatibility(self, name: str, mode: str | None) -> None:
        """Set a name's compatibility mode; ``None`` goes back to the registry default (admin)."""
        await self._batch("tidings_set_schema_compatibility", [CompatibilityConfig(name=name, compatibility=mode)])

    async def check_compatibility(
        self, name: str, model: str | dict[str, Any], *, format: str = "JSON"
    ) -> builtins.list[CompatibilityIssue]:
        """What would refuse ``model`` as the next version of ``name``; empty when it would pass."""
        check = SchemaCompatibilityCheck(name=name, model=_text(model), format=format)
        return await self._conn.call("tidings_check_schema_compatibility", check, list[CompatibilityIssue])

    # -- governance (admins) -------------------------------------------------------------

    async def deprecate(
        self, ids: Sequence[int], *, valid_to: int | None = None, valid_from: int | None = None
    ) -> None:
        """Deprecate schemas in bulk: accepted (with a warning) until ``valid_to`` (UTC ns)."""
        await self._batch("update_schema_state", [
            SchemaStateUpdate(id=i, state="Deprecated", valid_from=valid_from, valid_to=valid_to) for i in ids
        ])

    async def retract(self, ids: Sequence[int]) -> None:
        await self._batch("update_schema_state", [SchemaStateUpdate(id=i, state="Retracted") for i in ids])

    async def activate(self, ids: Sequence[int]) -> None:
        await self._batch("update_schema_state", [SchemaStateUpdate(id=i, state="Active") for i in ids])

    async def delete(self, ids: Sequence[int]) -> None:
        await self._batch("delete_schema", list(ids))

    async def set_retention(self, schema_id: int, seconds: int | None) -> None:
        """Keep events under the schema for ``seconds``; ``None`` keeps them for ever."""
        await self._batch("update_schema_retention", [SchemaRetentionUpdate(id=schema_id, retention_s=seconds)])

    async def retention(self, schema_id: int) -> SchemaPolicy | None:
        (p,) = await self._conn.call("get_retention_period", [schema_id], list[SchemaPolicy | None])
        return p

    async def limits(self) -> SchemaLimits:
        return await self._conn.call("tidings_get_schema_limits", None, SchemaLimits)

    async def update_limits(self, **changes: Any) -> SchemaLimits:
        """Change limits (``max_count``, ``min_size``, ``max_size``, ``open_registration``,
        ``registrars``, ``default_compatibility``); admin only."""
        return await self._conn.call("tidings_update_schema_limits", SchemaLimitsUpdate(**changes), SchemaLimits)

    async def apply_retention(self) -> RetentionRun:
        """Trim events past their schema's retention now (admin); the service also does it on a timer."""
        return await self._conn.call("tidings_apply_retention", None, RetentionRun)
