"""What the store keeps for the schema registry, and the part of the interface for it.

The registry holds every schema in memory (there are at most tens of thousands) and
writes through to the store; the store assigns schema ids, which are never reused,
even after a deletion (SQLite ``AUTOINCREMENT``; a counter in memory).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import StoreError

__all__ = ["SchemaChange", "SchemaConflict", "SchemaRecord", "SchemaSnapshot", "SchemaStore", "SchemaVersion"]


class SchemaConflict(StoreError):
    """A schema write given ``expect_seq`` found the registry changed since (another
    broadcaster wrote meanwhile): nothing was written; read again and decide again."""


@dataclass(slots=True, kw_only=True)
class SchemaRecord:
    id: int = 0
    """Assigned by :meth:`SchemaStore.create_schema`."""
    format: str
    model: str
    canonical: str
    replaces: int | None = None
    created_at: int = 0
    created_by: str = ""
    state: str = "Active"
    valid_from: int | None = None
    valid_to: int | None = None
    retention_s: int | None = None
    starting_at: int = 0
    deleted_at: int | None = None
    references: list[list[Any]] = field(default_factory=list)
    """Schema references, ``[name, subject, version]`` each (Confluent's ``references``):
    other schemas this one is read with, by the name its text uses for them."""


@dataclass(slots=True, kw_only=True)
class SchemaVersion:
    name: str
    version: int
    schema_id: int
    created_at: int = 0
    deleted_at: int | None = None
    """Set when the version is gone for good (a permanent delete); its number stays taken."""
    soft_deleted_at: int | None = None
    """Set by a soft delete: hidden from listings and checks, still readable by asking for
    deleted versions, and the schema behind it keeps its id."""


@dataclass(slots=True, kw_only=True)
class SchemaChange:
    """One entry of the registry's audit log: who did what, when."""

    schema_id: int | None
    at: int
    by: str
    action: str
    detail: str = ""
    seq: int = 0
    """Assigned by the store."""


@dataclass(slots=True, kw_only=True)
class SchemaSnapshot:
    schemas: list[SchemaRecord] = field(default_factory=list)
    versions: list[SchemaVersion] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    """Registry settings by key (limits, per-name compatibility), JSON values."""
    seq: int = 0
    """The ``seq`` of the last change in the snapshot (``SchemaStore.schema_seq`` then)."""


class SchemaStore(ABC):
    """Every write appends to the audit log, and the writes are serialised by it: the
    log's last ``seq`` is the registry's version. A write given ``expect_seq`` is a
    compare-and-set on that version (``SchemaConflict`` when another write came first),
    and each written change is given its ``seq``. So broadcasters sharing a store each
    keep the registry in memory, know from one cheap read whether it is current, and
    never write from a stale copy (docs/scaling.md, "Shared state")."""

    @abstractmethod
    async def load_schemas(self) -> SchemaSnapshot:
        """Everything the registry keeps, deleted schemas included (their ids stay taken),
        read at one moment, with the ``seq`` of that moment."""

    @abstractmethod
    async def schema_seq(self) -> int:
        """The ``seq`` of the registry's last change (0 when none)."""

    @abstractmethod
    async def create_schema(
        self, record: SchemaRecord, versions: Sequence[SchemaVersion], change: SchemaChange,
        *, expect_seq: int | None = None,
    ) -> SchemaRecord:
        """Store a new schema under a fresh id (or under ``record.id`` when it is set, which
        the registry does only for an id never used before), with its versions (whose ``schema_id`` is
        filled in) and the audit entry, in one transaction; returns the record with its id."""

    @abstractmethod
    async def save_schema(
        self,
        record: SchemaRecord | None,
        versions: Sequence[SchemaVersion],
        changes: Sequence[SchemaChange],
        *, expect_seq: int | None = None,
    ) -> None:
        """Update an existing schema and insert or update versions, atomically."""

    @abstractmethod
    async def put_schema_setting(
        self, key: str, value: Any, change: SchemaChange, *, expect_seq: int | None = None
    ) -> None:
        """Set (or with ``value`` None remove) a registry setting, with its audit entry."""

    @abstractmethod
    async def schema_changes(
        self, schema_id: int | None, after: int = 0, limit: int | None = None
    ) -> list[SchemaChange]:
        """Audit entries by ``seq``, of one schema or (``schema_id`` None) of all."""
