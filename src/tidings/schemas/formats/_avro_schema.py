"""Reading an Avro schema into tidings' normal form, with errors that say where.

fastavro is lenient where the specification is not (bad names, duplicate fields or union
branches, records without fields, out-of-range defaults) and its errors carry no location,
so this reader checks the specification itself and fastavro judges afterwards (logical
types and anything else it knows).

The normal form is plain JSON: every name fully qualified and no ``namespace``
attributes, primitives without attributes written as bare strings, ``order`` omitted when
it is the default, each named type defined inline where it first appears and referred to
by its full name afterwards. Everything else, defaults, docs and custom attributes
included, is kept, so the canonical text of the normal form changes only when meaning might.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, NoReturn

from ._model import MalformedSchema

__all__ = ["NAMED", "PRIMITIVES", "AvroSchema", "parse_avro", "resolve"]

PRIMITIVES: Final = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED: Final = frozenset({"record", "error", "enum", "fixed"})
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT_RANGE: Final = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_STANDARD: Final = {
    "record": {"type", "name", "namespace", "aliases", "doc", "fields"},
    "enum": {"type", "name", "namespace", "aliases", "doc", "symbols", "default"},
    "fixed": {"type", "name", "namespace", "aliases", "size"},
    "array": {"type", "items"},
    "map": {"type", "values"},
    "field": {"name", "type", "default", "order", "aliases", "doc"},
}

AvroSchema = tuple[Any, dict[str, dict[str, Any]]]
"""The normal form of a schema and its named types by full name."""


def resolve(t: Any, names: dict[str, dict[str, Any]]) -> Any:
    """A named-type reference → its definition; anything else unchanged."""
    return names[t] if isinstance(t, str) and t not in PRIMITIVES else t


def _at(path: str) -> str:
    return f"at {path}" if path else "at the top level"


def _join(path: str, step: str) -> str:
    return f"{path}.{step}" if path else step


class _Reader:
    def __init__(self, stored: bool = False) -> None:
        self.names: dict[str, dict[str, Any]] = {}
        self.stored = stored
        """Reading a schema stored by an older tidings, which let a union's default be of
        any branch: it is read as it was accepted, so what is bound to it keeps working."""

    def fail(self, path: str, message: str) -> NoReturn:
        raise MalformedSchema(f"Avro: {message} {_at(path)}")

    def schema(self, s: Any, ns: str, path: str) -> Any:
        if isinstance(s, str):
            return self.reference(s, ns, path)
        if isinstance(s, list):
            return self.union(s, ns, path)
        if not isinstance(s, dict):
            self.fail(path, f"a schema is a type name, an object or an array, not {s!r}")
        t = s.get("type")
        if not isinstance(t, str):
            self.fail(path, "an object schema needs a 'type' that is a string")
        if t in PRIMITIVES:
            extra = {k: v for k, v in s.items() if k != "type"}
            return {"type": t, **extra} if extra else t
        if t in ("record", "error"):
            return self.record(s, t, ns, path)
        if t == "enum":
            return self.enum(s, ns, path)
        if t == "fixed":
            return self.fixed(s, ns, path)
        if t == "array":
            return self.container(s, "items", ns, path)
        if t == "map":
            return self.container(s, "values", ns, path)
        self.fail(path, f"unknown type {t!r}")

    def reference(self, s: str, ns: str, path: str) -> str:
        if s in PRIMITIVES:
            return s
        full = s if "." in s or not ns else f"{ns}.{s}"
        if full not in self.names:
            self.fail(path, f"unknown type {s!r}")
        return full

    def union(self, branches: list[Any], ns: str, path: str) -> list[Any]:
        if not branches:
            self.fail(path, "a union needs at least one branch")
        out, seen = [], set()
        for i, b in enumerate(branches):
            if isinstance(b, list):
                self.fail(f"{path}[{i}]", "a union cannot directly contain another union")
            parsed = self.schema(b, ns, f"{path}[{i}]")
            d = resolve(parsed, self.names)
            key = d if isinstance(d, str) else d["name"] if d["type"] in NAMED else d["type"]
            if key in seen:
                self.fail(f"{path}[{i}]", f"the union has two branches of type {key!r}")
            seen.add(key)
            out.append(parsed)
        return out

    def name(self, s: dict[str, Any], ns: str, path: str, kind: str) -> str:
        name, space = s.get("name"), s.get("namespace", ns)
        if not isinstance(name, str) or not name:
            self.fail(path, f"a {kind} needs a 'name'")
        if space is not None and not isinstance(space, str):
            self.fail(path, "'namespace' must be a string")
        full = name if "." in name or not space else f"{space}.{name}"
        self.check_name(full, path, dotted=True)
        if full.rsplit(".", 1)[-1] in PRIMITIVES:
            self.fail(path, f"{name!r} is a primitive type name and cannot name a {kind}")
        if full in self.names:
            self.fail(path, f"the name {full!r} is defined twice")
        return full

    def check_name(self, name: Any, path: str, dotted: bool = False) -> None:
        parts = name.split(".") if dotted and isinstance(name, str) else [name]
        if not all(isinstance(p, str) and _NAME.match(p) for p in parts):
            self.fail(path, f"{name!r} is not a valid Avro name ([A-Za-z_][A-Za-z0-9_]*)")

    def common(self, s: dict[str, Any], kind: str, full: str, path: str) -> dict[str, Any]:
        """The named type's attributes other than its body: name, aliases, doc, custom ones."""
        out = {k: v for k, v in s.items() if k not in _STANDARD[kind]}
        out.update(type=s["type"], name=full)
        space = full.rpartition(".")[0]
        if "aliases" in s:
            out["aliases"] = self.aliases(s["aliases"], space, path)
        if "doc" in s:
            out["doc"] = self.doc(s["doc"], path)
        return out

    def aliases(self, aliases: Any, space: str | None, path: str) -> list[str]:
        if not isinstance(aliases, list):
            self.fail(path, "'aliases' must be an array of names")
        out = []
        for a in aliases:
            self.check_name(a, path, dotted=space is not None)
            out.append(a if space is None or "." in a or not space else f"{space}.{a}")
        return out

    def doc(self, doc: Any, path: str) -> str:
        if not isinstance(doc, str):
            self.fail(path, "'doc' must be a string")
        return doc

    def record(self, s: dict[str, Any], t: str, ns: str, path: str) -> dict[str, Any]:
        full = self.name(s, ns, path, t)
        out = self.common(s, "record", full, path)
        self.names[full] = out  # defined before its fields: a record may contain itself
        fields = s.get("fields")
        if not isinstance(fields, list):
            self.fail(path, f"record {full!r} needs 'fields', an array")
        inner, taken = full.rpartition(".")[0], set()
        out["fields"] = []
        for i, f in enumerate(fields):
            f_path = _join(path, f"fields[{i}]")
            if not isinstance(f, dict):
                self.fail(f_path, "a field must be an object")
            if "name" not in f:
                self.fail(f_path, "a field needs a 'name'")
            self.check_name(f["name"], f_path)
            if f["name"] in taken:
                self.fail(f_path, f"record {full!r} has two fields named {f['name']!r}")
            taken.add(f["name"])
            if "type" not in f:
                self.fail(f_path, f"field {f['name']!r} needs a 'type'")
            field = {k: v for k, v in f.items() if k not in _STANDARD["field"]}
            field.update(name=f["name"], type=self.schema(f["type"], inner, _join(f_path, "type")))
            if "default" in f:
                if not self.default_ok(field["type"], f["default"]):
                    self.fail(_join(f_path, "default"), self._default_problem(field["type"], f["default"]))
                field["default"] = f["default"]
            order = f.get("order", "ascending")
            if order not in ("ascending", "descending", "ignore"):
                self.fail(f_path, "'order' must be ascending, descending or ignore")
            if order != "ascending":
                field["order"] = order
            if "aliases" in f:
                field["aliases"] = self.aliases(f["aliases"], None, f_path)
            if "doc" in f:
                field["doc"] = self.doc(f["doc"], f_path)
            out["fields"].append(field)
        return out

    def enum(self, s: dict[str, Any], ns: str, path: str) -> dict[str, Any]:
        full = self.name(s, ns, path, "enum")
        out = self.common(s, "enum", full, path)
        symbols = s.get("symbols")
        if not isinstance(symbols, list):
            self.fail(path, f"enum {full!r} needs 'symbols', an array")
        for sym in symbols:
            self.check_name(sym, _join(path, "symbols"))
        if len(set(symbols)) != len(symbols):
            self.fail(_join(path, "symbols"), f"enum {full!r} repeats a symbol")
        out["symbols"] = list(symbols)
        if "default" in s:
            if s["default"] not in symbols:
                self.fail(_join(path, "default"), f"the default {s['default']!r} is not a symbol of enum {full!r}")
            out["default"] = s["default"]
        self.names[full] = out
        return out

    def fixed(self, s: dict[str, Any], ns: str, path: str) -> dict[str, Any]:
        full = self.name(s, ns, path, "fixed")
        out = self.common(s, "fixed", full, path)
        size = s.get("size")
        if type(size) is not int or size < 0:
            self.fail(path, f"fixed {full!r} needs 'size', a non-negative integer")
        out["size"] = size
        self.names[full] = out
        return out

    def container(self, s: dict[str, Any], key: str, ns: str, path: str) -> dict[str, Any]:
        if key not in s:
            self.fail(path, f"{s['type']} needs '{key}'")
        out = {k: v for k, v in s.items() if k not in _STANDARD[s["type"]]}
        out.update(type=s["type"])
        out[key] = self.schema(s[key], ns, _join(path, key))
        return out

    def _default_problem(self, t: Any, v: Any) -> str:
        u = resolve(t, self.names)
        if isinstance(u, list) and any(self.default_ok(b, v) for b in u[1:]):
            first = u[0] if isinstance(u[0], str) else u[0].get("name", u[0].get("type"))
            return (f"default {_show(v)} does not match the union's first branch ({first!r}); a union's "
                    f"default must be of its first branch, so list the branch it belongs to first")
        return f"default {_show(v)} does not match the field's type"

    def default_ok(self, t: Any, v: Any) -> bool:
        """Is ``v`` a valid JSON default for ``t``? A union's default is one of its first
        branch (the Avro specification: "the type of the default value must match the first
        element of the union"); Avro's own libraries and Confluent's refuse any other."""
        t = resolve(t, self.names)
        if isinstance(t, list):
            if self.stored:
                return any(self.default_ok(b, v) for b in t)
            return bool(t) and self.default_ok(t[0], v)
        kind = t if isinstance(t, str) else t["type"]
        if kind == "null":
            return v is None
        if kind == "boolean":
            return type(v) is bool
        if kind in _INT_RANGE:
            lo, hi = _INT_RANGE[kind]
            return type(v) is int and lo <= v <= hi
        if kind in ("float", "double"):
            return type(v) in (int, float)
        if kind == "string":
            return isinstance(v, str)
        if kind == "bytes":
            return isinstance(v, str) and all(ord(c) < 256 for c in v)
        if kind == "fixed":
            return isinstance(v, str) and len(v) == t["size"] and all(ord(c) < 256 for c in v)
        if kind == "enum":
            return v in t["symbols"]
        if kind == "array":
            return isinstance(v, list) and all(self.default_ok(t["items"], i) for i in v)
        if kind == "map":
            return isinstance(v, dict) and all(self.default_ok(t["values"], i) for i in v.values())
        # A record: every field given a valid value, or defaulted.
        return isinstance(v, dict) and all(
            self.default_ok(f["type"], v[f["name"]]) if f["name"] in v else "default" in f for f in t["fields"]
        )


def _show(v: Any) -> str:
    text = json.dumps(v, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_avro(doc: Any, *, stored: bool = False) -> AvroSchema:
    """Check ``doc`` (decoded JSON) against the Avro specification; return its normal form.
    ``stored``: a schema an older tidings stored, read by the rules it was accepted under."""
    reader = _Reader(stored)
    root = reader.schema(doc, "", "")
    return root, reader.names
