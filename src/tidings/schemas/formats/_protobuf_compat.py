"""Confluent's Protobuf compatibility rules, over two built file descriptors.

Fields are matched by number, messages by full name (a message found under another
parent with the same name has moved). From the writer's file to the reader's:

Compatible: adding or moving messages; adding, changing or removing enums and enum
values; adding, removing or renaming fields; ``string`` ↔ ``bytes`` and any change inside
one scalar group; adding or removing a oneof; moving a oneof field to the top level.

Incompatible (rule codes): ``package-changed``, ``message-removed``, ``field-kind-changed``
(scalar, message, map), ``field-scalar-kind-changed`` (another group), ``field-named-type-changed``
(another message type), ``field-numeric-label-changed`` (repeated ↔ single on a numeric field),
``required-field-added``, ``required-field-removed``, ``oneof-field-removed``,
``field-moved-to-oneof``. Scalar groups: {int32, int64, uint32, uint64, bool, enum},
{sint32, sint64}, {string, bytes}, {fixed32, sfixed32}, {fixed64, sfixed64}, {float}, {double}.
"""

from __future__ import annotations

from typing import Any

from ._model import Incompatibility

__all__ = ["diff"]

_T = {  # FieldDescriptor.TYPE_* numbers
    "double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6, "fixed32": 7, "bool": 8,
    "string": 9, "group": 10, "message": 11, "bytes": 12, "uint32": 13, "enum": 14, "sfixed32": 15,
    "sfixed64": 16, "sint32": 17, "sint64": 18,
}
_NAMES = {v: k for k, v in _T.items()}
_GROUPS = [{"int32", "int64", "uint32", "uint64", "bool", "enum"}, {"sint32", "sint64"}, {"string", "bytes"},
           {"fixed32", "sfixed32"}, {"fixed64", "sfixed64"}, {"float"}, {"double"}]
_LENGTH_DELIMITED = {"string", "bytes", "message"}


def _messages(file: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    stack = list(file.message_types_by_name.values())
    while stack:
        m = stack.pop()
        if not m.GetOptions().map_entry:
            out[m.full_name] = m
        stack.extend(m.nested_types)
    return out


def _kind(f: Any) -> str:
    if f.type == _T["message"] and f.message_type.GetOptions().map_entry:
        return "map"
    return "message" if f.type in (_T["message"], _T["group"]) else "scalar"


def _group(f: Any) -> int:
    name = _NAMES.get(f.type, "")
    return next((i for i, g in enumerate(_GROUPS) if name in g), -1)


def _oneof(f: Any) -> str | None:
    o = f.containing_oneof
    if o is None or (len(o.fields) == 1 and o.name == f"_{f.name}"):  # proto3 `optional`: a synthetic oneof
        return None
    return str(o.name)


def _fields(old_m: Any, new_m: Any, path: str) -> list[Incompatibility]:
    out: list[Incompatibility] = []

    def add(rule: str, where: str, message: str) -> None:
        out.append(Incompatibility(where, rule, message))

    old_f, new_f = old_m.fields_by_number, new_m.fields_by_number
    for number, f in old_f.items():
        where = f"{path}.{f.name}"
        g = new_f.get(number)
        if g is None:
            if f.is_required:
                add("required-field-removed", where, f"required field {f.name} (number {number}) was removed")
            if _oneof(f) is not None:
                add("oneof-field-removed", where, f"field {f.name} (number {number}) was removed from oneof "
                                                  f"{_oneof(f)}")
            continue
        kf, kg = _kind(f), _kind(g)
        if kf != kg:
            add("field-kind-changed", where, f"field number {number} changed from a {kf} to a {kg}")
        elif kf == "scalar" and _group(f) != _group(g):
            add("field-scalar-kind-changed", where,
                f"field number {number} changed from {_NAMES.get(f.type)} to {_NAMES.get(g.type)}")
        elif kf in ("message", "map") and f.message_type.name != g.message_type.name:
            add("field-named-type-changed", where, f"field number {number} changed from message "
                                                   f"{f.message_type.full_name} to {g.message_type.full_name}")
        if kf == kg == "scalar" and f.is_repeated != g.is_repeated and _NAMES.get(f.type) not in _LENGTH_DELIMITED:
            add("field-numeric-label-changed", where, f"numeric field number {number} changed between repeated "
                                                      "and single")
        if f.is_required != g.is_required:
            rule = "required-field-added" if g.is_required else "required-field-removed"
            add(rule, where, f"field number {number} {'became' if g.is_required else 'is no longer'} required")
        if _oneof(f) is None and _oneof(g) is not None and sum(_oneof(x) == _oneof(g) for x in new_m.fields) > 1:
            add("field-moved-to-oneof", where, f"field number {number} moved into oneof {_oneof(g)}, which has "
                                               "other fields")
    for number, g in new_f.items():
        if number not in old_f and g.is_required:
            add("required-field-added", f"{path}.{g.name}", f"required field {g.name} (number {number}) was added")
    return out


def diff(old: Any, new: Any) -> list[Incompatibility]:
    """Why data written with file ``old`` may not be read with file ``new``."""
    out: list[Incompatibility] = []
    if old.package != new.package:
        out.append(Incompatibility("$", "package-changed", f"the package changed from {old.package!r} to "
                                                           f"{new.package!r}"))
    old_ms, new_ms = _messages(old), _messages(new)
    by_name: dict[str, list[Any]] = {}
    for m in new_ms.values():
        by_name.setdefault(m.name, []).append(m)
    for full, m in old_ms.items():
        local = full.removeprefix(f"{old.package}.") if old.package else full
        match = new_ms.get(f"{new.package}.{local}" if new.package else local)
        if match is None and len(by_name.get(m.name, [])) == 1:
            match = by_name[m.name][0]  # moved under another parent
        if match is None:
            out.append(Incompatibility(local, "message-removed", f"message {local} was removed"))
            continue
        out += _fields(m, match, local)
    return out
