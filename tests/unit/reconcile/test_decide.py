"""decide(): one pass's whole decision. Each test here is a defect the action engine had when the
decision was spread over the runtime: actions interacting wrongly, each tested alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rljob.api import ActionKind, FailureReason, JobPhase
from rljob.health.evaluation import finding
from rljob.reconcile.decide import Decision, PassInputs, decide
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.steps import DeleteObject, PostEvent, RollDeployment
from tests.unit.reconcile.world import World, example_body, pod

NCCL = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)"


def running_world(**spec: Any) -> World:
    body = example_body()
    body["spec"].update(spec)
    w = World(body)
    w.settle()
    w.ready()
    w.settle()
    return w


def decide_now(w: World, **inputs: Any) -> Decision:
    return decide(w.job, w.observed, PassInputs(now=w.now, **inputs))


def journal(w: World, decision: Decision) -> None:
    """The guarded status write succeeded: the decided status is the job's status."""
    w.body["status"] = decision.plan.status.model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def fail_trainer(w: World, attempt: int = 1) -> None:
    w.fail_rank(attempt, 0, exit_code=1, reason="Error", message=NCCL)
    w.finish_job(attempt, failed=True)


def request_restart(w: World, value: str) -> None:
    w.body["metadata"].setdefault("annotations", {})["rljob.io/restart-request"] = value


def test_a_manual_trainer_restart_waits_for_a_journaled_gang_restart() -> None:
    w = running_world()
    fail_trainer(w)
    first = decide_now(w)
    journal(w, first)
    assert w.job.status.attempt == 2
    request_restart(w, "trainer/n1")

    second = decide_now(w)

    assert second.plan.status.attempt == 2, "the manual request must not skip attempt 2"
    assert second.plan.status.last_restart_request is None, "it waits, not handled yet"


def test_a_manual_trainer_restart_is_journaled_then_carried_out() -> None:
    w = running_world()
    request_restart(w, "trainer/n1")

    decision = decide_now(w)

    action = decision.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_TRAINER_GANG
    assert action.id == "manual-n1"
    assert decision.plan.status.attempt == 2
    assert decision.plan.status.restarts is not None
    assert decision.plan.status.restarts.counted == 0, "a user's restart is not budgeted"


def test_a_manual_serving_restart_is_journaled_before_the_roll() -> None:
    w = running_world()
    request_restart(w, "rollout/n2")

    decision = decide_now(w)

    action = decision.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_ROLE
    assert decision.plan.status.last_restart_request is not None
    rolls = [s for s in decision.steps if isinstance(s, RollDeployment)]
    assert rolls and rolls[0].nonce == action.id


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("trainer-stalled-budget-spent", id="trainer-stalled-budget-spent"),
        pytest.param("serving-exit-code-rule", id="serving-exit-code-93-rule"),
    ],
)
def test_a_decided_fail_job_ends_the_job_and_stops_the_trainer(source: str) -> None:
    w = running_world(failurePolicy={"maxRestarts": 0})
    inputs: dict[str, Any] = {}
    if source == "trainer-stalled-budget-spent":
        stalled = finding("trainer_stall", "trainer", FailureReason.TRAINER_STALLED, "stale", {})
        inputs["findings"] = (stalled,)
    else:
        w.body["spec"]["failurePolicy"]["rules"] = [{"onExitCodes": [93], "action": "FailJob"}]
        crashed = pod("grpo-demo-rollout-x", "rollout", exit_code=93, restart_count=2)
        w.pods[crashed.name] = crashed
        evaluation = finding("restarts", crashed.name, FailureReason.CRASH_LOOP, "exit 93", {})
        inputs["crashes"] = ((crashed, evaluation),)

    decision = decide_now(w, **inputs)

    assert decision.plan.status.phase == JobPhase.FAILED
    assert any(e.reason == "FailJob" for e in decision.events)
    trainer = trainer_job_name(w.name, 1)
    deleted = [s.name for s in decision.steps if isinstance(s, DeleteObject)]
    assert trainer in deleted, "the hung trainer must give its GPUs back"


def test_a_trainer_failure_while_a_pod_restart_is_in_flight_waits_for_it() -> None:
    w = running_world()
    rollout = pod("grpo-demo-rollout-abc", "rollout")
    w.pods[rollout.name] = rollout
    drift = finding("kv_drift", rollout.name, FailureReason.KV_CACHE_DRIFT, "down 35%", {})
    journal(w, decide_now(w, findings=(drift,)))
    assert w.job.status.in_flight is not None
    fail_trainer(w)

    decision = decide_now(w)

    assert decision.plan.status.phase != JobPhase.FAILED
    w.pods.pop(rollout.name)  # the restarted pod is gone: the journal settles
    journal(w, decide_now(w))
    w.advance(600)  # past the backoff the pod restart's counted restart set
    after = decide_now(w)
    assert after.plan.status.in_flight is not None
    assert after.plan.status.in_flight.kind == ActionKind.RESTART_TRAINER_GANG


def test_stall_findings_on_several_engines_respect_max_unavailable() -> None:
    w = running_world()
    engines = [pod(f"grpo-demo-rollout-{i}", "rollout") for i in range(3)]
    for engine in engines:
        w.pods[engine.name] = engine
    w.pods[engines[0].name] = dataclasses.replace(engines[0], ready=False, deleting=True)
    stall = finding("engine_stall", engines[1].name, FailureReason.ENGINE_STALLED, "flat", {})

    decision = decide_now(w, findings=(stall,))

    assert decision.plan.status.in_flight is None, "one engine is already unavailable"
    assert decision.reports and "maxUnavailable" in decision.reports[0][1].message
    assert decision.consumed == "finding"


@pytest.mark.parametrize(
    ("node_state", "force_deleted"),
    [
        pytest.param("NotReady", True, id="node-not-ready"),
        pytest.param("Gone", True, id="node-gone"),
        pytest.param("Ready", False, id="node-ready-rank-still-saving"),
        pytest.param("Unread", False, id="node-unreadable"),
    ],
)
def test_old_ranks_stuck_terminating_are_force_deleted_only_on_a_lost_node(
    node_state: str, force_deleted: bool
) -> None:
    w = running_world(failurePolicy={"teardownTimeout": "10s"})
    fail_trainer(w)
    journal(w, decide_now(w))
    stuck = f"{trainer_job_name(w.name, 1)}-1"
    w.pods[stuck] = dataclasses.replace(w.pods[stuck], deleting=True)
    w.advance(11)

    decision = decide_now(w, node_states={"gpu-1": node_state})

    forced = [s for s in decision.steps if isinstance(s, DeleteObject) and s.name == stuck]
    assert bool(forced) == force_deleted
    if forced:
        assert forced[0].grace_period_seconds == 0
    said = {s.event.reason for s in decision.steps if isinstance(s, PostEvent)}
    assert ("PodForceDeleted" in said) == force_deleted
    assert ("TrainerTeardownStuck" in said) == (not force_deleted)


@pytest.mark.parametrize(
    ("in_flight", "restarts_total"),
    [
        pytest.param(
            {"id": "gang-a2", "kind": "RestartTrainerGang", "reason": "NCCLTimeout",
             "step": "Journaled", "startedAt": "2026-03-01T12:00:00Z",
             "target": {"role": "trainer", "name": "grpo-demo-trainer-a1", "uid": "old"}},
            1, id="gang-restart",
        ),
        pytest.param(
            {"id": "role-rollout-1", "kind": "RestartRole", "reason": "OOMKilled",
             "step": "Journaled", "startedAt": "2026-03-01T12:00:00Z",
             "target": {"role": "rollout", "name": "grpo-demo-rollout"}},
            1, id="role-roll",
        ),
    ],
)  # fmt: skip
def test_a_journal_written_by_the_previous_release_is_resumed(
    in_flight: dict[str, Any], restarts_total: int
) -> None:
    # The exact shape the operator wrote before decide() existed: an upgrade mid-action must
    # finish the action, not repeat or drop it.
    w = running_world()
    if in_flight["kind"] == "RestartTrainerGang":
        fail_trainer(w)
        w.body["status"]["attempt"] = 2
    w.body["status"]["inFlight"] = in_flight
    w.body["status"]["restarts"] = {"total": restarts_total, "counted": restarts_total}

    decision = decide_now(w)

    status = decision.plan.status
    assert status.in_flight is not None and status.in_flight.id == in_flight["id"]
    assert status.restarts is not None and status.restarts.total == restarts_total
    if in_flight["kind"] == "RestartTrainerGang":
        old = trainer_job_name(w.name, 1)
        assert old in [s.name for s in decision.steps if isinstance(s, DeleteObject)]
        assert status.attempt == 2
    else:
        rolls = [s for s in decision.steps if isinstance(s, RollDeployment)]
        assert [r.nonce for r in rolls] == ["role-rollout-1"]
