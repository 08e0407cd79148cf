"""The README's demo command works end to end: its own control plane (demo profile), S3,
simulated workloads with Prometheus, the operator, the demo RLJob Ready, and an injected
KV-cache drift repaired by restarting that one engine, shown with kubectl."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# own_plane: starts a control plane of its own.
pytestmark = [pytest.mark.integration, pytest.mark.own_plane]


def test_demo_brings_every_role_ready_and_stops_cleanly(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    out = subprocess.run(
        [sys.executable, "-m", "rljob.cli", "dev", "demo", "--once", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "rollout 4/4, trainer 2/2, reference 1/1, verifier 2/2 ready" in out.stdout
    assert "grpo-demo" in out.stdout and "Running" in out.stdout
    assert (
        "PodRestarted" in out.stdout
        and "KVCacheDrift" in out.stdout
        and "tok/s vs baseline" in out.stdout
    )
    assert out.stdout.rstrip().endswith("demo stopped")
