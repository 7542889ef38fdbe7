"""Can a reader JSON Schema accept every instance a writer JSON Schema accepts?

A conservative structural check: it walks both schemas side by side and proves
inclusion keyword by keyword (types, enums, bounds, required, properties, pattern
properties, items; ``anyOf``/``oneOf`` branch by branch, in ``_json_shapes``). What it
cannot prove (differing ``allOf``/``not``/``if``, dynamic references...) is reported as
``unsupported-change`` rather than passed silently.
Identical subschemas are always compatible, and local ``$ref`` pointers (``#/...``) are
followed on both sides, recursion included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from . import _json_rules as rules
from . import _json_shapes
from ._drafts import Draft
from ._json_refs import REFS, UNRESOLVED, Side, refs_in
from ._model import Incompatibility
from ._paths import step

__all__ = ["reading_issues"]

_HANDLED: Final = frozenset(
    {
        "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "minLength", "maxLength", "pattern", "format", "items", "prefixItems", "additionalItems", "minItems",
        "maxItems", "uniqueItems", "properties", "required", "additionalProperties", "minProperties",
        "maxProperties", "patternProperties", "anyOf", "oneOf",
    }
)  # fmt: skip
# Compared for identity only; the order fixes the order of the reports.
_UNSUPPORTED: Final = (
    "allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
    "dependencies", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
    "contains", "minContains", "maxContains",
)  # fmt: skip
_CONSTRAINING: Final = _HANDLED | frozenset(_UNSUPPORTED) | frozenset(REFS)
# Sum types the shapes module could not take (both anyOf and oneOf on one side): unprovable.
_SUMS_UNPROVEN: Final = _json_shapes.SUMS
_NUMERIC: Final = frozenset({"number", "integer"})
_ANYTHING: Final[dict[str, Any]] = {}  # `true` as an object; one shared instance keeps `seen` keys stable


def _accepts_all(s: Any) -> bool:
    return s is True or (isinstance(s, dict) and _CONSTRAINING.isdisjoint(s))


class _Checker:
    def __init__(self, reader: Side, writer: Side, reader_is_new: bool) -> None:
        self.r, self.w = reader, writer
        self.reader_is_new = reader_is_new
        self.R = "the new schema" if reader_is_new else "the old schema"
        self.W = "the old schema" if reader_is_new else "the new schema"
        self.new_draft = reader.draft if reader_is_new else writer.draft
        self.issues: dict[tuple[str, str], Incompatibility] = {}
        self.seen: set[tuple[int, int]] = set()
        # Pairs entered since the last step into properties or items. Meeting one again
        # means a reference cycle with no structure in between ({"$ref": "#"} beside other
        # keywords); assuming it compatible would prove anything, so it is refused.
        self.unguarded: set[tuple[int, int]] = set()
        self._splits: dict[int, tuple[Any, Any, Any]] = {}  # also keeps split-off nodes alive for `seen`
        self._derived: dict[Any, Any] = {}

    def report(self, path: str, rule_pair: tuple[str, str], message: str) -> None:
        rule = rule_pair[0] if self.reader_is_new else rule_pair[1]
        self.issues.setdefault((path, rule), Incompatibility(path, rule, message))

    def unsupported(self, path: str, what: str) -> None:
        self.report(
            path,
            ("unsupported-change", "unsupported-change"),
            f"{rules.subject(path)}: {what} differs between the schemas and tidings cannot prove the change "
            "compatible, so it is refused.",
        )

    # -- identity ------------------------------------------------------------------

    def same(self, r: Any, w: Any, following: frozenset[str] = frozenset()) -> bool:
        """Identical subschemas whose references also resolve to identical targets."""
        if rules.jkey(r) != rules.jkey(w):
            return False
        for ref in refs_in(r):
            if ref in following:
                continue
            tr, tw = self.r.resolve(ref), self.w.resolve(ref)
            if tr is UNRESOLVED or tw is UNRESOLVED or not self.same(tr, tw, following | {ref}):
                return False
        return True

    # -- traversal -----------------------------------------------------------------

    def check(self, r: Any, w: Any, path: str) -> None:
        if w is False or _accepts_all(r):
            return
        key = (id(r), id(w))
        if key in self.unguarded:
            self.unsupported(path, "a reference that leads back to itself")
            return
        if key in self.seen:  # a cycle through $ref and some structure: assume compatible (coinduction)
            return
        self.seen.add(key)
        if self.same(r, w):
            return
        self.unguarded.add(key)
        try:
            self._compare(r, w, path)
        finally:
            self.unguarded.discard(key)

    def descend(self, r: Any, w: Any, path: str) -> None:
        """Check a pair one structural step down (a property, the items...)."""
        saved, self.unguarded = self.unguarded, set()
        try:
            self.check(r, w, path)
        finally:
            self.unguarded = saved

    def _compare(self, r: Any, w: Any, path: str) -> None:
        if r is False:
            self.report(path, ("type-narrowed", "type-widened"), f"{rules.subject(path)}: {self.R} accepts no value.")
            return
        if w is True:
            w = _ANYTHING
        if any(k in r for k in REFS):
            self._reader_ref(r, w, path)
        elif any(k in w for k in REFS):
            self._writer_ref(r, w, path)
        else:
            self._keywords(r, w, path)

    def _split(self, side: Side, node: dict[str, Any]) -> tuple[Any, Any]:
        """A node with a reference → (target or UNRESOLVED, the sibling keywords as a schema)."""
        cached = self._splits.get(id(node))
        if cached is None:
            target = side.resolve(node["$ref"]) if "$ref" in node else UNRESOLVED
            rest = True if side.draft.ref_overrides_siblings else {k: v for k, v in node.items() if k not in REFS}
            cached = self._splits[id(node)] = (node, target, rest)
        return cached[1], cached[2]

    def _reader_ref(self, r: dict[str, Any], w: Any, path: str) -> None:
        target, rest = self._split(self.r, r)
        if target is UNRESOLVED:
            self.unsupported(path, f"the reference {rules.show(refs_in({k: r[k] for k in REFS if k in r}))}")
            return
        self.check(target, w, path)
        self.check(rest, w, path)

    def _writer_ref(self, r: Any, w: dict[str, Any], path: str) -> None:
        target, rest = self._split(self.w, w)
        if target is UNRESOLVED:
            self.unsupported(path, f"the reference {rules.show(refs_in({k: w[k] for k in REFS if k in w}))}")
            return
        if _accepts_all(rest):
            self.check(r, target, path)
            return
        # The writer allows target AND rest: proving either one inside the reader is enough.
        first = self._trial(lambda: self.check(r, target, path))
        if first and not self._trial(lambda: self.check(r, rest, path)):
            return
        self.issues.update(first)

    def parts(self, reader: bool, node: dict[str, Any]) -> list[Any]:
        """A node with a reference as the schemas it is the conjunction of: the target
        (when it resolves) and the sibling keywords (when the draft applies them)."""
        target, rest = self._split(self.r if reader else self.w, node)
        return [x for x in (target, rest) if x is not UNRESOLVED and x is not True]

    def keep(self, key: Any, make: Callable[[], Any]) -> Any:
        """A schema derived from the walked ones (a joined branch), made once per key and
        kept alive, so that ``seen`` (keyed by ids) never mistakes a new one for an old one."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def trial(self, run: Callable[[], None]) -> dict[tuple[str, str], Incompatibility]:
        return self._trial(run)

    def merge(self, issues: dict[tuple[str, str], Incompatibility]) -> None:
        for key, issue in issues.items():
            self.issues.setdefault(key, issue)

    def _trial(self, run: Callable[[], None]) -> dict[tuple[str, str], Incompatibility]:
        """Run a check on the side; keep its effects only when it found nothing."""
        issues, seen = self.issues, set(self.seen)
        self.issues = {}
        run()
        found, self.issues = self.issues, issues
        if found:
            self.seen = seen
        return found

    def _keywords(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        values = rules.enum_values(w)
        if values is not None and self._values_fit(r, w, values, path):
            return
        if any(k in r or k in w for k in _json_shapes.SUMS) and not all(
            self.same(r.get(k), w.get(k)) for k in _json_shapes.SUMS
        ):
            if _json_shapes.sum_types(self, r, w, path):
                return
            for k in _SUMS_UNPROVEN:
                if k in r and not self.same(r[k], w.get(k)):
                    self.unsupported(f"{path}.{k}", f"'{k}'")
        for k in _UNSUPPORTED:
            if k in r and (k not in w or not self.same(r[k], w[k])):
                self.unsupported(f"{path}.{k}", f"'{k}'")
        w_types = rules.types_of(w)
        if values is not None:
            w_types &= {rules.type_of_value(v) for v in values}
        r_values = rules.enum_values(r)
        if r_values is not None:
            r_keys = {rules.jkey(v) for v in r_values}
            missing = None if values is None else [v for v in values if rules.jkey(v) not in r_keys]
            if missing is None or missing:
                allowed = "any value" if missing is None else rules.show(missing)
                self.report(
                    path,
                    ("enum-narrowed", "enum-widened"),
                    f"{rules.subject(path)}: {self.R} allows only {rules.show(r_values)}, {self.W} allows {allowed}.",
                )
        types = rules.check_types(self, path, rules.types_of(r), w_types)
        if types & _NUMERIC:
            ints = not types & {"number"}
            rules.numbers(self, path, r, self.r.draft, w, self.w.draft, ints)
        if "string" in types:
            rules.strings(self, path, r, w)
        if "array" in types:
            self._arrays(r, w, path)
        if "object" in types:
            self._objects(r, w, path)

    def _values_fit(self, r: dict[str, Any], w: dict[str, Any], values: list[Any], path: str) -> bool:
        """A writer with a finite enum: test each value against the reader, exactly."""
        if refs_in(r) or refs_in(w):
            return False
        try:
            writer, reader = self.w.draft.validator(w), self.r.draft.validator(r)
        except ValueError:
            return False
        refused = [v for v in values if writer.is_valid(v) and not reader.is_valid(v)]
        if refused:
            reason = next(iter(reader.iter_errors(refused[0]))).message
            self.report(
                path,
                ("enum-narrowed", "enum-widened"),
                f"{rules.subject(path)}: {self.W} allows {rules.show(refused)}, which {self.R} refuses ({reason}).",
            )
        return True

    def _arrays(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        rules.limits(self, path, r, w, "items", "minItems", "maxItems", "items")
        if r.get("uniqueItems") is True and w.get("uniqueItems") is not True:
            self.report(
                path,
                ("unique-items-added", "unique-items-removed"),
                f"{rules.subject(path)}: {self.R} requires unique items, {self.W} allows repeats.",
            )
        r_prefix, r_rest = self._items(r, self.r.draft)
        w_prefix, w_rest = self._items(w, self.w.draft)
        n = max(len(r_prefix), len(w_prefix))
        w_max = w.get("maxItems")
        tuple_key = "items" if self.new_draft.items_may_be_tuple else "prefixItems"
        for i in range(n if w_max is None else min(n, w_max)):
            self.descend(
                r_prefix[i] if i < len(r_prefix) else r_rest,
                w_prefix[i] if i < len(w_prefix) else w_rest,
                f"{path}.{tuple_key}[{i}]",
            )
        if w_max is None or w_max > n:
            self.descend(r_rest, w_rest, f"{path}.{'additionalItems' if n and tuple_key == 'items' else 'items'}")

    @staticmethod
    def _items(s: dict[str, Any], draft: Draft) -> tuple[list[Any], Any]:
        if draft.items_may_be_tuple:
            items = s.get("items", True)
            if isinstance(items, list):
                return items, s.get("additionalItems", True)
            return [], items
        return s.get("prefixItems", []), s.get("items", True)

    def _objects(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        w_required = set(w.get("required", ()))
        for name in r.get("required", ()):
            if name not in w_required:
                self.report(
                    f"{path}.properties{step(name)}",
                    ("required-added", "required-removed"),
                    f"{rules.subject(f'{path}.properties{step(name)}')}: {self.R} requires it, {self.W} does not.",
                )
        rules.limits(self, path, r, w, "properties", "minProperties", "maxProperties", "properties")
        _json_shapes.objects(self, r, w, path)


def reading_issues(
    reader: Any, reader_draft: Draft, writer: Any, writer_draft: Draft, *, reader_is_new: bool
) -> list[Incompatibility]:
    checker = _Checker(Side(reader, reader_draft), Side(writer, writer_draft), reader_is_new)
    checker.check(reader, writer, "$")
    return list(checker.issues.values())
