"""What the operator keeps of its children's watch events: a failing Job already at
FailureTarget, a rolled Deployment's restart annotation, a pod's disruption and termination time."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from rljob.adapters.observe import summarize_child, summarize_pod

META = {"name": "x", "uid": "u", "namespace": "rl", "labels": {"rljob.io/role": "trainer"}}


def job(*conditions: dict[str, str]) -> dict[str, Any]:
    return {"kind": "Job", "metadata": META, "spec": {}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("body", "failed", "message"),
    [
        pytest.param(job(), False, "", id="running"),
        pytest.param(
            job({"type": "FailureTarget", "status": "True", "message": "rank 0 failed"}),
            True,
            "rank 0 failed",
            id="failure-target-before-every-pod-ended",
        ),
        pytest.param(
            job({"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}),
            True,
            "BackoffLimitExceeded",
            id="failed",
        ),
    ],
)
def test_a_job_fails_as_soon_as_it_is_a_failure_target(
    body: dict[str, Any], failed: bool, message: str
) -> None:
    child = summarize_child(body)
    assert (child.failed, child.failed_message) == (failed, message)


def test_a_deployments_restart_annotation_is_kept() -> None:
    template = {"metadata": {"annotations": {"rljob.io/restarted-at": "role-rollout-3"}}}
    body = {"kind": "Deployment", "metadata": META, "spec": {"replicas": 2, "template": template}}
    assert summarize_child(body).restarted_at == "role-rollout-3"


@pytest.mark.parametrize(
    ("conditions", "disruption"),
    [
        pytest.param([], "", id="none"),
        pytest.param(
            [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
            "PreemptionByScheduler",
            id="preempted",
        ),
        pytest.param(
            [{"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler"}],
            "",
            id="not-true",
        ),
    ],
)
def test_a_pods_disruption(conditions: list[dict[str, str]], disruption: str) -> None:
    body = {"metadata": META, "spec": {}, "status": {"phase": "Running", "conditions": conditions}}
    assert summarize_pod(body).disruption == disruption


def _terminated(code: int, finished: str) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": finished}}


@pytest.mark.parametrize(
    ("containers", "exit_code", "finished_at"),
    [
        pytest.param([], None, None, id="not-terminated"),
        pytest.param(
            [{"state": _terminated(1, "2026-03-01T12:00:05Z")}],
            1,
            dt.datetime(2026, 3, 1, 12, 0, 5, tzinfo=dt.UTC),
            id="state",
        ),
        pytest.param(
            [{"state": {"running": {}}, "lastState": _terminated(137, "2026-03-01T11:59:00Z")}],
            137,
            dt.datetime(2026, 3, 1, 11, 59, tzinfo=dt.UTC),
            id="last-state",
        ),
    ],
)
def test_a_pods_termination_time(
    containers: list[dict[str, Any]], exit_code: int | None, finished_at: dt.datetime | None
) -> None:
    status = {"phase": "Failed", "containerStatuses": containers}
    observed = summarize_pod({"metadata": META, "spec": {}, "status": status})
    assert (observed.exit_code, observed.finished_at) == (exit_code, finished_at)


@pytest.mark.parametrize(
    ("conditions", "current"),
    [
        pytest.param([], False, id="no-gate-condition"),
        pytest.param([{"type": "rljob.io/policy-current", "status": "False"}], False, id="false"),
        pytest.param([{"type": "rljob.io/policy-current", "status": "True"}], True, id="true"),
        pytest.param([{"type": "Ready", "status": "True"}], False, id="ready-is-not-the-gate"),
    ],
)
def test_a_pods_policy_current_gate(conditions: list[dict[str, str]], current: bool) -> None:
    body = {"metadata": META, "spec": {}, "status": {"conditions": conditions}}
    assert summarize_pod(body).policy_current is current


RUNNING = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
CRASH_LOOP = {"waiting": {"reason": "CrashLoopBackOff"}}


@pytest.mark.parametrize(
    ("states", "running"),
    [
        pytest.param([], False, id="no-container-started"),
        pytest.param([RUNNING], True, id="running"),
        pytest.param([CRASH_LOOP], False, id="crash-loop"),
        pytest.param([{"terminated": {"exitCode": 1}}], False, id="terminated"),
        pytest.param([CRASH_LOOP, RUNNING], True, id="unnamed-one-of-two-running"),
        pytest.param([{"running": {}}], True, id="running-without-a-start-time"),
    ],
)
def test_a_pods_container_running(states: list[dict[str, Any]], running: bool) -> None:
    status = {"containerStatuses": [{"name": f"c{i}", "state": s} for i, s in enumerate(states)]}
    assert (
        summarize_pod({"metadata": META, "spec": {}, "status": status}).container_running is running
    )


@pytest.mark.parametrize(
    ("engine", "sidecar", "running"),
    [
        pytest.param(CRASH_LOOP, RUNNING, False, id="crash-looping-engine-beside-a-sidecar"),
        pytest.param(RUNNING, CRASH_LOOP, True, id="running-engine-beside-a-failing-sidecar"),
    ],
)
def test_a_rollout_pod_is_judged_by_its_engine_container(
    engine: dict[str, Any], sidecar: dict[str, Any], running: bool
) -> None:
    meta = {**META, "labels": {"rljob.io/role": "rollout"}}
    containers = [{"name": "istio-proxy", "state": sidecar}, {"name": "rollout", "state": engine}]
    body = {"metadata": meta, "spec": {}, "status": {"containerStatuses": containers}}
    assert summarize_pod(body).container_running is running


RESTARTED = {"running": {"startedAt": "2026-01-01T00:05:00Z"}}


@pytest.mark.parametrize(
    ("states", "started"),
    [
        pytest.param([RUNNING], "2026-01-01T00:00:00+00:00", id="its-start"),
        pytest.param([RUNNING, RESTARTED], "2026-01-01T00:05:00+00:00", id="the-latest-start"),
        pytest.param([CRASH_LOOP], None, id="none-while-not-running"),
        pytest.param([{"running": {}}], None, id="none-without-a-start-time"),
    ],
)
def test_a_pods_container_start(states: list[dict[str, Any]], started: str | None) -> None:
    """When the main container last (re)started: a reading before it describes a process gone."""
    status = {"containerStatuses": [{"name": f"c{i}", "state": s} for i, s in enumerate(states)]}
    pod = summarize_pod({"metadata": META, "spec": {}, "status": status})
    assert (pod.started_at.isoformat() if pod.started_at else None) == started
