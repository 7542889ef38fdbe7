"""Protobuf models: ``.proto`` text (or Confluent's base64 ``FileDescriptorProto``) to descriptors.

Text is parsed by ``proto-schema-parser`` (a pure Python ANTLR grammar) and turned into a
``FileDescriptorProto``; Confluent's clients send the serialized descriptor in base64
instead, which is read as it is. Either way the descriptor is then built in a private
``DescriptorPool`` together with its imports (the well-known ``google/protobuf/*.proto``
files are built in, others come from schema references): that is what refuses undefined
types, duplicate field numbers or names and other errors the grammar lets through.

``canonical`` is the built descriptor (names fully qualified, comments and layout gone)
as sorted JSON, so two texts that define the same messages are duplicates. An event is
validated against the file's first message (Confluent's default message index ``[0]``),
by the rules of protobuf's JSON mapping (``_protobuf_validate``).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from google.protobuf import (  # the well-known types every file may import
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.message import DecodeError
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from . import _protobuf_compat
from ._icrc16 import to_json_instance
from ._model import Incompatibility, MalformedSchema, Model, SchemaFormat, Violation
from ._paths import instance_path
from ._protobuf_text import render_proto
from ._protobuf_validate import compile_message

__all__ = ["WELL_KNOWN", "ProtobufModel"]

_BUILT_IN = (any_pb2, source_context_pb2, type_pb2, api_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2,
             timestamp_pb2, wrappers_pb2, descriptor_pb2)  # each after what it imports
WELL_KNOWN = frozenset(m.DESCRIPTOR.name for m in _BUILT_IN)
"""Import paths that need no reference (``google/protobuf/timestamp.proto``, ...)."""

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _FDP.TYPE_DOUBLE, "float": _FDP.TYPE_FLOAT, "int64": _FDP.TYPE_INT64, "uint64": _FDP.TYPE_UINT64,
    "int32": _FDP.TYPE_INT32, "fixed64": _FDP.TYPE_FIXED64, "fixed32": _FDP.TYPE_FIXED32, "bool": _FDP.TYPE_BOOL,
    "string": _FDP.TYPE_STRING, "bytes": _FDP.TYPE_BYTES, "uint32": _FDP.TYPE_UINT32,
    "sfixed32": _FDP.TYPE_SFIXED32, "sfixed64": _FDP.TYPE_SFIXED64, "sint32": _FDP.TYPE_SINT32,
    "sint64": _FDP.TYPE_SINT64,
}
_LABELS = {
    ast.FieldCardinality.OPTIONAL: _FDP.LABEL_OPTIONAL, ast.FieldCardinality.REQUIRED: _FDP.LABEL_REQUIRED,
    ast.FieldCardinality.REPEATED: _FDP.LABEL_REPEATED,
}
_BASE64 = re.compile(r"[A-Za-z0-9+/=\r\n]+\Z")
_MAIN = "tidings-schema.proto"
_POOL_PREFIX = "Couldn't build proto file into descriptor pool: "


class _Raise(ErrorListener):  # type: ignore[misc]
    def syntaxError(self, recognizer: Any, symbol: Any, line: int, column: int, msg: str, e: Any) -> None:
        raise MalformedSchema(f"Protobuf: line {line}:{column}: {msg}")


def _strict(p: Any) -> None:
    p.removeErrorListeners()
    p.addErrorListener(_Raise())


class _Builder:
    """An ``ast.File`` as a ``FileDescriptorProto``; names stay as written (the pool resolves them)."""

    def __init__(self, syntax: str) -> None:
        self.proto3 = syntax == "proto3"

    def field(self, f: ast.Field, out: Any, oneof: int | None = None) -> None:
        fd = out.field.add(name=f.name, number=f.number)
        if f.type in _SCALARS:
            fd.type = _SCALARS[f.type]
        else:
            fd.type_name = f.type
        fd.label = _LABELS.get(f.cardinality, _FDP.LABEL_OPTIONAL) if f.cardinality else _FDP.LABEL_OPTIONAL
        if oneof is not None:
            fd.oneof_index = oneof
        elif self.proto3 and f.cardinality is ast.FieldCardinality.OPTIONAL:
            fd.proto3_optional = True
            fd.oneof_index = len(out.oneof_decl)
            out.oneof_decl.add(name=f"_{f.name}")
        for o in f.options:
            if o.name == "json_name" and isinstance(o.value, str):
                fd.json_name = o.value
            elif o.name == "packed" and isinstance(o.value, bool):
                fd.options.packed = o.value
            elif o.name == "default" and not self.proto3:
                fd.default_value = str(o.value).lower() if isinstance(o.value, bool) else str(o.value)

    def map_field(self, f: ast.MapField, out: Any) -> None:
        entry = "".join(p[:1].upper() + p[1:] for p in f.name.split("_")) + "Entry"
        m = out.nested_type.add(name=entry)
        m.options.map_entry = True
        for name, number, t in (("key", 1, f.key_type), ("value", 2, f.value_type)):
            self.field(ast.Field(name=name, number=number, type=t), m)
        out.field.add(name=f.name, number=f.number, label=_FDP.LABEL_REPEATED, type_name=entry)

    def message(self, msg: ast.Message, out: Any) -> None:
        out.name = msg.name
        for el in msg.elements:
            if isinstance(el, ast.Field):
                self.field(el, out)
            elif isinstance(el, ast.MapField):
                self.map_field(el, out)
            elif isinstance(el, ast.OneOf):
                index = len(out.oneof_decl)
                out.oneof_decl.add(name=el.name)
                for f in el.elements:
                    if isinstance(f, ast.Field):
                        self.field(f, out, index)
                    elif isinstance(f, ast.Group):
                        raise MalformedSchema(f"Protobuf: group {f.name!r}: groups are not supported")
            elif isinstance(el, ast.Message):
                self.message(el, out.nested_type.add())
            elif isinstance(el, ast.Enum):
                self.enum(el, out.enum_type.add())
            elif isinstance(el, ast.Group):
                raise MalformedSchema(f"Protobuf: group {el.name!r}: groups are not supported")
            elif isinstance(el, ast.Reserved):
                out.reserved_name.extend(el.names)

    def enum(self, e: ast.Enum, out: Any) -> None:
        out.name = e.name
        for el in e.elements:
            if isinstance(el, ast.EnumValue):
                out.value.add(name=el.name, number=el.number)
            elif isinstance(el, ast.Option) and el.name == "allow_alias" and el.value is True:
                out.options.allow_alias = True

    def file(self, tree: ast.File, name: str) -> descriptor_pb2.FileDescriptorProto:
        fdp = descriptor_pb2.FileDescriptorProto(name=name, syntax=tree.syntax or "proto2")
        if tree.edition is not None:
            raise MalformedSchema("Protobuf: editions are not supported; use syntax = \"proto3\" or \"proto2\"")
        for el in tree.file_elements:
            if isinstance(el, ast.Package):
                fdp.package = el.name
            elif isinstance(el, ast.Import):
                fdp.dependency.append(el.name)
                if el.public:
                    fdp.public_dependency.append(len(fdp.dependency) - 1)
            elif isinstance(el, ast.Message):
                self.message(el, fdp.message_type.add())
            elif isinstance(el, ast.Enum):
                self.enum(el, fdp.enum_type.add())
        return fdp


def read_proto(text: str, name: str) -> descriptor_pb2.FileDescriptorProto:
    """A ``.proto`` text, or a base64 serialized ``FileDescriptorProto``, as a descriptor named ``name``."""
    if _BASE64.match(text.strip()):
        try:
            fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode("".join(text.split())))
        except (binascii.Error, DecodeError, ValueError) as e:
            raise MalformedSchema(f"Protobuf: not a .proto text nor a base64 FileDescriptorProto: {e}") from None
        fdp.name = name
        fdp.ClearField("source_code_info")
        return fdp
    try:
        tree = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    except RecursionError:
        raise MalformedSchema("Protobuf: the schema nests too deeply") from None
    return _Builder(tree.syntax or "proto2").file(tree, name)


def build(text: str, deps: dict[str, str]) -> tuple[descriptor_pool.DescriptorPool, Any]:
    """A pool holding ``text`` (as file ``_MAIN``) and everything it imports; and its descriptor."""
    pool = descriptor_pool.DescriptorPool()
    for m in _BUILT_IN:
        pool.AddSerializedFile(m.DESCRIPTOR.serialized_pb)
    added: set[str] = set(WELL_KNOWN)

    def add(fdp: descriptor_pb2.FileDescriptorProto, chain: tuple[str, ...]) -> None:
        for dep in fdp.dependency:
            if dep in added:
                continue
            if dep in chain:
                raise MalformedSchema(f"Protobuf: import cycle through {dep!r}")
            if dep not in deps:
                raise MalformedSchema(f"Protobuf: import {dep!r} is not resolved: give it as a schema reference")
            add(read_proto(deps[dep], dep), (*chain, dep))
        try:
            pool.Add(fdp)
        except (TypeError, ValueError) as e:
            where = "" if fdp.name == _MAIN else f" in {fdp.name!r}"
            raise MalformedSchema(f"Protobuf{where}: {str(e).removeprefix(_POOL_PREFIX)}") from None
        added.add(fdp.name)

    add(read_proto(text, _MAIN), (_MAIN,))
    return pool, pool.FindFileByName(_MAIN)


class ProtobufModel(Model):
    """A ``.proto`` file with its imports (``deps``: import path → text)."""

    __slots__ = ("_check", "deps", "file", "from_descriptor")

    format = SchemaFormat.PROTOBUF

    def __init__(self, text: str, deps: dict[str, str] | None = None) -> None:
        self.deps = dict(deps or {})
        self.from_descriptor = bool(_BASE64.match(text.strip()))
        """Registered as a base64 descriptor rather than as ``.proto`` text."""
        _pool, self.file = build(text, self.deps)
        if not self.file.message_types_by_name:
            raise MalformedSchema("Protobuf: the file defines no message")
        first = self.file.message_types_by_name[next(iter(self.file.message_types_by_name))]
        self._check = compile_message(first)
        self.text = text
        self.canonical = json_format.MessageToJson(self.descriptor(), sort_keys=True, indent=None)

    def descriptor(self) -> descriptor_pb2.FileDescriptorProto:
        """The built file descriptor: names fully qualified, types resolved."""
        out = descriptor_pb2.FileDescriptorProto()
        self.file.CopyToProto(out)
        out.ClearField("name")
        return out

    def serialized(self) -> str:
        """The descriptor in base64, as Confluent answers ``format=serialized``."""
        return base64.b64encode(self.descriptor().SerializeToString(deterministic=True)).decode()

    def as_text(self) -> str:
        """The schema as ``.proto`` text: as registered, or written from its descriptor."""
        return render_proto(self.descriptor()) if self.from_descriptor else self.text

    def validate(self, value: Any) -> Violation | None:
        failure = self._check(to_json_instance(value))
        if failure is None:
            return None
        reason, steps = failure
        return Violation(instance_path(reversed(steps)), reason)

    def __reduce__(self) -> tuple[type[ProtobufModel], tuple[str, dict[str, str]]]:
        return ProtobufModel, (self.text, self.deps)

    def _reading_issues(self, writer: Model, *, reader_is_new: bool) -> list[Incompatibility]:
        if not isinstance(writer, ProtobufModel):
            raise TypeError("a Protobuf schema can only be compared with another Protobuf schema")
        return _protobuf_compat.diff(writer.file, self.file)
