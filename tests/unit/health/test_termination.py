"""Failure classification from container terminations, waiting reasons, disruption conditions
and nodes; untrusted messages are bounded and sanitized; in-place restarts become findings."""

from __future__ import annotations

import pytest

from rljob.health import (
    ContainerTermination,
    CrashRepeatTracker,
    Evaluation,
    PodCondition,
    PodObservation,
    classify_disruption,
    classify_node,
    classify_pod,
    classify_termination,
    classify_waiting,
    sanitize_message,
)
from rljob.health.sanitize import MAX_MESSAGE_BYTES
from rljob.health.termination import RestartPolicy
from rljob.vocabulary.enums import FailureReason

R = FailureReason

WATCHDOG = (
    "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, "
    "NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
)
TORCHRUN_SUMMARY = """============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-08-13_08:21:19
  host      : trainer-a3-1
  rank      : 6 (local_rank: 6)
  exitcode  : -6 (pid: 1246013)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 1246013
============================================================
rljob: root cause rank 6 NCCL: ProcessGroupNCCL abort"""

NCCL_CASES = [
    pytest.param(1, "Error", WATCHDOG, id="watchdog-collective-timeout"),
    pytest.param(1, "Error", "NCCL communicator was aborted on rank 3.", id="communicator-aborted"),
    pytest.param(
        134,
        "Error",
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress",
        id="watchdog-got-stuck",
    ),
    pytest.param(
        1,
        "Error",
        "[Rank 6] Some NCCL operations have failed or timed out. Due to the asynchronous nature",
        id="some-operations-timed-out",
    ),
    pytest.param(
        1,
        "Error",
        "[PG ID 1 PG GUID 1 Rank 1]  failure detected by watchdog at work sequence id: 1",
        id="failure-detected-by-watchdog",
    ),
    pytest.param(
        1,
        "Error",
        "NCCL watchdog thread terminated with exception: NCCL error: remote process exited "
        "or there was a network error, NCCL version 2.19.3",
        id="remote-process-exited",
    ),
    pytest.param(
        134,
        "Error",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        id="dist-backend-error",
    ),
    pytest.param(1, "Error", TORCHRUN_SUMMARY, id="torchrun-exit-1-child-sigabrt-nccl"),
    pytest.param(
        134, "Error", "Fatal: SIGABRT in NCCL all_reduce", id="sigabrt-as-pid-1-mentioning-nccl"
    ),
    pytest.param(
        1,
        "Error",
        "ProcessGroupNCCL.cpp:1695] [PG 0 Rank 2] Timeout at NCCL work: 4421",
        id="processgroupnccl-timeout",
    ),
]


@pytest.mark.parametrize(("exit_code", "reason", "message"), NCCL_CASES)
def test_nccl_failures_are_classified(exit_code: int, reason: str, message: str) -> None:
    termination = ContainerTermination(exit_code, reason, message, container="trainer")

    classified = classify_termination(termination, "Never")

    assert classified is not None
    assert classified.reason == R.NCCL_TIMEOUT
    assert classified.message.startswith(f"container trainer exit {exit_code} ({reason}): ")


CONTAINER_CASES = [
    pytest.param(ContainerTermination(137, "OOMKilled"), "Never", R.OOM_KILLED, id="oom-killed"),
    pytest.param(
        ContainerTermination(137, "Error", "Memory cgroup out of memory: Killed process 12"),
        "Never",
        R.OOM_KILLED,
        id="exit-137-with-oom-text",
    ),
    pytest.param(
        ContainerTermination(137, "Error", "Killed"), "Never", R.CONTAINER_FAILED, id="sigkill"
    ),
    pytest.param(
        ContainerTermination(1, "Error", TORCHRUN_SUMMARY.replace("NCCL", "GLOO")),
        "Never",
        R.CONTAINER_FAILED,
        id="torchrun-sigabrt-without-nccl",
    ),
    pytest.param(
        ContainerTermination(1, "Error", "ValueError: bad config"),
        "Never",
        R.CONTAINER_FAILED,
        id="python-error",
    ),
    pytest.param(
        ContainerTermination(93, "Error", "no progress"),
        "Never",
        R.CONTAINER_FAILED,
        id="nvrx-do-not-requeue",
    ),
    pytest.param(
        ContainerTermination(1, "Error", "engine died"), "Always", R.CRASH_LOOP, id="server-crash"
    ),
    pytest.param(
        ContainerTermination(1, "Error", "Traceback (most recent call last):\nKeyError: 'model'"),
        "Always",
        R.CRASH_LOOP,
        id="server-exception-crash-loops",
    ),
    pytest.param(
        ContainerTermination(1, "Error", "torch.OutOfMemoryError: CUDA out of memory."),
        "Always",
        R.CUDA_OUT_OF_MEMORY,
        id="server-cuda-oom-is-specific",
    ),
    pytest.param(
        ContainerTermination(0, "Completed"), "Always", R.CRASH_LOOP, id="server-exited-zero"
    ),
    pytest.param(
        ContainerTermination(3, "Error", "WorldSizeMismatch: v000000000020-a000001 was saved by 2"),
        "Never",
        R.CONFIG_ERROR,
        id="resume-refused-for-another-node-count",
    ),
    pytest.param(ContainerTermination(0, "Completed"), "Never", None, id="job-pod-succeeded"),
    pytest.param(
        ContainerTermination(0, "Completed"), "OnFailure", None, id="on-failure-succeeded"
    ),
]


@pytest.mark.parametrize(("termination", "policy", "expected"), CONTAINER_CASES)
def test_container_terminations_are_classified(
    termination: ContainerTermination, policy: RestartPolicy, expected: FailureReason | None
) -> None:
    classified = classify_termination(termination, policy)

    assert (classified.reason if classified else None) == expected


WAITING_CASES = [
    ("ErrImagePull", R.IMAGE_PULL_FAILED),
    ("ImagePullBackOff", R.IMAGE_PULL_FAILED),
    ("InvalidImageName", R.CONFIG_ERROR),
    ("CreateContainerConfigError", R.CONFIG_ERROR),
    ("CrashLoopBackOff", R.CRASH_LOOP),
    ("ContainerCreating", None),
    (None, None),
]


@pytest.mark.parametrize(("reason", "expected"), WAITING_CASES, ids=str)
def test_waiting_reasons_are_classified(reason: str | None, expected: FailureReason | None) -> None:
    classified = classify_waiting(reason, 'secret "s3" not found')

    assert (classified.reason if classified else None) == expected


def disruption(reason: str) -> PodCondition:
    return PodCondition("DisruptionTarget", "True", reason, "preempted by pod x")


DISRUPTION_CASES = [
    ("PreemptionByScheduler", R.PREEMPTED),
    ("PreemptionByKubeScheduler", R.PREEMPTED),
    ("TerminationByKubelet", R.EVICTED),
    ("EvictionByEvictionAPI", R.EVICTED),
    ("DeletionByTaintManager", R.NODE_LOST),
    ("DeletionByPodGC", R.NODE_LOST),
    ("SomethingNew", R.EVICTED),
]


@pytest.mark.parametrize(("reason", "expected"), DISRUPTION_CASES, ids=str)
def test_disruption_targets_are_infrastructure(reason: str, expected: FailureReason) -> None:
    classified = classify_disruption([PodCondition("Ready", "False"), disruption(reason)])

    assert classified is not None
    assert classified.reason == expected
    assert classified.message.startswith(reason)


def test_a_false_disruption_condition_is_nothing() -> None:
    assert classify_disruption([PodCondition("DisruptionTarget", "False", "x")]) is None


def test_an_evicted_pod_reason_is_infrastructure() -> None:
    classified = classify_disruption([], "Evicted", "The node was low on resource: memory.")

    assert classified is not None
    assert classified.reason == R.EVICTED


def test_a_node_that_stopped_reporting_is_lost() -> None:
    lost = classify_node("gpu-3", "Unknown")

    assert lost is not None
    assert lost.reason == R.NODE_LOST
    assert classify_node("gpu-3", "True") is None


POD_CASES = [
    pytest.param(
        PodObservation(
            "trainer-a1-0",
            "Never",
            conditions=(disruption("PreemptionByScheduler"),),
            terminated=(ContainerTermination(137, "Error"),),
        ),
        R.PREEMPTED,
        id="preemption-explains-the-sigkill",
    ),
    pytest.param(
        PodObservation(
            "trainer-a1-0",
            "Never",
            node="gpu-1",
            node_ready="Unknown",
            terminated=(ContainerTermination(1, "Error", WATCHDOG),),
        ),
        R.NODE_LOST,
        id="lost-node-explains-the-nccl-timeout",
    ),
    pytest.param(
        PodObservation(
            "trainer-a1-0",
            "Never",
            terminated=(
                ContainerTermination(1, "Error", "sidecar failed", container="log"),
                ContainerTermination(1, "Error", WATCHDOG, container="trainer"),
            ),
        ),
        R.NCCL_TIMEOUT,
        id="most-specific-container-wins",
    ),
    pytest.param(
        PodObservation("rollout-0", waiting_reasons=(("ImagePullBackOff", "not found"),)),
        R.IMAGE_PULL_FAILED,
        id="image-pull",
    ),
    pytest.param(
        PodObservation("rollout-0", waiting_reasons=(("CrashLoopBackOff", "back-off 5m"),)),
        R.CRASH_LOOP,
        id="crash-loop",
    ),
    pytest.param(PodObservation("rollout-0"), None, id="nothing-failed"),
]


@pytest.mark.parametrize(("pod", "expected"), POD_CASES)
def test_pods_are_classified_most_specific_first(
    pod: PodObservation, expected: FailureReason | None
) -> None:
    classified = classify_pod(pod)

    assert (classified.reason if classified else None) == expected


SANITIZE_CASES = [
    ("plain message", "plain message"),
    ("line one\nline two\r\n\tthree", "line one line two three"),
    ("bell\x07 escape\x1b[31m red", "bell escape[31m red"),
    ("bidi \u202eevil\u202c text", "bidi evil text"),
    ("zero\u200bwidth", "zerowidth"),
    ("", ""),
    (None, ""),
]


@pytest.mark.parametrize(("raw", "clean"), SANITIZE_CASES, ids=lambda v: repr(v)[:20])
def test_messages_are_sanitized(raw: str | None, clean: str) -> None:
    assert sanitize_message(raw) == clean


def test_messages_are_bounded_to_their_last_4_kib() -> None:
    raw = "x" * 10_000 + "é" * 3_000 + "THE END"

    clean = sanitize_message(raw)

    assert len(clean.encode()) <= MAX_MESSAGE_BYTES
    assert clean.endswith("THE END")


def test_a_huge_message_is_classified_from_its_end() -> None:
    termination = ContainerTermination(1, "Error", "noise\n" * 100_000 + WATCHDOG)

    classified = classify_termination(termination)

    assert classified is not None
    assert classified.reason == R.NCCL_TIMEOUT
    assert len(classified.message) <= 1024


def restarted(
    tracker: CrashRepeatTracker, count: int, now: float, reason: str = "OOMKilled"
) -> Evaluation:
    exit_code = 137 if reason == "OOMKilled" else 1
    return tracker.observe("rollout-2", "vllm", count, ContainerTermination(exit_code, reason), now)


def test_in_place_oom_kills_act_after_two_within_ten_minutes() -> None:
    tracker = CrashRepeatTracker()

    assert restarted(tracker, 0, 0).outcome == "healthy"
    assert restarted(tracker, 1, 60).outcome == "healthy"
    evaluation = restarted(tracker, 2, 300)

    assert evaluation.outcome == "finding"
    assert evaluation.reason == R.OOM_KILLED
    assert evaluation.message.startswith("rollout-2 container vllm restarted 2 times within 10m")
    assert restarted(tracker, 2, 330).outcome == "healthy"


def test_restarts_far_apart_do_not_act() -> None:
    tracker = CrashRepeatTracker()
    restarted(tracker, 0, 0)
    restarted(tracker, 1, 60)

    assert restarted(tracker, 2, 60 + 601).outcome == "healthy"


def test_several_restarts_between_observations_count_and_non_oom_is_crash_loop() -> None:
    tracker = CrashRepeatTracker()
    restarted(tracker, 4, 0, "Error")

    evaluation = restarted(tracker, 6, 30, "Error")

    assert evaluation.reason == R.CRASH_LOOP


def test_restarts_before_the_first_observation_are_a_baseline() -> None:
    tracker = CrashRepeatTracker()

    assert restarted(tracker, 17, 0).outcome == "healthy"


@pytest.mark.parametrize(
    ("recorded", "seen", "outcome"),
    [
        pytest.param(0, 2, "finding", id="two-crashes-while-no-operator-watched"),
        pytest.param(1, 2, "healthy", id="one-crash-since-the-record"),
        pytest.param(2, 2, "healthy", id="none-since-the-record"),
        pytest.param(3, 1, "healthy", id="a-new-incarnation-below-the-record"),
    ],
)
def test_a_recorded_count_is_the_baseline_of_a_first_observation(
    recorded: int, seen: int, outcome: str
) -> None:
    tracker = CrashRepeatTracker()
    termination = ContainerTermination(137, "OOMKilled")

    evaluation = tracker.observe("rollout-2", "vllm", seen, termination, 0, recorded=recorded)

    assert evaluation.outcome == outcome
    # once observed, the tracker's own count rules: the record is read only first
    assert tracker.observe("rollout-2", "vllm", seen, termination, 5, recorded=0).outcome == (
        "healthy"
    )


def test_a_new_pod_incarnation_resets_the_count() -> None:
    tracker = CrashRepeatTracker()
    restarted(tracker, 5, 0)

    assert restarted(tracker, 1, 10).outcome == "healthy"
    tracker.retain(set())
    assert restarted(tracker, 2, 20).outcome == "healthy"
