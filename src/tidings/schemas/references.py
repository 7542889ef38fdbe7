"""Schema references: a schema read together with other registered schemas it names.

A reference is ``(name, subject, version)``, as in Confluent's ``references``: the schema
registered as ``version`` of ``subject`` is known to the referring schema as ``name``.
What the name means depends on the format:

* JSON Schema: ``name`` is the URI a ``$ref`` uses (``"$ref": "customer.json"``, or
  ``"customer.json#/$defs/address"``); a ``$ref`` relative to the schema's ``$id`` that
  resolves to ``name`` counts too.
* Avro: the referenced schema defines named types (a record, enum or fixed, or a union of
  them), and the referring schema uses them by their full names.
* Protobuf: ``name`` is the import path (``import "customer.proto";``).

References are resolved transitively (a referenced schema's own references come along)
before the schema is parsed, so validation and compatibility checks see the whole model.
JSON Schema and Avro are *bundled*: the referenced definitions are copied into the
document (JSON Schema under ``$defs``/``definitions``, Avro inline where a name is first
used), and the bundled document is what is parsed, validated and compared. Protobuf
files are handed to the Protobuf model as its imports. A reference that does not resolve
makes the schema malformed (Confluent's 42201).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urljoin

from .formats import MalformedSchema, Model, SchemaFormat, parse_model
from .formats._jsontext import load_json
from .formats._protobuf import ProtobufModel

__all__ = ["Ref", "RefTarget", "bundle_avro", "bundle_json", "identity", "parse_with_references"]

Ref = tuple[str, str, int]
"""``(name, subject, version)``."""
RefTarget = tuple[str, str, Sequence[Sequence[Any]]]
"""What a reference points at: ``(format, text, its own references)``."""

_MAX_REFS = 1000
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def identity(model: Model, refs: Sequence[Sequence[Any]]) -> str:
    """The text that makes two registrations the same schema: the canonical form and, when
    there are references, which versions they point at."""
    if not refs:
        return model.canonical
    return model.canonical + "\nreferences=" + json.dumps([list(r) for r in refs], separators=(",", ":"))


def _collect(
    refs: Sequence[Sequence[Any]], lookup: Callable[[str, int], RefTarget | None]
) -> dict[str, tuple[str, str]]:
    """Every schema reachable through ``refs``: name → (format, text), nearest first."""
    out: dict[str, tuple[str, str]] = {}
    queue = [tuple(r) for r in refs]
    while queue:
        name, subject, version = queue.pop(0)
        if name in out:
            continue
        target = lookup(str(subject), int(version))
        if target is None:
            raise MalformedSchema(f"reference {name!r}: subject {subject!r} has no version {version}")
        out[name] = (target[0], target[1])
        if len(out) > _MAX_REFS:
            raise MalformedSchema(f"more than {_MAX_REFS} schemas are referenced")
        queue += [tuple(r) for r in target[2]]
    return out


def parse_with_references(
    fmt: str, text: str, refs: Sequence[Sequence[Any]], lookup: Callable[[str, int], RefTarget | None], *,
    assert_formats: bool = False,
) -> Model:
    """Parse ``text`` with its references resolved through ``lookup(subject, version)``;
    ``assert_formats`` as in ``parse_model``."""
    kind = SchemaFormat.parse(fmt)
    if kind is SchemaFormat.PROTOBUF:
        deps = {name: t for name, (f, t) in _collect(refs, lookup).items() if f == "PROTOBUF"}
        return ProtobufModel(text, deps)
    if not refs:
        return parse_model(kind, text, assert_formats=assert_formats)
    found = _collect(refs, lookup)
    if any(f != kind for f, _ in found.values()):
        raise MalformedSchema(f"a {kind} schema can only reference {kind} schemas")
    texts = {name: t for name, (_, t) in found.items()}
    bundled = bundle_json(text, texts) if kind is SchemaFormat.JSON else bundle_avro(text, texts)
    return parse_model(kind, bundled, assert_formats=assert_formats)


def _load(text: str, what: str) -> Any:
    # The registry's one JSON rule (strict, bounded depth): a text nested past what the
    # parser goes raised RecursionError here, a 500.
    try:
        return load_json(text)
    except MalformedSchema as e:
        raise MalformedSchema(f"{what}: {e}") from None


# -- JSON Schema ---------------------------------------------------------------------------


def _rewrite(node: Any, fix: Callable[[str], str]) -> Any:
    if isinstance(node, dict):
        return {k: fix(v) if k == "$ref" and isinstance(v, str) else _rewrite(v, fix) for k, v in node.items()}
    if isinstance(node, list):
        return [_rewrite(v, fix) for v in node]
    return node


def bundle_json(text: str, refs: dict[str, str]) -> str:
    """``text`` with every referenced document copied under its ``$defs`` (``definitions``
    before 2019-09) and each ``$ref`` to one rewritten as a local pointer."""
    root = _load(text, "the schema")
    if not isinstance(root, dict):
        return text
    draft = str(root.get("$schema", ""))
    defs_key = "definitions" if any(d in draft for d in ("draft-04", "draft-06", "draft-07")) else "$defs"
    keys = {name: f"tidings-ref-{i}" for i, name in enumerate(refs)}
    base = root.get("$id") if isinstance(root.get("$id"), str) else None

    def target(ref: str, here: str) -> str:
        """Where ``ref``, found in the document at ``here`` ("" the root), points after bundling."""
        uri, _, fragment = ref.partition("#")
        if not uri:  # local to its own document
            if not here or (fragment and not fragment.startswith("/")):
                return ref
            return here + fragment
        name = uri if uri in keys else next((n for n in keys if base and urljoin(base, uri) == n), None)
        if name is None:
            return ref
        return f"#/{defs_key}/{keys[name]}" + (fragment if fragment.startswith("/") else "")

    bundled = _rewrite(root, lambda r: target(r, ""))
    defs = bundled.setdefault(defs_key, {})
    if not isinstance(defs, dict):
        raise MalformedSchema(f"'{defs_key}' must be an object")
    for name, key in keys.items():
        doc = _load(refs[name], f"the referenced schema {name!r}")
        if isinstance(doc, dict):
            doc = {k: v for k, v in doc.items() if k not in ("$id", "id", "$schema")}
        here = f"#/{defs_key}/{key}"
        defs[key] = _rewrite(doc, lambda r, here=here: target(r, here))  # type: ignore[misc]
    return json.dumps(bundled)


# -- Avro ----------------------------------------------------------------------------------


def _full(name: str, ns: str) -> str:
    return name if "." in name or not ns else f"{ns}.{name}"


def _named(doc: Any, ns: str, out: dict[str, Any]) -> None:
    """The top-level named types a referenced Avro schema defines, by full name."""
    if isinstance(doc, list):
        for d in doc:
            _named(d, ns, out)
    elif isinstance(doc, dict) and doc.get("type") in ("record", "error", "enum", "fixed"):
        name = doc.get("name")
        if isinstance(name, str):
            space = doc.get("namespace", ns)
            full = _full(name, space if isinstance(space, str) else "")
            pinned = {**doc, "name": full, "namespace": ""}  # inlined anywhere, it keeps its full name
            out.setdefault(full, pinned)


class _AvroBundler:
    def __init__(self, pool: dict[str, Any]) -> None:
        self.pool = pool
        self.defined: set[str] = set()

    def schema(self, s: Any, ns: str) -> Any:
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return s
            full = _full(s, ns)
            if full in self.defined or full not in self.pool:
                return s
            return self.schema(copy.deepcopy(self.pool[full]), "")
        if isinstance(s, list):
            return [self.schema(b, ns) for b in s]
        if not isinstance(s, dict):
            return s
        t = s.get("type")
        if t in ("record", "error", "enum", "fixed") and isinstance(s.get("name"), str):
            space = s.get("namespace", ns)
            full = _full(s["name"], space if isinstance(space, str) else "")
            self.defined.add(full)
            if t in ("record", "error") and isinstance(s.get("fields"), list):
                inner = full.rpartition(".")[0]
                fields = [
                    {**f, "type": self.schema(f["type"], inner)} if isinstance(f, dict) and "type" in f else f
                    for f in s["fields"]
                ]
                return {**s, "fields": fields}
            return s
        if t == "array" and "items" in s:
            return {**s, "items": self.schema(s["items"], ns)}
        if t == "map" and "values" in s:
            return {**s, "values": self.schema(s["values"], ns)}
        if isinstance(t, (str, list, dict)) and t not in _PRIMITIVES and t not in ("array", "map"):
            inner = self.schema(t, ns)
            return inner if isinstance(inner, dict) and len(s) == 1 else {**s, "type": inner}
        return s


def bundle_avro(text: str, refs: dict[str, str]) -> str:
    """``text`` with each named type of a referenced schema defined where it is first used."""
    pool: dict[str, Any] = {}
    for name, t in refs.items():
        _named(_load(t, f"the referenced schema {name!r}"), "", pool)
    return json.dumps(_AvroBundler(pool).schema(_load(text, "the schema"), ""))
