"""A ``FileDescriptorProto`` written back as ``.proto`` text (what Confluent answers for a
schema registered as a base64 descriptor). Parsing the text gives the same descriptor."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2

__all__ = ["render_proto"]

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    _FDP.TYPE_DOUBLE: "double", _FDP.TYPE_FLOAT: "float", _FDP.TYPE_INT64: "int64", _FDP.TYPE_UINT64: "uint64",
    _FDP.TYPE_INT32: "int32", _FDP.TYPE_FIXED64: "fixed64", _FDP.TYPE_FIXED32: "fixed32", _FDP.TYPE_BOOL: "bool",
    _FDP.TYPE_STRING: "string", _FDP.TYPE_BYTES: "bytes", _FDP.TYPE_UINT32: "uint32",
    _FDP.TYPE_SFIXED32: "sfixed32", _FDP.TYPE_SFIXED64: "sfixed64", _FDP.TYPE_SINT32: "sint32",
    _FDP.TYPE_SINT64: "sint64",
}


def _type(f: Any) -> str:
    return _SCALARS.get(f.type) or f.type_name


class _Writer:
    def __init__(self, proto3: bool) -> None:
        self.proto3 = proto3
        self.lines: list[str] = []

    def line(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def field(self, f: Any, depth: int, maps: dict[str, Any], in_oneof: bool) -> None:
        entry = maps.get(f.type_name.rsplit(".", 1)[-1]) if f.label == _FDP.LABEL_REPEATED else None
        options = [f'json_name = "{f.json_name}"'] if f.HasField("json_name") else []
        if f.HasField("default_value"):
            value = f.default_value if f.type not in (_FDP.TYPE_STRING, _FDP.TYPE_BYTES) else f'"{f.default_value}"'
            options.append(f"default = {value}")
        if f.options.HasField("packed"):
            options.append(f"packed = {str(f.options.packed).lower()}")
        tail = f" [{', '.join(options)}]" if options else ""
        if entry is not None:
            key, value = entry.field[0], entry.field[1]
            self.line(depth, f"map<{_type(key)}, {_type(value)}> {f.name} = {f.number}{tail};")
            return
        label = ""
        if f.label == _FDP.LABEL_REPEATED:
            label = "repeated "
        elif f.label == _FDP.LABEL_REQUIRED:
            label = "required "
        elif not in_oneof and (f.proto3_optional or not self.proto3):
            label = "optional "
        self.line(depth, f"{label}{_type(f)} {f.name} = {f.number}{tail};")

    def enum(self, e: Any, depth: int) -> None:
        self.line(depth, f"enum {e.name} {{")
        if e.options.allow_alias:
            self.line(depth + 1, "option allow_alias = true;")
        for v in e.value:
            self.line(depth + 1, f"{v.name} = {v.number};")
        self.line(depth, "}")

    def message(self, m: Any, depth: int) -> None:
        self.line(depth, f"message {m.name} {{")
        maps = {n.name: n for n in m.nested_type if n.options.map_entry}
        synthetic = {f.oneof_index for f in m.field if f.HasField("oneof_index") and f.proto3_optional}
        done: set[int] = set()
        for f in m.field:
            if f.HasField("oneof_index") and f.oneof_index not in synthetic:
                if f.oneof_index in done:
                    continue
                done.add(f.oneof_index)
                self.line(depth + 1, f"oneof {m.oneof_decl[f.oneof_index].name} {{")
                for g in m.field:
                    if g.HasField("oneof_index") and g.oneof_index == f.oneof_index:
                        self.field(g, depth + 2, maps, True)
                self.line(depth + 1, "}")
            else:
                self.field(f, depth + 1, maps, False)
        for n in m.nested_type:
            if not n.options.map_entry:
                self.message(n, depth + 1)
        for e in m.enum_type:
            self.enum(e, depth + 1)
        if m.reserved_name:
            self.line(depth + 1, f"reserved {', '.join(repr(n).replace(chr(39), chr(34)) for n in m.reserved_name)};")
        self.line(depth, "}")


def render_proto(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    """``fdp`` as ``.proto`` text (messages, enums, fields, maps, oneofs; services are left out)."""
    syntax = fdp.syntax or "proto2"
    w = _Writer(syntax == "proto3")
    w.line(0, f'syntax = "{syntax}";')
    if fdp.package:
        w.line(0, f"package {fdp.package};")
    public = set(fdp.public_dependency)
    for i, dep in enumerate(fdp.dependency):
        w.line(0, f'import {"public " if i in public else ""}"{dep}";')
    for m in fdp.message_type:
        w.line(0, "")
        w.message(m, 0)
    for e in fdp.enum_type:
        w.line(0, "")
        w.enum(e, 0)
    return "\n".join(w.lines) + "\n"
