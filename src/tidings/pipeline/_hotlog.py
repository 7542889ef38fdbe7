"""The hot log as the pipeline sees it: one interface, one implementation per store.

The hot log is the store's ``events`` table (and the ``deliveries`` records the pipeline
trims), in the embedded SQLite file (:mod:`tidings.pipeline._sqlite`) or in PostgreSQL
(:mod:`tidings.pipeline._pg`); :func:`tidings.pipeline._backend.hot_log` picks one from
the location string. The tables have the same columns in both, so every query that both
dialects spell alike lives here, once; a backend adds what differs (how to list
namespaces fast, delete in batches, read straight into Arrow, give space back).

Lifecycle: a :class:`HotLog` holds only its location string, so it pickles to Spark
executors; each process opens its own :class:`Session` (a connection) with
:meth:`HotLog.connect` and closes it when done. Nothing holding a connection is pickled.

Parameters are never spliced into SQL: a statement is built with a :class:`Binds` from
its session, which writes each placeholder in the connection's style (``?`` for
SQLite, ``$1, $2, ...`` for PostgreSQL) and keeps the values in the same order.

Examples::

    log = hot_log("var")                      # or "postgresql://tidings@db/tidings"
    with log.connect() as s:
        for ns in s.namespaces():
            lo, hi = s.id_bounds(ns) or (1, 0)
            for rows in s.read_range(IdRange(ns, lo, hi), [("timestamp", ">=", t0)]):
                ...
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from ._url import redact

__all__ = [
    "EVENT_COLUMNS",
    "READ_BATCH",
    "TRIM_BATCH",
    "Binds",
    "Cond",
    "HotLog",
    "IdRange",
    "Session",
    "Sizes",
    "arrow_read_schema",
]

EVENT_COLUMNS: Final = "seq, namespace, id, prev_id, timestamp, source, headers, data"
READ_BATCH: Final = 10_000
TRIM_BATCH: Final = 5_000
"""Ids (or delivery records) deleted per write transaction when trimming: short enough
that the server's writers, which may wait on the same rows or lock, never wait long."""
SCHEMA_KEY: Final = "tidings:publication:schema"

Cond = tuple[str, str, int]
"""A pushed-down filter: ``(column, operator, integer)``, e.g. ``("seq", ">=", 100)``."""
_COND_COLUMNS: Final = frozenset({"seq", "id", "timestamp"})
_COND_OPS: Final = frozenset({"=", "<", "<=", ">", ">="})


class IdRange(msgspec.Struct, frozen=True, array_like=True):
    """Ids ``lo..hi`` (both inclusive) of one namespace."""

    namespace: str
    lo: int
    hi: int


class Binds:
    """The parameters of one statement: ``b(value)`` keeps ``value`` and returns its placeholder.

    Call it in the order the placeholders appear in the text (an f-string evaluates left
    to right): SQLite's ``?`` are positional.
    """

    def __init__(self, *, numbered: bool) -> None:
        self.values: list[Any] = []
        self._numbered = numbered

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}" if self._numbered else "?"

    def each(self, values: Sequence[Any]) -> str:
        """Placeholders for ``values``, comma-separated (for ``IN (...)``)."""
        return ", ".join(self(v) for v in values)

    def where(self, conds: Sequence[Cond]) -> str:
        """``AND`` clauses for ``conds``; columns and operators are checked against a short list."""
        out = []
        for col, op, value in conds:
            if col not in _COND_COLUMNS or op not in _COND_OPS:
                raise ValueError(f"not a pushed-down filter: {col} {op}")
            out.append(f" AND {col} {op} {self(int(value))}")
        return "".join(out)


@dataclass(frozen=True, slots=True)
class Sizes:
    """Bytes of the store before and after a vacuum, and per relation where the store has them."""

    before: int
    after: int
    relations: dict[str, tuple[int, int]] = field(default_factory=dict)


class Session(abc.ABC):
    """One open connection to the hot log (made by :meth:`HotLog.connect`; never pickled).

    The methods with a body are written once in SQL both stores speak; a backend
    implements the abstract ones.
    """

    numbered: bool = False
    """Placeholders ``$1, $2`` (PostgreSQL) rather than ``?`` (SQLite)."""

    def binds(self) -> Binds:
        """A new parameter list in this connection's placeholder style."""
        return Binds(numbered=self.numbered)

    @abc.abstractmethod
    def rows(self, sql: str, binds: Binds | None = None) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows (``headers`` and ``data`` as bytes)."""

    def one(self, sql: str, binds: Binds | None = None) -> tuple[Any, ...] | None:
        found = self.rows(sql, binds)
        return found[0] if found else None

    # -- reading -----------------------------------------------------------------------

    @abc.abstractmethod
    def namespaces(self) -> list[str]:
        """Every namespace that has events in the hot log, sorted (bytewise, as both stores collate)."""

    def id_bounds(self, namespace: str) -> tuple[int, int] | None:
        """The lowest and highest id of ``namespace`` in the hot log, or None if it has none."""
        b = self.binds()
        row = self.one(f"SELECT MIN(id), MAX(id) FROM events WHERE namespace = {b(namespace)}", b)
        return None if row is None or row[0] is None else (int(row[0]), int(row[1]))

    def read_range(self, r: IdRange, conds: Sequence[Cond] = (), batch: int = READ_BATCH,
                   ) -> Iterator[list[tuple[Any, ...]]]:
        """Rows (:data:`EVENT_COLUMNS`) of ``r`` in id order that pass ``conds``, ``batch`` at a time.

        Keyset paging keeps each query short, so no read pins a snapshot (SQLite's WAL,
        PostgreSQL's vacuum horizon) for long.
        """
        after = r.lo - 1
        while after < r.hi:
            b = self.binds()
            rows = self.rows(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE namespace = {b(r.namespace)} AND id > {b(after)} "
                f"AND id <= {b(r.hi)}{b.where(conds)} ORDER BY id LIMIT {b(batch)}",
                b,
            )
            if not rows:
                return
            yield rows
            after = rows[-1][2]

    @abc.abstractmethod
    def read_arrow(self, namespace: str, lo: int, hi: int) -> Any:
        """The events of ``namespace`` with ``lo <= id <= hi`` in id order, as a ``pyarrow.Table``
        of :func:`arrow_read_schema` (``headers`` and ``data`` as text)."""

    def count_range(self, namespace: str, lo: int, hi: int) -> int:
        b = self.binds()
        row = self.one(f"SELECT COUNT(*) FROM events WHERE namespace = {b(namespace)} "
                       f"AND id BETWEEN {b(lo)} AND {b(hi)}", b)
        return int(row[0]) if row else 0

    def archivable_upto(self, namespace: str, after: int, before_ns: int) -> int:
        """The highest id ``X`` such that every event of ``namespace`` in ``(after, X]`` is older than ``before_ns``.

        Archiving moves a prefix of the chain, so a late timestamp never lets an earlier
        event slip through: the first young event stops the prefix. Returns ``after`` when
        there is nothing to move.
        """
        b = self.binds()
        young = self.one(f"SELECT MIN(id) FROM events WHERE namespace = {b(namespace)} AND id > {b(after)} "
                         f"AND timestamp >= {b(before_ns)}", b)
        if young is not None and young[0] is not None:
            return max(after, int(young[0]) - 1)
        bounds = self.id_bounds(namespace)
        return after if bounds is None else max(after, bounds[1])

    def retention_of(self, namespace: str) -> int | None:
        """Seconds the events of ``namespace`` are kept, from its publication's schema; None: for ever.

        The publication config's ``tidings:publication:schema`` is a schema id (Nat) or a
        name (Text, meaning its latest Active version), as ``tidings.schemas.binding``
        resolves it; deleted schemas and versions do not count.
        """
        b = self.binds()
        row = self.one(f"SELECT config FROM publications WHERE namespace = {b(namespace)}", b)
        if row is None:
            return None
        ref = None
        for pair in msgspec.json.decode(row[0]):  # text in SQLite, bytea in PostgreSQL
            if isinstance(pair, list) and len(pair) == 2 and pair[0] == SCHEMA_KEY and isinstance(pair[1], dict):
                ref = pair[1].get("Nat", pair[1].get("Text"))
        b = self.binds()
        if isinstance(ref, int):
            found = self.one(f"SELECT retention_s FROM schemas WHERE id = {b(ref)} AND deleted_at IS NULL", b)
        elif isinstance(ref, str):
            found = self.one(
                "SELECT s.retention_s FROM schema_versions v JOIN schemas s ON s.id = v.schema_id "
                f"WHERE v.name = {b(ref)} AND v.deleted_at IS NULL AND s.deleted_at IS NULL "
                "AND s.state = 'Active' ORDER BY v.version DESC LIMIT 1",
                b,
            )
        else:
            return None
        return int(found[0]) if found is not None and found[0] else None

    @abc.abstractmethod
    def has_tables(self, names: Sequence[str]) -> bool:
        """Whether every table of ``names`` exists (a store written by an older tidings may lack some)."""

    @abc.abstractmethod
    def has_columns(self, table: str, names: Sequence[str]) -> bool:
        """Whether ``table`` has every column of ``names`` (a store written by an older tidings may lack some)."""

    # -- trimming and space (write sessions) ----------------------------------------------

    @abc.abstractmethod
    def trim_archived(self, namespace: str, upto: int) -> int:
        """Delete the archived events ``id <= upto`` of ``namespace``; the number deleted.

        The store's trimming rules apply (``Store.trim_events``): rows still referenced by
        a notification or a dead letter stay, and so does the log's last row. Deletes
        windows of :data:`TRIM_BATCH` ids, each its own transaction; stopping half way is
        harmless, the next run finishes the job.
        """

    @abc.abstractmethod
    def trim_deliveries(self, before_ns: int) -> int:
        """Delete the delivery records settled before ``before_ns``, oldest first, in
        transactions of :data:`TRIM_BATCH` rows; the number deleted."""

    @abc.abstractmethod
    def store_bytes(self) -> int:
        """The size of what the pipeline reads and trims, in bytes."""

    @abc.abstractmethod
    def reclaim(self) -> tuple[int, int] | None:
        """After trimming: make the freed space usable again without blocking the server;
        ``(bytes before, after)``, or None when this store cannot (and says why)."""

    @abc.abstractmethod
    def vacuum(self) -> Sizes:
        """``tidings archive vacuum``: the store's thorough space maintenance."""


class HotLog(abc.ABC):
    """Where a hot log is. Holds the location string only: safe to pickle to executors."""

    def __init__(self, location: str) -> None:
        self.location = location

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown!r})"

    @property
    def shown(self) -> str:
        """The location fit to print (a URL without its password)."""
        return redact(self.location)

    @abc.abstractmethod
    def connect(self, *, write: bool = False) -> contextlib.AbstractContextManager[Session]:
        """A new connection, read-only unless ``write``; closed on exit. Raises
        :class:`~tidings.pipeline.errors.PipelineError` (``store_not_found``,
        ``store_unreachable``, ``driver_missing``) when there is no hot log to open."""

    def check(self) -> None:
        """Raise the error :meth:`connect` would, now (before Spark takes seconds to start)."""
        with self.connect():
            pass


def arrow_read_schema() -> Any:
    """The ``pyarrow.Schema`` of :meth:`Session.read_arrow` (pyarrow imported on use: the
    interchain adapter reads the log without it)."""
    import pyarrow as pa

    return pa.schema(
        [("seq", pa.int64()), ("id", pa.int64()), ("prev_id", pa.int64()), ("timestamp", pa.int64()),
         ("source", pa.string()), ("headers", pa.string()), ("data", pa.string())]
    )
