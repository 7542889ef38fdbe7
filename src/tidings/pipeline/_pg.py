"""The hot log in PostgreSQL (:mod:`tidings.pipeline._hotlog`'s PostgreSQL backend).

Reads and trims the tables of ``tidings serve --store postgresql://...``
(``tidings.store._pg_migrations``) through the ADBC PostgreSQL driver, which hands
results over as Arrow (what the archive job writes), with ``$1, $2`` placeholders.

Every connection runs in autocommit: each statement is its own short transaction, so a
read never holds a snapshot that keeps vacuum from cleaning up behind the live server,
and each trimming batch commits alone. Readers also set
``default_transaction_read_only``, as SQLite readers set ``query_only``. Trimming takes
only row locks on rows the server no longer writes, so it never blocks appends; a batch
of :data:`~tidings.pipeline._hotlog.TRIM_BATCH` ids keeps each transaction (and the
dead rows vacuum must later visit at once) small.

Errors never show the address's password: messages carry the address without it, and
driver messages are scrubbed of it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

from ..core.addresses import CONNECT_TIMEOUT_ENV, connect_timeout_s, unreachable
from ._hotlog import TRIM_BATCH, Binds, HotLog, Session, Sizes, arrow_read_schema
from ._url import libpq_uri, scrub
from .errors import PipelineError

__all__ = ["PgLog", "PgSession"]

T = TypeVar("T")

TRIMMED_TABLES: Final = ("events", "deliveries")
"""The tables the pipeline deletes from: those vacuum looks after."""

_NAMESPACES: Final = (
    # A loose index scan: one seek on (namespace, id) per namespace, not a scan of the log.
    "WITH RECURSIVE t(ns) AS (SELECT MIN(namespace) FROM events UNION ALL "
    "SELECT (SELECT MIN(namespace) FROM events WHERE namespace > t.ns) FROM t WHERE t.ns IS NOT NULL) "
    "SELECT ns FROM t WHERE ns IS NOT NULL"
)
_ARROW_SELECT: Final = (
    "SELECT seq, id, prev_id, timestamp, source, convert_from(headers, 'UTF8') AS headers, "
    "convert_from(data, 'UTF8') AS data FROM events WHERE namespace = $1 AND id BETWEEN $2 AND $3 ORDER BY id"
)
_TRIM_EVENTS: Final = (
    # The rules of the store's own trim_events (tidings.store._pg_events).
    "WITH gone AS (DELETE FROM events e WHERE e.namespace = $1 AND e.id BETWEEN $2 AND $3 "
    "AND e.seq < (SELECT MAX(seq) FROM events) "
    "AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.seq = e.seq) "
    "AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.seq = e.seq) RETURNING 1) "
    "SELECT COUNT(*) FROM gone"
)
_TRIM_DELIVERIES: Final = (
    "WITH gone AS (DELETE FROM deliveries WHERE serial IN "
    "(SELECT serial FROM deliveries WHERE settled_at < $1 ORDER BY settled_at LIMIT $2) RETURNING 1) "
    "SELECT COUNT(*) FROM gone"
)
_SIZE: Final = "SELECT COALESCE(pg_total_relation_size(to_regclass($1)), 0)"


class PgLog(HotLog):
    """The hot log of a PostgreSQL store at a ``postgresql://`` (or ``postgres://``) address,
    the one ``tidings serve --store`` takes (``?search_path=...`` included)."""

    @contextlib.contextmanager
    def connect(self, *, write: bool = False) -> Iterator[PgSession]:
        try:
            import adbc_driver_postgresql.dbapi as adbc
        except ImportError:
            raise PipelineError(
                f"{self.shown} is a PostgreSQL store, and the ADBC PostgreSQL driver is not installed",
                code="driver_missing", hint="pip install 'tidings[spark]' (or adbc-driver-postgresql)",
            ) from None
        settings = {} if write else {"default_transaction_read_only": "on"}
        try:
            wait = connect_timeout_s(os.environ)
        except ValueError as e:
            raise PipelineError(str(e), code="invalid_option", hint=f"set {CONNECT_TIMEOUT_ENV} to seconds") from None
        conn, why = None, ""
        try:
            conn = adbc.connect(libpq_uri(self.location, settings, connect_timeout_s=wait), autocommit=True)
        except adbc.Error as e:
            why = self.explain(e)
        if conn is None:
            # Raised outside the handler: the driver's exception, which may hold the
            # address, is neither the cause nor the context of this one.
            raise PipelineError(unreachable("PostgreSQL", self.location, wait, why), code="store_unreachable")
        try:
            session = PgSession(conn, self)
            if not session.has_tables(["events"]):
                raise PipelineError(
                    f"no event store at {self.shown}: the database (or its search_path) has no events table",
                    code="store_not_found",
                    hint="give the address `tidings serve --store` uses, with its ?search_path= if it has one",
                )
            yield session
        finally:
            conn.close()

    def explain(self, e: BaseException) -> str:
        """A driver error as one line, without the password."""
        text = " ".join(str(e).split())  # libpq's messages span lines
        if "ERROR: " in text:  # the server's own words, without the driver's preamble
            text = text[text.index("ERROR: "):]
        return scrub(text.removeprefix("IO: ").removeprefix("[libpq] "), self.location)


class PgSession(Session):
    numbered = True

    def __init__(self, conn: Any, log: PgLog) -> None:
        self.conn = conn
        self.log = log

    def _guarded(self, sql: str, values: Sequence[Any], fetch: Callable[[Any], T]) -> T:
        """Run ``sql`` and ``fetch`` its result from the cursor; driver errors become ``store_error``."""
        import adbc_driver_postgresql.dbapi as adbc

        why = ""
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, tuple(values) if values else None)
                return fetch(cur)
        except adbc.Error as e:
            why = self.log.explain(e)
        # Outside the handler, as in PgLog.connect: no driver exception travels with ours.
        raise PipelineError(f"PostgreSQL at {self.log.shown} refused a statement: {why}", code="store_error")

    def _run(self, sql: str, values: Sequence[Any] = (), *, fetch: bool = True) -> list[tuple[Any, ...]]:
        """Run ``sql`` (this module's own statements pass their ``$n`` values directly)."""
        return self._guarded(sql, values, lambda cur: list(cur.fetchall()) if fetch else [])

    def rows(self, sql: str, binds: Binds | None = None) -> list[tuple[Any, ...]]:
        return self._run(sql, binds.values if binds else ())

    def _count(self, sql: str, *values: Any) -> int:
        found = self._run(sql, values)
        return int(found[0][0]) if found and found[0][0] is not None else 0

    def namespaces(self) -> list[str]:
        return [r[0] for r in self.rows(_NAMESPACES)]

    def read_arrow(self, namespace: str, lo: int, hi: int) -> Any:
        schema = arrow_read_schema()
        table = self._guarded(_ARROW_SELECT, (namespace, lo, hi), lambda cur: cur.fetch_arrow_table())
        # The driver tags each field with its PostgreSQL type; the archive wants plain fields.
        return schema.empty_table() if table.num_rows == 0 else table.cast(schema)

    def has_tables(self, names: Sequence[str]) -> bool:
        return self._count("SELECT COUNT(*) FROM unnest($1::text[]) t WHERE to_regclass(t) IS NULL", list(names)) == 0

    def has_columns(self, table: str, names: Sequence[str]) -> bool:
        return self._count(
            "SELECT COUNT(*) FROM unnest($2::text[]) c WHERE NOT EXISTS (SELECT 1 FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = $1 AND column_name = c)", table, list(names),
        ) == 0

    def trim_archived(self, namespace: str, upto: int) -> int:
        bounds = self.id_bounds(namespace)
        total = 0
        lo = upto + 1 if bounds is None else bounds[0]
        while lo <= upto:
            hi = min(upto, lo + TRIM_BATCH - 1)
            total += self._count(_TRIM_EVENTS, namespace, lo, hi)
            lo = hi + 1
        return total

    def trim_deliveries(self, before_ns: int) -> int:
        total = 0
        while True:
            done = self._count(_TRIM_DELIVERIES, before_ns, TRIM_BATCH)
            total += done
            if done < TRIM_BATCH:
                return total

    def _size(self, table: str) -> int:
        return self._count(_SIZE, table)

    def store_bytes(self) -> int:
        """The tables the pipeline trims, with their indexes and TOAST (``pg_total_relation_size``)."""
        return sum(self._size(t) for t in TRIMMED_TABLES)

    def reclaim(self) -> tuple[int, int]:
        """``VACUUM (ANALYZE)`` the events table: its dead rows become reusable space (the
        file seldom shrinks) and the planner learns the new row count. ``SKIP_LOCKED``: if
        autovacuum is on it already, that does the job and this does not wait."""
        before = self._size("events")
        self._run("VACUUM (ANALYZE, SKIP_LOCKED) events", fetch=False)
        return before, self._size("events")

    def vacuum(self) -> Sizes:
        """``VACUUM (ANALYZE)`` each table the pipeline trims. Plain VACUUM takes no lock the
        server's reads and writes wait on, and makes the space of deleted rows reusable; it
        returns to the operating system only empty pages at a table's end (``VACUUM FULL``
        would rewrite the table, locking it meanwhile: never run here)."""
        relations: dict[str, tuple[int, int]] = {}
        for table in TRIMMED_TABLES:
            before = self._size(table)
            self._run(f"VACUUM (ANALYZE) {table}", fetch=False)
            relations[table] = (before, self._size(table))
        return Sizes(sum(b for b, _ in relations.values()), sum(a for _, a in relations.values()), relations)

