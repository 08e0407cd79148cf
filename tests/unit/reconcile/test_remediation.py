"""Remediation (pure): which failed rank explains an attempt, serving restarts and role rolls
journaled before their side effects, when a journal settles, stuck pods after teardownTimeout,
disrupted serving pods, and the Restarting condition."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from rljob.api import (
    ActionKind,
    ActionPod,
    ActionTarget,
    FailureAction,
    FailureReason,
    InFlightAction,
    RLJob,
    RoleName,
    parse_rljob,
)
from rljob.reconcile import Observed, ObservedChild, reconcile
from rljob.reconcile.journal import journaled_event, roles_to_roll, settle_journal
from rljob.reconcile.policy import Decision
from rljob.reconcile.remediation import (
    failed_attempt,
    held_by_action,
    remedy_for,
    stuck_pods,
    trainer_failure,
)
from rljob.reconcile.serving import disrupted_serving_pods, journal_serving_restart
from tests.unit.reconcile.world import T0, example_body, example_job, pod

NAME = "grpo-demo"  # examples/rljob-demo.yaml
SECOND = dt.timedelta(seconds=1)
# PyTorch's ProcessGroupNCCL watchdog, as reference/workload-signals.md section 3.2 quotes it.
WATCHDOG = (
    "[rank0]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
)
# The heartbeat monitor ending a rank whose own watchdog hung (rljob/signatures.py): primary.
STUCK = "[rank1]:[E ProcessGroupNCCL.cpp:1423] ProcessGroupNCCL's watchdog got stuck for 480s"
TRAINER_JOB = ObservedChild(
    "Job", f"{NAME}-trainer-a1", "job-a1", "trainer", "h", 1, replicas=2, failed=True
)


def decision(action: FailureAction, delay: float = 0.0) -> Decision:
    return Decision(
        action, FailureReason.OOM_KILLED, RoleName.ROLLOUT, "p", True, delay, f"{action} now"
    )


def with_in_flight(job: RLJob, **fields: Any) -> RLJob:
    action = InFlightAction(**{"id": "a1", "step": "Journaled", "started_at": T0, **fields})
    return job.model_copy(update={"status": job.status.model_copy(update={"in_flight": action})})


@pytest.mark.parametrize(
    ("ranks", "root", "reason"),
    [
        pytest.param(
            [("t-0", {"exit_code": 1, "message": "boom"}), ("t-1", {"exit_code": 1})],
            "t-0",
            FailureReason.CONTAINER_FAILED,
            id="lowest-failed-rank",
        ),
        pytest.param(
            [
                ("t-0", {"exit_code": 1}),
                ("t-1", {"disruption": "DeletionByTaintManager", "phase": "Running"}),
            ],
            "t-1",
            FailureReason.NODE_LOST,
            id="a-disrupted-rank-explains-the-others",
        ),
        pytest.param(
            [("t-1", {"disruption": "PreemptionByScheduler", "exit_code": 137})],
            "t-1",
            FailureReason.PREEMPTED,
            id="preempted-rank",
        ),
        pytest.param(
            [
                ("t-0", {"exit_code": 1, "finished_at": T0 + SECOND}),
                ("t-3", {"exit_code": 1, "finished_at": T0}),
            ],
            "t-3",
            FailureReason.CONTAINER_FAILED,
            id="first-observed-failure-not-lowest-index",
        ),
        pytest.param(
            [
                ("t-2", {"exit_code": 1, "finished_at": T0}),
                ("t-1", {"exit_code": 1, "finished_at": T0}),
            ],
            "t-1",
            FailureReason.CONTAINER_FAILED,
            id="same-second-lowest-index",
        ),
        pytest.param(
            [
                ("t-0", {"exit_code": 1, "message": WATCHDOG, "finished_at": T0}),
                ("t-1", {"exit_code": 1, "message": WATCHDOG, "finished_at": T0}),
                (
                    "t-2",
                    {
                        "exit_code": 1,
                        "message": "ValueError: bad batch",
                        "finished_at": T0 + SECOND,
                    },
                ),
            ],
            "t-2",
            FailureReason.CONTAINER_FAILED,
            id="user-error-behind-watchdog-timeouts",
        ),
        pytest.param(
            [
                ("t-0", {"exit_code": 1, "message": WATCHDOG, "finished_at": T0 + SECOND}),
                ("t-3", {"exit_code": 1, "message": WATCHDOG, "finished_at": T0}),
            ],
            "t-3",
            FailureReason.NCCL_TIMEOUT,
            id="only-timeouts-the-first-one",
        ),
        pytest.param(
            [
                ("t-0", {"exit_code": 1, "message": WATCHDOG, "finished_at": T0}),
                ("t-1", {"exit_code": 134, "message": STUCK, "finished_at": T0 + SECOND}),
            ],
            "t-1",
            FailureReason.NCCL_TIMEOUT,
            id="a-rank-whose-own-watchdog-hung-is-primary",
        ),
        pytest.param(
            [
                ("t-0", {"exit_code": 143, "deleting": True, "finished_at": T0}),
                ("t-1", {"exit_code": 1, "message": WATCHDOG, "finished_at": T0 + SECOND}),
            ],
            "t-1",
            FailureReason.NCCL_TIMEOUT,
            id="a-rank-the-job-controller-killed-is-a-victim",
        ),
        pytest.param(
            [
                ("t-0", {"exit_code": 1, "finished_at": T0 + SECOND}),
                ("t-1", {"exit_code": 1}),
            ],
            "t-0",
            FailureReason.CONTAINER_FAILED,
            id="unknown-finish-time-last",
        ),
    ],
)
def test_the_root_cause_rank(
    ranks: list[tuple[str, dict[str, Any]]], root: str, reason: FailureReason
) -> None:
    pods = tuple(
        pod(
            name,
            "trainer",
            attempt=1,
            completion_index=int(name[-1]),
            **{"phase": "Failed", **fields},
        )
        for name, fields in ranks
    )
    found = failed_attempt(example_job(), Observed((TRAINER_JOB,), pods))
    assert found is not None and found[1] is not None
    assert found[1].name == root
    assert trainer_failure(*found).reason == reason


@pytest.mark.parametrize(
    ("action", "role", "delay", "kind", "event"),
    [
        pytest.param(
            FailureAction.RESTART_POD,
            "rollout",
            0,
            ActionKind.RESTART_POD,
            "PodRestarted",
            id="pod",
        ),
        pytest.param(
            FailureAction.RESTART_ROLE,
            "verifier",
            0,
            ActionKind.RESTART_ROLE,
            "RoleRestarted",
            id="role",
        ),
        pytest.param(FailureAction.RESTART_POD, "rollout", 30, None, None, id="backoff-waits"),
        pytest.param(FailureAction.REPORT, "rollout", 0, None, None, id="report-only"),
        pytest.param(FailureAction.RESTART_POD, "trainer", 0, None, None, id="not-serving"),
    ],
)
def test_serving_restarts_are_journaled_and_counted(
    action: FailureAction, role: str, delay: float, kind: ActionKind | None, event: str | None
) -> None:
    job = example_job()
    result = journal_serving_restart(job, decision(action, delay), pod("p", role), T0)
    if kind is None:
        assert result is None
        return
    assert result is not None
    status = result
    assert status.in_flight is not None and status.in_flight.kind == kind
    assert status.restarts is not None and status.restarts.total == 1
    posted = journaled_event(status)
    assert posted is not None
    assert (posted[0], posted[1].reason) == (status.in_flight.id, event)
    assert posted[1].message == f"{action} now"


def test_a_role_roll_targets_its_deployment_and_settles_once_rolled() -> None:
    job = example_job()
    status = journal_serving_restart(
        job, decision(FailureAction.RESTART_ROLE), pod("v", "verifier"), T0
    )
    assert status is not None
    assert roles_to_roll(status, Observed(())) == [(f"{NAME}-verifier", "role-verifier-1")]

    def deployment(restarted_at: str, updated: int, observed_generation: int = 2) -> Observed:
        child = ObservedChild(
            "Deployment", f"{NAME}-verifier", "d", "verifier", "h", None,
            replicas=2, ready_replicas=2, updated_replicas=updated, restarted_at=restarted_at,
            generation=2, observed_generation=observed_generation,
        )  # fmt: skip
        return Observed((child,))

    assert settle_journal(status, deployment("", 2)).in_flight is not None
    assert settle_journal(status, deployment("role-verifier-1", 1)).in_flight
    # The first watch event after the patch still carries the previous template's status.
    stale = deployment("role-verifier-1", 2, observed_generation=1)
    assert settle_journal(status, stale).in_flight is not None
    assert settle_journal(status, deployment("role-verifier-1", 2)).in_flight is None


@pytest.mark.parametrize(
    ("elapsed", "pods", "stuck"),
    [
        pytest.param(dt.timedelta(minutes=9), [("old", 1, True)], [], id="before-timeout"),
        pytest.param(dt.timedelta(minutes=10), [("old", 1, True)], ["old"], id="at-timeout"),
        pytest.param(
            dt.timedelta(hours=1),
            [("old", 1, True), ("live", 1, False), ("new", 2, True)],
            ["old"],
            id="only-older-attempts-terminating",
        ),
    ],
)
def test_stuck_pods_after_the_teardown_timeout(
    elapsed: dt.timedelta, pods: list[tuple[str, int, bool]], stuck: list[str]
) -> None:
    job = example_job(failurePolicy={"teardownTimeout": "10m"})
    job = with_in_flight(job, kind=ActionKind.RESTART_TRAINER_GANG)
    job = job.model_copy(update={"status": job.status.model_copy(update={"attempt": 2})})
    observed = Observed(pods=tuple(pod(n, "trainer", attempt=a, deleting=d) for n, a, d in pods))
    assert [p.name for p in stuck_pods(job, observed, T0 + elapsed)] == stuck


def test_no_stuck_pods_without_a_gang_restart_in_flight() -> None:
    observed = Observed(pods=(pod("old", "trainer", attempt=1, deleting=True),))
    assert stuck_pods(example_job(), observed, T0 + dt.timedelta(days=1)) == []


def test_disrupted_serving_pods_only() -> None:
    observed = Observed(
        pods=(
            pod("r", "rollout", disruption="PreemptionByScheduler"),
            pod("t", "trainer", disruption="PreemptionByScheduler"),
            pod("ok", "rollout"),
        )
    )
    assert [p.name for p in disrupted_serving_pods(observed)] == ["r"]


@pytest.mark.parametrize(
    ("in_flight", "status", "reason"),
    [
        pytest.param(None, "False", "NoRestart", id="idle"),
        pytest.param(
            {"kind": ActionKind.RESTART_TRAINER_GANG, "reason": FailureReason.NCCL_TIMEOUT},
            "True",
            "NCCLTimeout",
            id="gang-restart",
        ),
    ],
)
def test_the_restarting_condition(
    in_flight: dict[str, Any] | None, status: str, reason: str
) -> None:
    job = example_job() if in_flight is None else with_in_flight(example_job(), **in_flight)
    plan = reconcile(job, Observed(), T0)
    (condition,) = [c for c in plan.status.conditions or [] if c.type == "Restarting"]
    assert (condition.status, condition.reason) == (status, reason)


@pytest.mark.parametrize(
    ("fields", "suspects"),
    [
        pytest.param({"disruption": "DeletionByTaintManager"}, ["gpu-3"], id="node-lost"),
        pytest.param({"disruption": "PreemptionByScheduler"}, [], id="preempted"),
        pytest.param({"exit_code": 137, "reason": "OOMKilled"}, [], id="oom-killed"),
        pytest.param({"exit_code": 1, "message": WATCHDOG}, [], id="watchdog-timeout"),
    ],
)
def test_a_gang_restart_marks_the_root_cause_node_only_on_hardware_like_evidence(
    fields: dict[str, Any], suspects: list[str]
) -> None:
    rank = pod("t-0", "trainer", attempt=1, node="gpu-3", completion_index=0, phase="Failed")
    rank = dataclasses.replace(rank, **fields)
    job = example_job()
    found = failed_attempt(job, Observed((TRAINER_JOB,), (rank,)))
    assert found is not None
    remedy = remedy_for(job, *found, T0)
    assert remedy.status is not None, remedy.decision
    marked = remedy.status.suspect_nodes
    assert [s.name for s in marked] == suspects
    assert all(s.until == T0 + dt.timedelta(hours=6) for s in marked)


ENGINE = pod("e", "rollout", uid="uid-e")
DRAINING = [ActionPod(name="e", uid="uid-e", drain_started_at=T0)]
TAKEN = [ActionPod(name="e", uid="uid-e", drain_started_at=T0, deleted_at=T0)]
# The rollout Deployment as the roll of action "rolled" left it.
ROLLED = ObservedChild("Deployment", f"{NAME}-rollout", "uid-d", "rollout", "h", None,
                       restarted_at="rolled")  # fmt: skip
IN_TURN = ActionKind.RESTART_ROLE_IN_TURN
ROLLOUT, VERIFIER = RoleName.ROLLOUT, RoleName.VERIFIER


@pytest.mark.parametrize(
    ("gated", "kind", "role", "fields", "held"),
    [
        pytest.param(True, None, ROLLOUT, {}, None, id="nothing-in-flight"),
        pytest.param(True, IN_TURN, ROLLOUT, {"pods": DRAINING}, None,
                     id="a-gated-rollout-in-turn-restart-is-preempted"),
        pytest.param(False, IN_TURN, ROLLOUT, {"pods": DRAINING}, None,
                     id="an-ungated-one-is-preempted-too"),
        pytest.param(True, IN_TURN, VERIFIER, {"pods": DRAINING}, None,
                     id="a-verifier-one-is-preempted-too"),
        pytest.param(True, IN_TURN, ROLLOUT, {"pods": TAKEN}, "sent what it decided",
                     id="the-delete-of-a-pod-whose-turn-came-goes-first"),
        pytest.param(False, ActionKind.RESTART_ROLE, ROLLOUT, {}, "sent what it decided",
                     id="a-roll-not-seen-landed-goes-first"),
        pytest.param(False, ActionKind.RESTART_ROLE, ROLLOUT, {"id": "rolled"}, None,
                     id="a-roll-seen-landed-is-preempted"),
        pytest.param(True, IN_TURN, ROLLOUT, {"pods": DRAINING, "step": "RoleReady"}, "is done",
                     id="a-ready-role-settles-first"),
        pytest.param(True, ActionKind.RESTART_POD, ROLLOUT, {"pods": DRAINING}, "is done",
                     id="a-gated-pod-restart-ends-with-its-drain"),
    ],
)  # fmt: skip
def test_which_action_a_failed_attempt_waits_for(
    gated: bool, kind: ActionKind | None, role: RoleName, fields: dict[str, Any], held: str | None
) -> None:
    body = example_body()
    if gated:
        body["spec"]["roles"]["rollout"].update(weightSync="Gated", drainTimeout="2m")
    job = parse_rljob(body)
    if kind is not None:
        target = ActionTarget(role=role, name=f"{NAME}-{role.value}")
        job = with_in_flight(job, kind=kind, target=target, **fields)

    hold = held_by_action(job, Observed((ROLLED,), (ENGINE,)))

    assert (hold is None) == (held is None)
    assert hold is None or (held is not None and held in hold.message)
