"""No module of rljob imports a module that imports it back, directly or through others: a
circle means the modules hold one idea between them, or a piece that belongs elsewhere. Every
import counts, wherever it is written: at the top, inside a function, or under TYPE_CHECKING
(a deferred import dodges the circle at run time but keeps it in the design)."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[2] / "operator"

ImportGraph = dict[str, set[str]]


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file of every module under root/package (a package is its __init__)."""
    names: dict[str, Path] = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        names[".".join(parts).removesuffix(".__init__")] = path
    return names


def _imported(name: str, path: Path) -> Iterator[str]:
    """Every name an import statement anywhere in the file imports: for `from m import x`, m.x
    (a submodule, or a name in m, which _known maps back to m)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = [node.module] if node.module else []
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join([*base, *module] if node.level else module)
            yield from (f"{source}.{alias.name}" for alias in node.names)


def _known(imported: str, modules: Mapping[str, Path]) -> str | None:
    """The module of `imported` among `modules`: itself, or the nearest package holding it."""
    while imported not in modules and "." in imported:
        imported = imported.rpartition(".")[0]
    return imported if imported in modules else None


def import_graph(root: Path, package: str) -> ImportGraph:
    modules = _modules(root, package)
    graph: ImportGraph = {}
    for name, path in modules.items():
        targets = {_known(imported, modules) for imported in _imported(name, path)}
        graph[name] = {target for target in targets if target is not None and target != name}
    return graph


def _reachable(graph: ImportGraph, start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def circles(graph: ImportGraph) -> set[frozenset[str]]:
    """The modules that reach each other, grouped (strongly connected, two or more)."""
    reach = {name: _reachable(graph, name) for name in graph}
    return {
        frozenset({name} | {other for other in reach[name] if name in reach[other]})
        for name in graph
        if name in reach[name]
    }


def _write(root: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


FUNCTION_LEVEL = "def f() -> None:\n    from pkg import b\n"
TYPE_CHECKING_ONLY = (
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param({"a.py": "import pkg.b\n", "b.py": "import pkg.a\n"}, {"a", "b"}, id="direct"),
        pytest.param(
            {"a.py": FUNCTION_LEVEL, "b.py": "from pkg.a import x\n"},
            {"a", "b"},
            id="function-level",
        ),
        pytest.param(
            {"a.py": TYPE_CHECKING_ONLY, "b.py": "from . import a\n"},
            {"a", "b"},
            id="type-checking-and-relative",
        ),
        pytest.param(
            {
                "a.py": "from pkg.b import x\n",
                "b.py": "from pkg.c import y\n",
                "c.py": "import pkg.a\n",
            },
            {"a", "b", "c"},
            id="through-a-third",
        ),
        pytest.param(
            {"__init__.py": "from pkg.a import x\n", "a.py": "from pkg import y\n"},
            {"", "a"},
            id="through-the-package",
        ),
        pytest.param(
            {
                "sub/__init__.py": "",
                "sub/a.py": "from ..b import x\n",
                "b.py": "from .sub import a\n",
            },
            {"sub.a", "b"},
            id="across-subpackages",
        ),
        pytest.param({"a.py": "import pkg.b\n", "b.py": "import os\n"}, set(), id="none"),
    ],
)
def test_the_finder_finds_circles_however_imported(
    tmp_path: Path, files: Mapping[str, str], expected: set[str]
) -> None:
    _write(tmp_path / "pkg", {"__init__.py": "", **files})
    found = circles(import_graph(tmp_path, "pkg"))
    names = {f"pkg.{short}".rstrip(".") for short in expected}
    assert found == ({frozenset(names)} if names else set())


def test_no_module_of_rljob_is_in_an_import_circle() -> None:
    found = circles(import_graph(OPERATOR, "rljob"))
    assert sorted(map(sorted, found)) == []
