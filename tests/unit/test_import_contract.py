"""The import contract in pyproject.toml ([tool.importlinter]: the layers, no I/O in the pure
packages, the SDK and dev tools apart) holds, and the package layout never shadows the standard
library's `operator`."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_import_contract_holds() -> None:
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(result.stdout + result.stderr, pytrace=False)


def _layered() -> list[str]:
    """Every package or module the layers contract names (siblings split on | and :)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    layers = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [name.strip() for layer in layers["layers"] for name in re.split("[|:]", layer)]


def _modules() -> list[str]:
    root = REPO / "operator"
    return sorted(
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for path in (root / "rljob").rglob("*.py")
    )


# The SDK and the bed stand apart from the layers: the last contract keeps the product off them.
APART = ("rljob.sdk", "rljob.dev")


def test_every_module_is_inside_a_layer() -> None:
    covered = [*_layered(), *APART]
    # A package whose modules the layers name one by one (rljob.kubectl) is covered through them.
    outside = [
        module
        for module in _modules()
        if not any(module == name or module.startswith(f"{name}.") for name in covered)
        and not any(name.startswith(f"{module}.") for name in covered)
    ]
    assert outside == [], "modules no layer of pyproject.toml names"


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
