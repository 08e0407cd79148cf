"""Tests against upstream torch, torchrun and DCP, run from the cached venv tools/torch-venv.sh
makes (tools/bootstrap.sh builds it; RLJOB_TORCH_VENV points elsewhere). Never skipped: a
machine without the venv builds it here, which takes minutes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]


def cached_venv(variable: str, script: str) -> Path:
    """The venv folder `variable` names, else the one tools/`script` makes (or finds cached)."""
    given = os.environ.get(variable)
    if given:
        return Path(given)
    made = subprocess.run(
        ["bash", str(TOP / "tools" / script)],
        check=True,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return Path(made.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def torch_venv() -> Path:
    """The venv folder with torch (its bin/ holds python and torchrun)."""
    return cached_venv("RLJOB_TORCH_VENV", "torch-venv.sh")
