"""`rljob dev up --all` / `status` / `down` as a user runs them: every part of the bed answers,
the live bed's run folder is not emptied, and `down` leaves no process of the run behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from rljob.dev.bedstate import BedState
from rljob.dev.processes import processes_mentioning, tail
from rljob.dev.rundir import RunState

# own_plane: starts a control plane of its own.
pytestmark = [pytest.mark.integration, pytest.mark.own_plane]


def _rljob(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rljob.cli", "dev", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200, url
        body: bytes = response.read()
        return body


def _nodes_through_the_beds_kubectl(run_dir: Path) -> list[str]:
    """What a user types after `up`: the exports of `rljob dev env`, then the bed's kubectl."""
    env = f"{sys.executable} -m rljob.cli dev env --run-dir {run_dir}"
    script = f'eval "$({env})" && command -v kubectl && kubectl get nodes -o name'
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    kubectl, *nodes = done.stdout.split()
    assert kubectl.endswith("/kubectl") and ".venv" not in kubectl  # the bed's, first on PATH
    return nodes


def _recorded_pids(plane: RunState, bed: BedState) -> list[int]:
    services = [record.pid for record in bed.services.values()]
    return [bed.launcher_pid, *plane.pids.values(), *services]


def _alive(pids: list[int]) -> list[int]:
    return [
        pid
        for pid in pids
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]


def _check_every_part_answers(run_dir: Path, bed: BedState, printed: str) -> None:
    assert bed.ready and set(bed.services) == {"s3", "simulator", "prometheus", "operator"}
    assert len(_nodes_through_the_beds_kubectl(run_dir)) == 4
    _get(bed.services["s3"].health_url)
    assert bed.services["prometheus"].health_url.endswith("/-/ready")
    _get(bed.services["prometheus"].health_url)
    simulator = bed.services["simulator"].url
    assert json.loads(_get(f"{simulator}/healthz"))["ok"] is True
    assert json.loads(_get(f"{simulator}/faults")) == []
    _get(bed.services["operator"].health_url)
    assert b"rljob_" in _get(bed.services["operator"].url)  # its /metrics
    for step in ("dev env --run-dir", "kubectl apply -f", f"{simulator}/workloads"):
        assert step in printed, printed


def test_the_whole_bed_answers_and_down_leaves_no_process_of_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "bed"
    pids: list[int] = []
    try:
        started = time.monotonic()
        up = _rljob("up", "--all", "--profile", "test", "--run-dir", str(run_dir))
        up_seconds = time.monotonic() - started
        assert up.returncode == 0, up.stdout + up.stderr + tail(run_dir / "launcher.log", 60)
        plane, bed = RunState.load(run_dir), BedState.load(run_dir)
        pids = _recorded_pids(plane, bed)
        _check_every_part_answers(run_dir, bed, up.stdout)

        status = _rljob("status", "--run-dir", str(run_dir))
        assert status.returncode == 0, status.stdout
        assert status.stdout.splitlines()[0].endswith("ready (10/10 running)"), status.stdout

        again = _rljob("up", "--all", "--run-dir", str(run_dir))
        assert again.returncode == 1 and "is in use by a live bed" in again.stderr
        assert f"rljob dev down --run-dir {run_dir}" in again.stderr
        assert RunState.path(run_dir).exists() and _alive(pids) == pids
    finally:
        started = time.monotonic()
        down = _rljob("down", "--run-dir", str(run_dir))
        down_seconds = time.monotonic() - started
    assert down.returncode == 0, down.stdout + down.stderr
    assert _alive(pids) == []
    assert processes_mentioning(run_dir) == []  # nothing else of the run either
    print(f"up --all took {up_seconds:.1f}s, down {down_seconds:.1f}s")
