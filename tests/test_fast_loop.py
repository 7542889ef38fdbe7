"""The fast loop (``pytest -m "not slow"``, README) still touches every package of
src/tidings, and its table of slow tests (tests/_speed.py) names only what exists.

A package or top-level module is touched when a test file the loop keeps imports it. A few
are imported by no test at all, only by the real process (``python -m tidings``: the CLI,
the server, its fronts, the console's routes): those are touched when a kept test file
starts that process, and are what its start-up imports (module-level imports from
``tidings.__main__``, and from ``tidings.server``, which the CLI imports when it serves).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from ._speed import KINDS, SLOW, TESTS

SRC = TESTS.parent / "src" / "tidings"
TOP = "tidings"


def units() -> set[str]:
    """The packages and top-level modules of src/tidings."""
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    return packages | {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == TOP and len(parts) > 1 else None


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def imported_units(path: Path) -> set[str]:
    """What a test file imports of tidings, anywhere in it (tests import some lazily)."""
    found: set[str] = set()
    for node in ast.walk(tree(path)):
        names: Iterable[str] = ()
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == TOP else [])
        found.update(u for u in map(unit_of, names) if u)
    return found


def starts_the_process(path: Path) -> bool:
    """Whether a test file runs ``python -m tidings`` (directly or by conftest's
    ``ServerProcess``, behind the ``server`` and ``server_factory`` fixtures)."""
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Name) and node.id == "ServerProcess":
            return True
        if isinstance(node, ast.arg) and node.arg in ("server", "server_factory"):
            return True
        if isinstance(node, ast.List | ast.Tuple):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if any(words[i:i + 2] == ["-m", TOP] for i in range(len(words))):
                return True
    return False


def module_file(module: str) -> Path | None:
    base = SRC.parent.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def startup_imports(module: str) -> set[str]:
    """The tidings modules ``module`` imports at module level (not under TYPE_CHECKING)."""
    path = module_file(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree(path).body)
    modules = set()
    for name in found:
        parts = name.split(".")
        modules.update(".".join(parts[:i]) for i in range(2, len(parts) + 1) if module_file(".".join(parts[:i])))
    return {m for m in modules if m.startswith(TOP + ".")}


def process_units() -> set[str]:
    """What the real process imports as it starts and serves."""
    seen: set[str] = set()
    todo = [f"{TOP}.__main__", f"{TOP}.server"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(startup_imports(module) - seen)
    return {u for u in map(unit_of, seen) if u}


def files_of_tests() -> list[Path]:
    return sorted(TESTS.glob("test_*.py"))


def kept(path: Path) -> bool:
    """Whether the fast loop runs tests of this file (it is not slow as a whole)."""
    return path.name not in SLOW


def test_the_fast_loop_touches_every_package_and_top_level_module() -> None:
    imported = {path: imported_units(path) for path in files_of_tests()}
    by_any_test = set().union(*imported.values())
    by_kept_test = set().union(*(u for path, u in imported.items() if kept(path)))
    through_the_process = process_units() if any(kept(p) and starts_the_process(p) for p in files_of_tests()) else set()
    missing = {
        # A unit some test imports needs a test the loop keeps that imports it; a unit no
        # test imports is reached through the real process a kept test starts.
        u for u in units()
        if u not in by_kept_test and (u in by_any_test or u not in through_the_process)
    }
    assert not missing, (
        f"the fast loop touches none of {sorted(missing)}: keep a fast test of each out of tests/_speed.py's SLOW"
    )


def test_every_entry_of_the_slow_table_names_a_test_that_exists_and_says_why() -> None:
    for entry, reason in SLOW.items():
        name, _, test = entry.partition("::")
        path = TESTS / name
        assert path.is_file(), f"tests/_speed.py names {name}, which does not exist"
        if test:
            defined = {n.name for n in tree(path).body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            assert test in defined, f"tests/_speed.py names {entry}: no such test in {name}"
            assert name not in SLOW, f"{entry}: the whole file is already slow"
        kind = reason.partition(":")[0]
        assert kind in KINDS and reason.partition(":")[2].strip(), f"{entry}: say why, as '<{'|'.join(KINDS)}>: ...'"

