"""core/ stays pure: no I/O, no framework, so the broker and the Spark pipeline share it."""

from __future__ import annotations

import ast
from pathlib import Path

import tidings.core

ALLOWED = {
    "__future__", "typing", "collections", "collections.abc", "dataclasses", "enum", "functools",
    "itertools", "math", "re", "base64", "binascii", "hashlib", "hmac", "bisect", "heapq", "decimal", "fractions",
    "msgspec", "string", "operator", "ipaddress", "contextvars", "urllib.parse",
}


def test_core_imports_only_pure_modules() -> None:
    root = Path(tidings.core.__file__).parent
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative imports must stay inside core/
                    assert node.level == 1, f"{path.name} imports from outside core/"
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name in ALLOWED or name.split(".")[0] in {"msgspec"}, f"{path.name} imports {name}"
