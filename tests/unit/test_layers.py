"""The pure layers import no I/O library, directly or through other rljob modules, and the
package layout never shadows the standard library's `operator`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "rljob"
FORBIDDEN = {
    "kopf",
    "kubernetes",
    "boto3",
    "botocore",
    "aiohttp",
    "prometheus_client",
    "urllib3",
    "requests",
}
# The pure layers; checkpoints' S3 subpackage (and the store/cli modules re-exporting it) is its
# I/O part.
PURE_PACKAGES = ("api", "reconcile", "health", "checkpoints")
IO_MODULES_IN_PURE_PACKAGES = {"rljob.checkpoints.store", "rljob.checkpoints.cli"}
IO_PACKAGES_IN_PURE_PACKAGES = ("rljob.checkpoints.s3",)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


MODULES = {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def _pure_modules() -> list[str]:
    return sorted(
        name
        for name in MODULES
        if name.split(".")[1:2]
        and name.split(".")[1] in PURE_PACKAGES
        and name not in IO_MODULES_IN_PURE_PACKAGES
        and not name.startswith(IO_PACKAGES_IN_PURE_PACKAGES)
    )


def _reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        for imported in MODULES.get(name, ()):
            if imported.startswith("rljob") and imported not in seen:
                seen.add(imported)
                todo.append(imported)
    return seen | {start}


@pytest.mark.parametrize("module", _pure_modules())
def test_pure_module_imports_no_io_library(module: str) -> None:
    offenders = {
        (via, imported)
        for via in _reachable(module)
        for imported in MODULES.get(via, ())
        if imported.split(".")[0] in FORBIDDEN
    }
    assert offenders == set()


def test_there_are_pure_modules_to_check() -> None:
    assert any(m.startswith("rljob.api.") for m in _pure_modules())


def test_operator_folder_is_not_a_package_and_stdlib_operator_still_imports() -> None:
    assert not (REPO / "operator" / "__init__.py").exists()
    out = subprocess.run(
        [sys.executable, "-c", "import operator; print(operator.add(1, 2))"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "3"
