"""The package map of docs/architecture.md, held against the code's imports.

A package may import only the packages its row names (imports under ``TYPE_CHECKING``
are for annotations and do not count); ``tidings.core`` imports none."""

from __future__ import annotations

import ast
from pathlib import Path

import tidings

ROOT = Path(tidings.__file__).parent
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "errors": set(),
    "settings": {"errors", "settings_file"},
    "settings_file": {"errors"},
    "outbound": {"core"},
    "tracing": {"core"},
    "store": {"core", "errors"},
    "schemas": {"core", "errors", "store"},
    "pipeline": {"core", "errors", "settings"},
    "client": {"core", "errors"},
    "broker": {"core", "errors", "settings", "store", "schemas", "outbound", "pipeline", "tracing"},
    "interchain": {"core", "errors", "client", "outbound", "pipeline", "http1"},
    "console": {"core", "errors", "broker", "store"},
    "api": {"core", "errors", "broker", "schemas", "store", "console", "bodies"},
    "xmpp": {"core", "errors", "settings", "store", "broker"},
    "runtime": set(),
    "logs": set(),
    "front": {"core", "errors", "runtime", "bodies", "logs", "http1"},
    "http1": set(),
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


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The tidings modules ``path`` imports at run time (``from .x import y`` names module
    ``x``, or ``y`` when ``y`` is a module itself)."""
    package = _module_of(path) if path.name == "__init__.py" else _module_of(path).rpartition(".")[0]
    out: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            name = ".".join(base + ([node.module] if node.module else []))
        else:
            name = node.module or ""
        for a in node.names:
            if f"{name}.{a.name}" in modules:
                out.add(f"{name}.{a.name}")
            elif name in modules:
                out.add(name)
    return out


def test_no_two_modules_import_each_other() -> None:
    paths = {_module_of(p): p for p in ROOT.rglob("*.py")}
    imports = {m: _imported_modules(p, set(paths)) for m, p in paths.items()}
    pairs = sorted({tuple(sorted((a, b))) for a, targets in imports.items() for b in targets
                    if a != b and a in imports.get(b, set())})
    assert pairs == [], pairs


def test_every_module_stays_under_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) >= 500}
    assert long == {}
