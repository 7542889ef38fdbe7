"""Rows of a DataFrame written to ``format("tidings")`` as the events they publish.

Pure: no I/O, no Spark. The driver plans a :class:`RowShape` from the DataFrame's
schema (:func:`shape_of`); each executor turns its rows into ``(row, Event)`` pairs
with :func:`to_event`, or into a refusal when a row cannot be an event at all.

Two layouts, chosen by whether the DataFrame has a ``data`` column:

* **wire**: ``data`` is the ICRC-16 wire JSON text, as the reader produces it, so a
  DataFrame read from ``format("tidings")`` writes back as is. Its other columns (``seq``,
  ``id``, ``timestamp``, ``source``, ``data_json``...) are ignored: the broker assigns
  them anew.
* **plain**: every column but ``namespace`` and ``headers`` is a field of the event's
  data, a ``Map`` of the plain values converted as the SDK converts them
  (:func:`tidings.core.values.from_python`: long → Nat or Int, double → Float, string
  → Text, binary → Blob, array → Array, struct and map → Map, null → Option null).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec

from ..core.long_ints import long_integer, long_message
from ..core.undecodable import UNDECODABLE
from ..core.values import InvalidValue, check, from_python
from ..core.wire import Event

__all__ = ["BROKER_HEADER_PREFIXES", "RowRefused", "RowShape", "shape_of", "to_event"]

BROKER_HEADER_PREFIXES: Final = ("icrc72:broadcaster:", "icrc72:relay:", "icrc72:eventData:", "icrc77:replay:")
"""Headers only the broadcaster sets (the broker refuses them from a publisher, see
``tidings.broker.publish``). A round trip drops them; the new event gets fresh ones."""

PLAIN_TYPES: Final = frozenset(
    {"boolean", "byte", "short", "integer", "long", "float", "double", "string", "binary", "void"}
)
"""Spark types a plain column (or a field nested in one) may have; arrays, maps and structs of them too."""

_decode = msgspec.json.decode


class RowRefused(Exception):
    """A row that cannot be published: ``code`` and a message naming what is wrong."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class RowShape:
    """What the columns of the written DataFrame mean; plain values, pickled to executors."""

    namespace_column: bool
    default_namespace: str | None
    wire: bool
    """True: the ``data`` column holds wire JSON; False: ``fields`` make a Map."""
    fields: tuple[str, ...]
    headers_column: bool

    @property
    def columns(self) -> list[str]:
        """The columns an event is made of; the others need not even be converted."""
        own = ["data"] if self.wire else list(self.fields)
        return own + ["namespace"] * self.namespace_column + ["headers"] * self.headers_column


def shape_of(schema: Any, default_namespace: str | None) -> RowShape:
    """Plan how rows of ``schema`` (a Spark ``StructType``) become events.

    Raises ``ValueError`` naming the column when the schema cannot be written."""
    types = {f.name: f.dataType for f in schema.fields}
    if "namespace" in types:
        _require_string(types, "namespace")
    elif default_namespace is None:
        raise ValueError("the rows have no 'namespace' column: add one or give option('namespace', ...)")
    if "headers" in types:
        _require_string(types, "headers")
    if "data" in types:
        _require_string(types, "data")
        return RowShape("namespace" in types, default_namespace, True, (), "headers" in types)
    fields = tuple(n for n in types if n not in ("namespace", "headers"))
    if not fields:
        raise ValueError("the rows have no data: give a 'data' column (ICRC-16 wire JSON) or columns of values")
    for name in fields:
        bad = _unsupported(types[name])
        if bad is not None:
            raise ValueError(
                f"column {name!r} has type {bad}, which has no ICRC-16 counterpart: cast it "
                "(a timestamp to a long or a string, a decimal to a string or a double)"
            )
    return RowShape("namespace" in types, default_namespace, False, fields, "headers" in types)


def _require_string(types: dict[str, Any], name: str) -> None:
    if types[name].typeName() != "string":
        raise ValueError(f"column {name!r} must be a string, not {types[name].simpleString()}")


def _unsupported(t: Any) -> str | None:
    kind = t.typeName()
    if kind == "array":
        return _unsupported(t.elementType)
    if kind == "map":
        return _unsupported(t.keyType) or _unsupported(t.valueType)
    if kind == "struct":
        return next((bad for f in t.fields if (bad := _unsupported(f.dataType)) is not None), None)
    return None if kind in PLAIN_TYPES else str(t.simpleString())


def to_event(row: dict[str, Any], shape: RowShape) -> Event:
    """The event ``row`` publishes; raises :class:`RowRefused` when it cannot be one."""
    namespace = row.get("namespace") if shape.namespace_column else None
    if namespace is None:
        namespace = shape.default_namespace
    if namespace is None:
        raise RowRefused("MissingNamespace", "the row's namespace is null and no option('namespace') was given")
    if shape.wire:
        data = _wire_data(row.get("data"))
    else:
        try:
            data = from_python({name: row[name] for name in shape.fields}).to_wire()
        except InvalidValue as e:
            raise RowRefused("InvalidValue", f"the row's values: {e}") from None
    headers = _headers(row.get("headers")) if shape.headers_column else None
    return Event(namespace=namespace, data=data, headers=headers or None)


def _wire_data(text: Any) -> Any:
    if text is None:
        raise RowRefused("InvalidValue", "the row's data is null")
    try:
        data = _decode(text)
        check(data, "$.data")
    except UNDECODABLE as e:
        _refuse_long(text, "$.data", e)
        raise RowRefused("InvalidValue", f"the row's data is not JSON: {e}") from None
    except InvalidValue as e:
        raise RowRefused("InvalidValue", f"the row's data is not ICRC-16 wire JSON: {e}") from None
    return data


def _refuse_long(text: Any, column: str, error: BaseException) -> None:
    """Refuse, as out of range, a JSON text that failed to decode for an integer longer
    than tidings reads (well-formed, so not "not JSON")."""
    long = long_integer(text, error) if isinstance(text, (str, bytes)) else None
    if long is not None:
        where, digits = long
        raise RowRefused("OutOfRange", long_message(column + where[1:], digits)) from None


def _headers(text: Any) -> list[tuple[str, Any]]:
    if text is None:
        return []
    try:
        pairs = _decode(text, type=list[tuple[str, Any]])
        for key, value in pairs:
            check(value, f"$.headers.{key}")
    except UNDECODABLE as e:
        _refuse_long(text, "$.headers", e)
        raise RowRefused("InvalidValue", f"the row's headers are not JSON Map pairs [[key, value], ...]: {e}") from None
    except InvalidValue as e:
        raise RowRefused("InvalidValue", f"the row's headers: {e}") from None
    return [(k, v) for k, v in pairs if not k.startswith(BROKER_HEADER_PREFIXES)]
