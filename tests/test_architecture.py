"""The package map of docs/architecture.md, held against the code's imports.

A package may import only the packages its row names (imports under ``TYPE_CHECKING``
are for annotations and do not count); ``tidings.core`` imports none. Inside the broker,
each room (subpackage) may import only the rooms below it, counting every import, and is
entered from outside through its face. No import cycle of any length among the modules of
``src/tidings`` and ``bench/``, counting every import (under ``TYPE_CHECKING``, inside a
function): a collaborator depends on a narrow Protocol, not on the class that uses it."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

import tidings

ROOT = Path(tidings.__file__).parent
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "errors": set(),
    "settings": {"errors", "settings_file"},
    "settings_file": {"errors"},
    "outbound": {"core"},
    "tracing": {"core", "hops"},
    "hops": {"core"},
    "store": {"core", "errors"},
    "schemas": {"core", "errors", "store", "tasks"},
    "pipeline": {"core", "errors", "settings"},
    "client": {"core", "errors"},
    "broker": {"core", "errors", "settings", "store", "schemas", "outbound", "pipeline", "tracing", "logs", "tasks"},
    "interchain": {"core", "errors", "client", "outbound", "pipeline", "http1", "tasks"},
    "console": {"core", "errors", "broker", "store"},
    "api": {"core", "errors", "broker", "schemas", "store", "console", "bodies", "fastpath"},
    "xmpp": {"core", "errors", "settings", "store", "broker"},
    "runtime": set(),
    "tasks": set(),
    "logs": set(),
    "front": {"core", "errors", "runtime", "bodies", "logs", "http1", "hops", "fastpath"},
    "http1": set(),
    "fastpath": set(),
    "bodies": {"errors"},
}
TOP = {p.stem for p in ROOT.glob("*.py")} | {p.name for p in ROOT.iterdir() if p.is_dir()}


def _runtime_imports(tree: ast.AST) -> list[ast.ImportFrom | ast.Import]:
    out: list[ast.ImportFrom | ast.Import] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _targets(path: Path, node: ast.ImportFrom | ast.Import) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name.split(".")[1] for a in node.names if a.name.startswith("tidings.")}
    if node.level == 0:
        return {node.module.split(".")[1]} if node.module and node.module.startswith("tidings.") else set()
    parts = path.relative_to(ROOT).parts[:-1]
    base = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
    if node.level - 1 > len(parts):
        return set()
    if base:
        return {base[0]}
    if node.module:
        return {node.module.split(".")[0]}
    return {a.name for a in node.names}


def test_every_package_imports_only_what_the_map_allows() -> None:
    problems = []
    for package, allowed in ALLOWED.items():
        files = [ROOT / f"{package}.py"] if (ROOT / f"{package}.py").exists() else (ROOT / package).rglob("*.py")
        for path in files:
            for node in _runtime_imports(ast.parse(path.read_text())):
                for target in _targets(path, node) - {package}:
                    if target in TOP and target not in allowed:
                        problems.append(f"{path.relative_to(ROOT)} imports tidings.{target}")
    assert problems == [], "\n".join(problems)


def test_the_map_names_every_package() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - set(ALLOWED) == set()


def _module_of(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _every_import(tree: ast.AST) -> Iterator[ast.ImportFrom | ast.Import]:
    """Every import statement, those under ``TYPE_CHECKING`` and inside functions too."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def _imported_modules(path: Path, modules: set[str], module: str, nodes: Iterator[ast.AST] | list[ast.AST]) -> set[str]:
    """The modules among ``modules`` that these import statements of ``path`` (module
    ``module``) name: ``from .x import y`` names module ``x``, or ``y`` when ``y`` is a
    module itself; ``import a.b`` names ``a.b``, or the nearest package above it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {m for a in node.names if (m := known(a.name))}
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            name = ".".join(base + ([node.module] if node.module else []))
        else:
            name = node.module or ""
        for a in node.names:
            target = f"{name}.{a.name}" if f"{name}.{a.name}" in modules else known(name)
            if target:
                out.add(target)
    return out - {module}


# -- no import cycle of any length ----------------------------------------------------------

BENCH = ROOT.parents[1] / "bench"


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Every module of ``src/tidings`` and ``bench/`` and the modules it imports, by any
    import statement."""
    paths = {_module_of(p, root): p for root in (ROOT, BENCH) for p in root.rglob("*.py")}
    return {
        m: _imported_modules(p, set(paths), m, list(_every_import(ast.parse(p.read_text()))))
        for m, p in paths.items()
    }


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (every import cycle
    lies within one), iteratively: no recursion limit on a long chain."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, for the failure message."""
    first, inside = component[0], set(component)
    paths = {first: [first]}
    queue = [first]
    for v in queue:
        for w in sorted(graph[v] & inside):
            if w == first:
                return paths[v] + [first]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return component


def _unit(module: str) -> str:
    """What a cycle is reported under: ``bench``, ``tidings`` (its ``__init__``), or a
    top-level package or module of tidings (``tidings.broker``)."""
    return "bench" if module.split(".")[0] == "bench" else ".".join(module.split(".")[:2])


_UNITS = sorted({_unit(_module_of(p, root)) for root in (ROOT, BENCH) for p in root.rglob("*.py")})


def test_the_cycle_finder_finds_cycles_of_every_length() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}, "f": {"g"}, "g": {"f"}}
    assert _strongly_connected(graph) == [["a", "b", "c"], ["f", "g"]]
    assert _a_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_type_checking_and_function_imports_count() -> None:
    source = "if TYPE_CHECKING:\n    from .b import B\ndef f():\n    from . import c\n"
    nodes = list(_every_import(ast.parse(source)))
    modules = {"tidings.p.a", "tidings.p.b", "tidings.p.c"}
    assert _imported_modules(ROOT / "p" / "a.py", modules, "tidings.p.a", nodes) == {"tidings.p.b", "tidings.p.c"}


@pytest.mark.parametrize("unit", _UNITS)
def test_no_import_cycle(unit: str) -> None:
    """No cycle of any length touches ``unit``'s modules (each cycle is shown once
    through its first module; ``->`` reads "imports")."""
    graph = _graph()
    cycles = [c for c in _strongly_connected(graph) if any(_unit(m) == unit for m in c)]
    shown = [f"{len(c)} modules {c}: {' -> '.join(_a_cycle(graph, c))}" for c in cycles]
    assert shown == [], "\n".join(shown)


# -- the broker's rooms ----------------------------------------------------------------------

BROKER = ROOT / "broker"
ROOMS: dict[str, set[str]] = {
    "auth": set(),
    "registry": set(),
    "metrics": set(),
    "delivery": {"registry", "metrics"},
    "replay": {"registry", "delivery"},
    "cluster": {"registry", "delivery", "replay"},
    "publish": {"registry", "cluster"},
    "service": {"auth", "registry", "metrics", "delivery", "replay", "cluster", "publish"},
    "__init__": {"service"},
}
"""What each room of the broker (a subpackage, or a module at its top) may import of the
others, counting every import: docs/architecture.md, "The broker's rooms"."""


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["tidings", "broker"]:
        return None
    return parts[2] if len(parts) > 2 else "__init__"


def test_the_rooms_map_names_every_room() -> None:
    rooms = {p.name for p in BROKER.iterdir() if (p / "__init__.py").exists()} | {p.stem for p in BROKER.glob("*.py")}
    assert rooms == set(ROOMS)


def test_every_room_imports_only_the_rooms_below_it() -> None:
    problems = [
        f"{m} imports {t}"
        for m, targets in _graph().items() if (room := _room(m)) is not None
        for t in targets if (other := _room(t)) is not None and other != room and other not in ROOMS[room]
    ]
    assert problems == [], "\n".join(problems)


def test_every_room_has_a_face_and_private_modules() -> None:
    """A room's ``__init__`` names its public names in ``__all__`` and holds no code of its
    own; every other module of it is private (a leading underscore)."""
    problems = []
    for package in (p for p in BROKER.iterdir() if (p / "__init__.py").exists()):
        tree = ast.parse((package / "__init__.py").read_text())
        if not any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)
                   for n in tree.body):
            problems.append(f"broker/{package.name}/__init__.py has no __all__")
        if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body):
            problems.append(f"broker/{package.name}/__init__.py defines code: it only re-exports")
        problems += [f"broker/{package.name}/{p.name} is not private" for p in package.glob("*.py")
                     if p.name != "__init__.py" and not p.name.startswith("_")]
    assert problems == [], "\n".join(problems)


def test_a_room_is_entered_through_its_face() -> None:
    """Outside a room, the code (src/tidings, bench) imports its face, never its private
    modules; inside it, a module imports its siblings directly, never its own face (the
    face imports them: that is a cycle, or one waiting to happen)."""
    problems = []
    for m, targets in _graph().items():
        for t in targets:
            room = _room(t)
            if room is None or room == "__init__" or not (BROKER / room).is_dir():
                continue
            inside = _room(m) == room
            private = t != f"tidings.broker.{room}"
            if private and not inside:
                problems.append(f"{m} imports {t}: use tidings.broker.{room}")
            if inside and not private and not m.endswith(f".{room}"):
                problems.append(f"{m} imports its own room's face")
    assert problems == [], "\n".join(problems)


def test_every_module_stays_under_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) >= 500}
    assert long == {}
