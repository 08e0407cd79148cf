"""Tests against upstream torch, torchrun and DCP, run from the cached venv tools/torch-venv.sh
makes (tools/bootstrap.sh builds it; RLJOB_TORCH_VENV points elsewhere). Never skipped: a
machine without the venv builds it here, which takes minutes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def torch_venv() -> Path:
    """The venv folder with torch (its bin/ holds python and torchrun)."""
    given = os.environ.get("RLJOB_TORCH_VENV")
    if given:
        return Path(given)
    made = subprocess.run(
        ["bash", str(TOP / "tools" / "torch-venv.sh")],
        check=True,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return Path(made.stdout.strip().splitlines()[-1])
