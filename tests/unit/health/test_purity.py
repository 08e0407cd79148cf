"""The health package is pure: it imports nothing that does I/O, directly or through others."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rljob.health

FORBIDDEN = (
    "kopf",
    "kubernetes",
    "boto3",
    "botocore",
    "aiohttp",
    "prometheus_client",
    "requests",
    "urllib",
    "http",
    "socket",
    "asyncio",
    "subprocess",
    "time",
)
SOURCES = sorted(Path(rljob.health.__file__).parent.glob("*.py"))


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
def test_no_io_imports(path: Path) -> None:
    assert imported_roots(path).isdisjoint(FORBIDDEN)


def test_importing_the_package_loads_no_io_library() -> None:
    probe = (
        "import sys, rljob.health, rljob.dev.traces; "
        f"print(sorted(m for m in {FORBIDDEN[:6]!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()

    assert loaded == "[]"
