"""The package's imports point one way, down the layers docs/architecture.md lists, and no module imports itself back through others.

Every import counts: at the top of a module, inside a function (the plugin imports its
machinery lazily) and under ``TYPE_CHECKING``. The layers are read from docs/architecture.md, so
the picture it draws and the code cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_toolbench"
NAME = "pytest_toolbench"

Edge = tuple[str, str, int]
"""Importing module, imported module, line of the import."""


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def documented_layers() -> list[list[str]]:
    """The layers, top first: the code block after "Dependencies point one way"."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    found = re.search(r"Dependencies point one way.*?```text\n(.*?)```", text, re.DOTALL)
    assert found, "docs/architecture.md: no layer list after 'Dependencies point one way'"
    return [line.split() for line in found.group(1).splitlines() if line.strip()]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported(module: str, path: Path, node: ast.ImportFrom) -> Iterator[str]:
    """The package modules an ``ImportFrom`` names (a name may be a module of a package)."""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        parts = package[:len(package) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    for alias in node.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def edges() -> list[Edge]:
    found: list[Edge] = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                targets = list(imported(module, path, node))
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            found += [(module, target, node.lineno) for target in targets
                      if target.startswith(NAME) and target != module]
    return found


def group(module: str) -> str:
    """The top-level module or package of ``module``: what a layer lists."""
    return module.split(".")[1] if module != NAME else ""


def test_the_walk_sees_lazy_and_type_checking_imports() -> None:
    """The plugin imports its items inside a function, and items' types only for mypy: a
    walk blind to either would pass whatever the code did."""
    pairs = {(group(a), group(b)) for a, b, _ in edges()}
    assert ("plugin", "items") in pairs
    assert ("settings", "casefile") in pairs  # under TYPE_CHECKING


def test_the_readme_places_every_module_in_one_layer() -> None:
    listed = [name for layer in documented_layers() for name in layer]
    groups = {group(module) for module in MODULES} - {""}
    assert sorted(listed) == sorted(set(listed)), "a module listed in two layers"
    assert groups - set(listed) == set(), "modules docs/architecture.md's layers leave out"
    assert set(listed) - groups == set(), "layers naming no module"


def test_imports_point_down_the_layers() -> None:
    rank = {name: -index for index, layer in enumerate(documented_layers()) for name in layer}
    upward = [f"{MODULES[a].relative_to(ROOT)}:{line}: {a} imports {b}"
              for a, b, line in edges()
              if group(a) and group(b) != group(a) and rank[group(b)] >= rank[group(a)]]
    assert upward == []


def test_no_module_imports_itself_back() -> None:
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges():
        graph.setdefault(a, set()).add(b)
    assert find_cycle(graph) == []


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as the modules along it, or [] when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


@pytest.mark.parametrize(("graph", "cycle"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"items": {"plugin"}, "plugin": {"items"}}, ["items", "plugin", "items"]),
])
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], cycle: list[str]) -> None:
    assert find_cycle(graph) == cycle
