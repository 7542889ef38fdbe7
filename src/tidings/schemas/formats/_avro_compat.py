"""Avro schema resolution as a checker: can a reader schema read what a writer schema wrote?

The rules are the specification's "Schema Resolution": named types match by unqualified
name or a reader alias; reader fields missing from the writer need a default; writer
fields missing from the reader are skipped; int→long→float→double and string↔bytes
promote; enums need every writer symbol (or a reader default); fixed sizes must agree;
arrays and maps resolve their items and values; every branch of a writer union must be
readable, and a non-union writer must match some reader branch. Logical types resolve as
their underlying types, as in the specification.
"""

from __future__ import annotations

from typing import Any, Final

from ._avro_schema import PRIMITIVES, resolve
from ._avro_validate import describe
from ._model import Incompatibility

__all__ = ["reading_issues"]

Names = dict[str, dict[str, Any]]

_PROMOTIONS: Final = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


def _kind(t: Any) -> str:
    if isinstance(t, list):
        return "union"
    kind = t if isinstance(t, str) else t["type"]
    return "record" if kind == "error" else kind


def _join(path: str, step: str) -> str:
    return f"{path}.{step}" if path else step


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _subject(path: str) -> str:
    if not path:
        return "The top-level schema"
    last = path.rpartition("fields.")[2]
    if "." not in last and path.rsplit(".", 1)[-1] == last:
        return f"Field {last!r} ({path})"
    return f"The value at {path}"


class _Checker:
    def __init__(self, reader_names: Names, writer_names: Names, reader_is_new: bool) -> None:
        self.rn, self.wn = reader_names, writer_names
        self.reader_is_new = reader_is_new
        self.R = "the new schema" if reader_is_new else "the old schema"
        self.W = "the old schema" if reader_is_new else "the new schema"
        self.issues: dict[tuple[str, str], Incompatibility] = {}
        self.seen: set[tuple[str, str]] = set()

    def report(self, path: str, rules: tuple[str, str], message: str) -> None:
        rule = rules[0] if self.reader_is_new else rules[1]
        self.issues.setdefault((path or "$", rule), Incompatibility(path or "$", rule, message))

    def describe_r(self, t: Any) -> str:
        return describe(t, self.rn)

    def describe_w(self, t: Any) -> str:
        return describe(t, self.wn)

    def matches(self, r: Any, w: Any, exact: bool) -> bool:
        """Does reader branch ``r`` match writer schema ``w`` (both resolved, neither a union)?"""
        rk, wk = _kind(r), _kind(w)
        if rk != wk:
            return not exact and rk in _PROMOTIONS.get(wk, ())
        return rk not in ("record", "enum", "fixed") or self.same_name(r, w)

    @staticmethod
    def same_name(r: dict[str, Any], w: dict[str, Any]) -> bool:
        return _short(r["name"]) == _short(w["name"]) or w["name"] in r.get("aliases", ())

    def branch_for(self, r: list[Any], w: Any) -> Any:
        """The reader union's branch that reads ``w``: the first exact match, else the first promotion."""
        branches = [resolve(b, self.rn) for b in r]
        for exact in (True, False):
            for b in branches:
                if self.matches(b, w, exact):
                    return b
        return None

    def check(self, r: Any, w: Any, path: str) -> None:
        r, w = resolve(r, self.rn), resolve(w, self.wn)
        rk, wk = _kind(r), _kind(w)
        if wk == "union":
            branches = [resolve(b, self.wn) for b in w]
            if rk != "union" and not any(self.matches(r, b, exact=False) for b in branches):
                self.report(
                    path,
                    ("type-changed", "type-changed"),
                    f"{_subject(path)}: {self.W} writes {self.describe_w(w)} but {self.R} reads "
                    f"{self.describe_r(r)}, which matches none of its branches.",
                )
                return
            for branch in branches:
                self.writer_branch(r, branch, path)
        elif rk == "union":
            chosen = self.branch_for(r, w)
            if chosen is None:
                self.report(
                    path,
                    ("type-changed", "type-changed"),
                    f"{_subject(path)}: {self.W} writes {self.describe_w(w)}, which no branch of {self.R}'s "
                    f"{self.describe_r(r)} can read.",
                )
            else:
                self.check(chosen, w, path)
        elif rk == wk:
            if rk in PRIMITIVES:
                return
            getattr(self, "check_" + rk)(r, w, path)
        elif rk in _PROMOTIONS.get(wk, ()):
            return
        else:
            narrowed = wk in _PROMOTIONS.get(rk, ())
            self.report(
                path,
                ("type-narrowed", "type-widened") if narrowed else ("type-changed", "type-changed"),
                f"{_subject(path)}: {self.W} writes {self.describe_w(w)} but {self.R} reads "
                f"{self.describe_r(r)}" + (", which cannot hold every such value." if narrowed else "."),
            )

    def writer_branch(self, r: Any, w: Any, path: str) -> None:
        if _kind(r) == "union":
            chosen = self.branch_for(r, w)
            if chosen is None:
                self.report(
                    path,
                    ("union-branch-removed", "union-branch-added"),
                    f"{_subject(path)}: {self.W} may write {self.describe_w(w)}, which no branch of {self.R}'s "
                    f"{self.describe_r(r)} can read.",
                )
            else:
                self.check(chosen, w, path)
        elif self.matches(r, w, exact=False):
            self.check(r, w, path)
        else:
            self.report(
                path,
                ("type-narrowed", "type-widened"),
                f"{_subject(path)}: {self.W} may write {self.describe_w(w)} (a branch of its union) but "
                f"{self.R} reads only {self.describe_r(r)}.",
            )

    def named_pair(self, r: dict[str, Any], w: dict[str, Any], path: str) -> bool:
        """Names agree and the pair is not being checked already (recursive types)."""
        if not self.same_name(r, w):
            self.report(
                path,
                ("name-mismatch", "name-mismatch"),
                f"{_subject(path)}: {self.W} writes {r['type']} {w['name']!r} but {self.R} reads "
                f"{r['name']!r}, and no alias of the reader matches.",
            )
            return False
        key = (r["name"], w["name"])
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def check_record(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        if not self.named_pair(r, w, path):
            return
        written = {f["name"]: f for f in w["fields"]}
        for field in r["fields"]:
            f_path = _join(path, f"fields.{field['name']}")
            source = written.get(field["name"])
            for alias in field.get("aliases", ()):
                source = source or written.get(alias)
            if source is not None:
                self.check(field["type"], source["type"], f_path)
            elif "default" not in field:
                self.report(
                    f_path,
                    ("field-added-without-default", "field-removed"),
                    f"{_subject(f_path)}: {self.R} reads it and has no default for it, but {self.W} does not write it.",
                )

    def check_enum(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        if not self.named_pair(r, w, path):
            return
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing and "default" not in r:
            self.report(
                path,
                ("enum-symbol-removed", "enum-symbol-added"),
                f"{_subject(path)}: {self.W} may write {', '.join(missing)}, which enum {r['name']} in {self.R} "
                "lacks, and it has no default symbol.",
            )

    def check_fixed(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        if self.named_pair(r, w, path) and r["size"] != w["size"]:
            self.report(
                path,
                ("fixed-size-changed", "fixed-size-changed"),
                f"{_subject(path)}: fixed {r['name']} holds {w['size']} bytes in {self.W} but {r['size']} in {self.R}.",
            )

    def check_array(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        self.check(r["items"], w["items"], _join(path, "items"))

    def check_map(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        self.check(r["values"], w["values"], _join(path, "values"))


def reading_issues(
    reader: Any, reader_names: Names, writer: Any, writer_names: Names, *, reader_is_new: bool
) -> list[Incompatibility]:
    checker = _Checker(reader_names, writer_names, reader_is_new)
    checker.check(reader, writer, "")
    return list(checker.issues.values())
