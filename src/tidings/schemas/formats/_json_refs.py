"""Local ``$ref`` pointers in a JSON Schema document, for the compatibility check.

Only pointers into the same document (``#`` and ``#/...``) are followed, and only when
no subschema declares its own ``$id`` (which would change what ``#`` means below it);
anything else is left unresolved and the check refuses to assume it compatible.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import unquote

from ._drafts import Draft

__all__ = ["REFS", "UNRESOLVED", "Side", "has_nested_id", "refs_in"]

REFS: Final = ("$ref", "$dynamicRef", "$recursiveRef")
UNRESOLVED: Final = object()


def refs_in(s: Any) -> list[str]:
    found: list[str] = []
    stack = [s]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.extend(str(node[k]) for k in REFS if k in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def has_nested_id(doc: Any) -> bool:
    stack = list(doc.values()) if isinstance(doc, dict) else []
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "$id" in node or ("id" in node and isinstance(node["id"], str)):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


class Side:
    """One schema document: resolves its local ``$ref`` pointers."""

    def __init__(self, doc: Any, draft: Draft) -> None:
        self.doc = doc
        self.draft = draft
        # A nested $id changes what "#/..." means below it; such refs are not followed.
        self.local_refs_ok = not has_nested_id(doc)

    def resolve(self, ref: str) -> Any:
        if not self.local_refs_ok or not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
            return UNRESOLVED
        node = self.doc
        for raw in ref[2:].split("/") if len(ref) > 1 else []:
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return UNRESOLVED
        return node
