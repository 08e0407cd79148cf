"""`python -m bench goodput --smoke` end to end (issue 33, items 2 and 3): the same simulated RL
job run three ways on a bed of its own (the operator with its defaults, the operator restarting
the whole role of every failure, a JobSet restarting everything), one failure of each class
injected into each at the same instants, effective training time measured from the simulator.

What must hold whatever the machine's speed: each arm ran its whole trace; the operator's
defaults lose no more training than the other two (within one healthy step over the run, the
measurement's resolution); the operator repaired the drifting engine alone, with no gang restart;
the JobSet restarted everything on the GPU failure. About 10 minutes."""

from __future__ import annotations

import pytest
from bench.goodput.arms import Arm
from bench.goodput.measure import GANG, JOB_RESTART, JOBSET_RESTART, POD, FailureResult
from bench.goodput.report import render, summary_lines
from bench.goodput.run import smoke_report
from bench.goodput.trace import FailureClass

from rljob.dev.binaries import bin_dir

# goodput_bench: a bed of its own (JobSet's cluster-scoped webhooks on it), run beside the lanes.
pytestmark = [pytest.mark.integration, pytest.mark.goodput_bench, pytest.mark.timeout(1500)]


def _failure(failures: list[FailureResult], failure_class: FailureClass) -> FailureResult:
    return next(f for f in failures if f.event.failure_class is failure_class)


def test_the_operator_keeps_more_training_than_restarting_everything_or_a_jobset() -> None:
    bin_dir()  # the bed's binaries, JobSet's included, or a clear error
    report = smoke_report()
    page = render(report)
    said = "\n".join(summary_lines(report)) + "\n\n" + page
    print("\n" + said)  # the smoke's figures (pytest -s)
    arms = report.results.arms
    assert set(arms) == {Arm.OPERATOR_DEFAULTS, Arm.RESTART_EVERYTHING, Arm.JOBSET}, said

    for arm, result in arms.items():
        ran = [f for f in result.failures if not f.skipped]
        assert {f.event.failure_class for f in ran} == set(FailureClass), (arm, said)
        assert result.steps > 0, (arm, said)

    operator = arms[Arm.OPERATOR_DEFAULTS]
    resolution = report.results.healthy_step_s / operator.wall_s
    for other in (Arm.RESTART_EVERYTHING, Arm.JOBSET):
        assert operator.ett >= arms[other].ett - resolution, (other, said)

    drift = _failure(operator.failures, FailureClass.ENGINE_DRIFT)
    assert drift.action == POD and drift.without_gang, said
    # Restart-everything restarts the whole job for a slow verifier (a drift may be repaired by
    # an earlier failure's restart before its detector's window ends).
    verifier = _failure(arms[Arm.RESTART_EVERYTHING].failures, FailureClass.SLOW_VERIFIER)
    assert verifier.action == JOB_RESTART and verifier.recomputed > 0, said

    gpu = _failure(arms[Arm.JOBSET].failures, FailureClass.GPU_HARDWARE)
    assert gpu.action == JOBSET_RESTART and gpu.detect_s is not None, said
    assert _failure(operator.failures, FailureClass.GPU_HARDWARE).action == GANG, said
