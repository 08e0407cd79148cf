"""The simulator's models are pure: profiles, faults, models, exposition and pod parsing do no
I/O, so unit tests and benchmarks can drive them with explicit times."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rljob.dev.sim

PURE = ("profiles", "faults", "models", "exposition", "pods")
FORBIDDEN = {
    "asyncio", "socket", "urllib", "http", "subprocess", "time", "os", "tempfile", "threading",
    "prometheus_client", "boto3", "kopf", "kubernetes", "aiohttp", "yaml",
}  # fmt: skip


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io(module: str) -> None:
    path = Path(rljob.dev.sim.__file__).parent / f"{module}.py"
    roots: set[str] = set()
    internal: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
            if node.module.startswith("rljob."):
                internal.add(node.module)
    assert not roots & FORBIDDEN
    allowed = {f"rljob.dev.sim.{m}" for m in PURE} | {"rljob.dev.traces"}
    assert internal <= allowed
