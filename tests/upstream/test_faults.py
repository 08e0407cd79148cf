"""Trainer failure evidence from real torchrun: 2 nodes x 2 gloo processes on loopback, started
as the operator renders the trainer Job (tests/upstream/torchrun_bed.py), one fault per case on
one rank. What Kubernetes would show for each pod (the wrapper's termination log, or the
kubelet's FallbackToLogsOnError tail when there is none) goes through the classifier: the
faulty rank's pod gives the reason, the rank and its exit status as a primary failure; the other
pod only waited for it (a gloo timeout or a closed connection), which is never a root cause."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from rljob.health import Classification, PodObservation, classify_pod
from rljob.sdk.evidence import SUMMARY_LIMIT
from rljob.vocabulary.enums import FailureReason
from tests.upstream.torchrun_bed import PROCS_PER_NODE, NodeRun, run_trainer

R = FailureReason
# torchrun's own exit status when a worker failed, whatever the worker's.
TORCHRUN_FAILED = 1
# A rank that raises exits 1, or, when its live gloo group's threads are torn down at exit,
# aborts (std::terminate: SIGABRT, 134) after torch's `record` wrote its error file: both seen.
RAISED = (1, 134)
# torchrun's agent json.loads a failed worker's error file as soon as it exists
# (torch 2.15.0, torch/distributed/elastic/multiprocessing/errors/__init__.py,
# ProcessFailure.__post_init__); a node-mate's `record` may still be writing it, and torchrun
# then dies of the JSONDecodeError without naming any rank (seen twice in about 30 runs of a
# rank that os._exits). Its pod can only be a primary failure of no known rank.
TORCHRUN_READ_RACE = "json.decoder.JSONDecodeError"


@dataclass(frozen=True)
class Fault:
    """One fault on one rank and what the faulty pod must classify as."""

    kind: str
    rank: int
    reason: FailureReason
    exit_codes: tuple[int, ...]

    @property
    def node(self) -> int:
        return self.rank // PROCS_PER_NODE


FAULTS = [
    pytest.param(Fault("raise", 2, R.CONTAINER_FAILED, RAISED), id="rank-raises"),
    pytest.param(Fault("sigkill", 3, R.CONTAINER_FAILED, (137,)), id="rank-sigkilled"),
    pytest.param(Fault("segfault", 1, R.CONTAINER_FAILED, (139,)), id="rank-segfaults"),
    pytest.param(Fault("exit93", 2, R.CONTAINER_FAILED, (93,)), id="rank-exits-93"),
    pytest.param(Fault("memoryerror", 3, R.OOM_KILLED, RAISED), id="rank-raises-memoryerror"),
]


def classify(run: NodeRun) -> Classification:
    pod = PodObservation(f"trainer-a1-{run.node_rank}", "Never", terminated=(run.termination(),))
    classified = classify_pod(pod)
    assert classified is not None, run.log[-3000:]
    return classified


def evidence(runs: list[NodeRun]) -> str:
    return "\n".join(f"== node {r.node_rank} exit {r.exit_code}\n{r.message()}" for r in runs)


def assert_waiting(run: NodeRun, classified: Classification) -> None:
    """A pod whose ranks only lost or timed out on a peer."""
    assert classified.reason == R.NCCL_TIMEOUT, run.message()
    assert not classified.primary, run.message()
    assert classified.rank in node_ranks(run.node_rank), run.message()


def node_ranks(node: int) -> range:
    return range(node * PROCS_PER_NODE, (node + 1) * PROCS_PER_NODE)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_rank_fault_is_classified_on_its_pod_and_the_peers_only_waited(
    torch_venv: Path, tmp_path: Path, fault: Fault
) -> None:
    runs = run_trainer(torch_venv, tmp_path, {"FAULT": fault.kind, "FAULT_RANK": str(fault.rank)})

    for run in runs:
        assert run.exit_code == TORCHRUN_FAILED, run.log[-3000:]
        assert 0 < len(run.termination_log.encode()) <= SUMMARY_LIMIT, run.log[-3000:]
    classified = [classify(run) for run in runs]
    faulty = classified[fault.node]
    if TORCHRUN_READ_RACE in runs[fault.node].termination_log:
        assert (faulty.reason, faulty.rank, faulty.primary) == (R.CONTAINER_FAILED, None, True), (
            evidence(runs)
        )
    else:
        assert (faulty.reason, faulty.rank, faulty.primary) == (fault.reason, fault.rank, True), (
            evidence(runs)
        )
        assert faulty.exit_code in fault.exit_codes, evidence(runs)
    (peer,) = [run for run in runs if run.node_rank != fault.node]
    assert_waiting(peer, classified[peer.node_rank])


def test_a_rank_that_hangs_leaves_only_timeouts(torch_venv: Path, tmp_path: Path) -> None:
    """The hung rank prints nothing and torchrun stops it (SIGTERM) once its node-mate timed
    out: every pod shows a gloo timeout, none a primary failure; the operator then picks by
    termination time across pods."""
    runs = run_trainer(torch_venv, tmp_path, {"FAULT": "hang", "FAULT_RANK": "3"})

    for run in runs:
        assert run.exit_code == TORCHRUN_FAILED, run.log[-3000:]
        assert "Timed out waiting" in run.termination_log, run.termination_log
        assert_waiting(run, classify(run))


def test_a_container_oom_killed_by_the_kubelet_is_classified_from_its_reason(
    torch_venv: Path, tmp_path: Path
) -> None:
    """cgroup v2 kills the whole container, wrapper included: no termination log, so the
    message is the log's tail, and the pod's OOMKilled reason alone decides."""
    runs = run_trainer(
        torch_venv,
        tmp_path,
        {"FAULT": "hang", "FAULT_RANK": "3", "GLOO_TIMEOUT_SECONDS": "30"},
        oom_kill_node=1,
        oom_kill_after="rank 3 step 2",
    )

    killed, survivor = runs[1], runs[0]
    assert (killed.exit_code, killed.termination_log) == (137, "")
    assert killed.message().endswith(fallback_end(killed.log))
    classified = classify(killed)
    assert (classified.reason, classified.exit_code, classified.primary) == (
        R.OOM_KILLED,
        137,
        True,
    )
    assert_waiting(survivor, classify(survivor))


def fallback_end(log: str) -> str:
    return log.splitlines(keepends=True)[-1]
