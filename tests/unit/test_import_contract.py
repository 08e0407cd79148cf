"""The import contract in pyproject.toml ([tool.importlinter]: the layers, no I/O in the pure
packages, the SDK and dev tools apart) holds, and the package layout never shadows the standard
library's `operator`."""

from __future__ import annotations

import subprocess
import sys
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
