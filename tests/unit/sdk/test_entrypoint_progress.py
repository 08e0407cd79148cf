"""The SDK's entrypoint wrapper writes its failure evidence and passes the exit code through (a
signal death as 128+N); the progress exporter publishes the signals the detectors read. What the
evidence keeps is tested in test_entrypoint_evidence.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from rljob.sdk.entrypoint import run
from rljob.sdk.progress import ProgressExporter

WATCHDOG = (
    "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=41, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
)


def test_wrapper_passes_the_exit_code_and_writes_the_summary(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    script = f"import sys; print('step 1'); print({WATCHDOG!r}, file=sys.stderr); sys.exit(3)"
    assert run([sys.executable, "-c", script], log) == 3
    assert WATCHDOG in log.read_text()


@pytest.mark.parametrize(
    ("signal_name", "status"),
    [
        pytest.param("SIGABRT", 134, id="abort"),
        pytest.param("SIGKILL", 137, id="killed"),
        pytest.param("SIGSEGV", 139, id="segfault"),
    ],
)
def test_wrapper_reports_a_signal_death_as_128_plus_the_signal(
    tmp_path: Path, signal_name: str, status: int
) -> None:
    log = tmp_path / "termination-log"
    script = f"import os, signal; os.kill(os.getpid(), signal.{signal_name})"
    assert run([sys.executable, "-c", script], log) == status
    assert log.read_text().endswith(f"exit code {status}")


def test_wrapper_writes_nothing_on_success(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    assert run([sys.executable, "-c", "print('done')"], log) == 0
    assert not log.exists()


def test_progress_exporter_publishes_step_phase_heartbeat_and_checkpoint() -> None:
    progress = ProgressExporter(serve=False)
    progress.step(120)
    progress.phase("waiting_for_rollouts")
    progress.checkpoint(100)
    progress.policy_generation(7)
    text = generate_latest(progress.registry).decode()
    assert "rljob_trainer_step 120.0" in text
    assert 'rljob_trainer_phase{phase="waiting_for_rollouts"} 1.0' in text
    assert 'rljob_trainer_phase{phase="training"} 0.0' in text
    assert "rljob_checkpoint_step 100.0" in text and "rljob_policy_generation 7.0" in text
    assert "rljob_trainer_heartbeat_timestamp_seconds 1." in text
