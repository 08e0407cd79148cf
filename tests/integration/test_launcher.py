"""`rljob dev up --detach` / `env` / `down` as a user runs them: ready, then nothing left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rljob.dev.binaries import bin_dir
from rljob.dev.rundir import RunState

# own_plane: starts a control plane of its own.
pytestmark = [pytest.mark.integration, pytest.mark.own_plane]


def _rljob(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "rljob.cli", "dev", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out.stdout


def test_detached_plane_starts_prints_env_and_down_leaves_no_process(tmp_path: Path) -> None:
    run_dir = tmp_path / "plane"
    _rljob("up", "--profile", "test", "--detach", "--run-dir", str(run_dir))
    state = RunState.load(run_dir)
    pids = [state.launcher_pid, *state.pids.values()]
    assert state.ready and all(psutil.pid_exists(pid) for pid in pids)
    exports = _rljob("env", "--run-dir", str(run_dir)).splitlines()
    assert exports[0] == f"export KUBECONFIG={run_dir / 'admin.kubeconfig'}"
    assert exports[1].startswith(f"export PATH={bin_dir()}:")  # the bed's kubectl first

    _rljob("down", "--run-dir", str(run_dir))
    alive = [
        pid
        for pid in pids
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == []
