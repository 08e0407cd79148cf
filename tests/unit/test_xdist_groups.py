"""The integration tiers rely on pytest-xdist's loadgroup keeping an xdist_group module on one
worker (test_health_e2e's last test reads what the module's scenarios left in the worker's
Prometheus). pytest 9.2 broke that silently (pytest-dev/pytest-xdist#1386): this runs a
grouped module under `-n 2 --dist loadgroup` and fails if its tests land on two workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GROUPED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("index", range(6))
def test_reports_its_worker(index):
    print("WORKER", os.environ["PYTEST_XDIST_WORKER"])
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "-rA", "-q", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    workers = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("WORKER")}
    assert len(workers) == 1, f"one group ran on {sorted(workers)}"
