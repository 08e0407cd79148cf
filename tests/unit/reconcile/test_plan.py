"""Reconcile passes over a job's lifecycle: create, idempotent passes, scale, rolling one role,
suspend and resume, success with TTL, failure, unschedulable pods and the scheduling timeout."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from rljob.api import ConditionStatus, JobPhase, RLJobStatus
from rljob.reconcile import Plan, ReconcileExtras, status_patch
from rljob.reconcile.conditions import find
from tests.unit.reconcile.world import T0, World, example_body, pod

JOB = "grpo-demo"
TRAINER_A1 = ("Job", f"{JOB}-trainer-a1")
TRAINER_A2 = ("Job", f"{JOB}-trainer-a2")
GPU_MESSAGE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def applied(plan: Plan) -> list[tuple[str, str]]:
    return [(child.kind, child.name) for child in plan.apply]


def deleted(plan: Plan) -> list[tuple[str, str, str]]:
    return [(doomed.kind, doomed.name, doomed.reason) for doomed in plan.delete]


def events(plan: Plan) -> list[tuple[str, str]]:
    return [(event.type, event.reason) for event in plan.events]


def condition(status: RLJobStatus, kind: str) -> tuple[str, str]:
    found = find(status.conditions, kind)
    assert found is not None, f"no {kind} condition"
    return found.status.value, found.reason


def trainer_env(plan: Plan) -> dict[str, Any]:
    trainer = next(child for child in plan.apply if child.kind == "Job")
    container = trainer.body["spec"]["template"]["spec"]["containers"][0]
    return {variable["name"]: variable.get("value") for variable in container["env"]}


def running_world(body: dict[str, Any] | None = None) -> World:
    world = World(body or example_body())
    world.step()
    world.ready()
    world.step()
    assert world.job.status.phase == JobPhase.RUNNING
    return world


def assert_quiet(world: World, requeue_after: float | None = None) -> None:
    """A pass over an unchanged world changes nothing and writes nothing."""
    before = world.job.status
    plan = world.plan()
    assert (plan.apply, plan.delete, plan.events) == ((), (), ())
    assert plan.requeue_after == requeue_after
    assert plan.status == before
    assert status_patch(before, plan.status) is None


# Create and steady state.


def test_first_pass_creates_every_child() -> None:
    world = World(example_body())
    plan = world.step()
    assert applied(plan) == [
        ("Service", f"{JOB}-rollout"),
        ("Service", f"{JOB}-rollout-headless"),
        ("Deployment", f"{JOB}-rollout"),
        ("Service", f"{JOB}-trainer"),
        TRAINER_A1,
        ("Service", f"{JOB}-reference"),
        ("Deployment", f"{JOB}-reference"),
        ("Service", f"{JOB}-verifier"),
        ("Deployment", f"{JOB}-verifier"),
    ]
    assert plan.delete == ()
    assert events(plan) == [("Normal", "Created")]
    status = plan.status
    assert (status.phase, status.attempt, status.observed_generation) == (JobPhase.PENDING, 1, 1)
    assert status.start_time == T0
    assert status.roles is not None and status.roles.rollout is not None
    assert (status.roles.rollout.desired, status.roles.rollout.ready) == (4, 0)
    assert [record.attempt for record in status.attempts] == [1]
    assert status.restarts is not None and status.restarts.total == 0  # printer column
    assert condition(status, "Ready") == ("False", "RolesNotReady")
    assert condition(status, "Progressing") == ("True", "Starting")


def test_pending_until_every_role_is_ready_then_running() -> None:
    world = World(example_body())
    world.step()
    seen = world.step().status.attempts  # the pass that first sees the Job records its uid
    assert [record.job_uid for record in seen] == [world.children[TRAINER_A1].uid]
    assert_quiet(world, requeue_after=120)  # the trainer's scheduling deadline
    world.ready()
    world.children[("Deployment", f"{JOB}-verifier")] = dataclasses.replace(
        world.children[("Deployment", f"{JOB}-verifier")], ready_replicas=1
    )
    assert world.step().status.phase == JobPhase.PENDING
    world.ready()
    plan = world.step()
    assert plan.status.phase == JobPhase.RUNNING
    assert condition(plan.status, "Ready") == ("True", "AllRolesReady")
    assert condition(plan.status, "Progressing") == ("True", "Running")
    assert condition(plan.status, "Degraded") == ("False", "AsExpected")


def test_unchanged_running_job_is_quiet() -> None:
    world = running_world()
    assert_quiet(world)
    world.advance(3600)
    assert_quiet(world)


def test_running_stays_running_when_a_role_dips_and_shows_degraded() -> None:
    world = running_world()
    key = ("Deployment", f"{JOB}-rollout")
    world.children[key] = dataclasses.replace(world.children[key], ready_replicas=3)
    status = world.step().status
    assert status.phase == JobPhase.RUNNING
    assert condition(status, "Degraded") == ("True", "RolesUnavailable")
    assert condition(status, "Ready") == ("False", "RolesNotReady")
    degraded = find(status.conditions, "Degraded")
    assert degraded is not None and degraded.message == "rollout 3/4 ready"


def test_missing_child_is_recreated_and_deleting_one_waited_for() -> None:
    world = running_world()
    key = ("Deployment", f"{JOB}-reference")
    world.children[key] = dataclasses.replace(world.children[key], deleting=True)
    assert world.plan().apply == ()
    del world.children[key]
    assert applied(world.plan()) == [key]


# Updates.


def test_scale_applies_only_that_deployment_and_says_so() -> None:
    world = running_world()
    world.edit_role("rollout", replicas=6)
    plan = world.step()
    assert applied(plan) == [("Deployment", f"{JOB}-rollout")]
    assert plan.apply[0].body["spec"]["replicas"] == 6
    assert events(plan) == [("Normal", "Scaled")]
    assert plan.events[0].message == "rollout scaled from 4 to 6 pods"
    assert plan.status.observed_generation == 2


def test_image_update_rolls_only_rollout() -> None:
    world = running_world()
    world.edit_role("rollout", image="registry.example.com/vllm:0.12")
    plan = world.step()
    assert applied(plan) == [("Deployment", f"{JOB}-rollout")]
    assert plan.delete == ()
    assert world.step().apply == ()


def test_trainer_change_waits_for_the_next_attempt() -> None:
    world = running_world()
    world.edit_role("trainer", image="trainer:2", env=[{"name": "X", "value": "1"}])
    plan = world.step()
    assert (plan.apply, plan.delete) == ((), ())
    assert plan.status.attempt == 1


def test_removed_role_children_are_deleted() -> None:
    world = running_world()
    del world.body["spec"]["roles"]["verifier"]
    world.body["metadata"]["generation"] += 1
    plan = world.step()
    assert sorted(deleted(plan)) == [
        ("Deployment", f"{JOB}-verifier", "RoleRemoved"),
        ("Service", f"{JOB}-verifier", "RoleRemoved"),
    ]
    assert ("Normal", "Deleted") in events(plan)
    assert plan.status.roles is not None and plan.status.roles.verifier is None


# Suspend and resume.


def test_suspend_scales_to_zero_and_deletes_the_trainer_job() -> None:
    world = running_world()
    world.edit(suspend=True)
    plan = world.step()
    assert sorted(applied(plan)) == [
        ("Deployment", f"{JOB}-reference"),
        ("Deployment", f"{JOB}-rollout"),
        ("Deployment", f"{JOB}-verifier"),
    ]
    assert {child.body["spec"]["replicas"] for child in plan.apply} == {0}
    assert deleted(plan) == [("Job", f"{JOB}-trainer-a1", "Suspended")]
    assert events(plan) == [("Normal", "Suspended")]
    status = plan.status
    assert (status.phase, status.attempt) == (JobPhase.SUSPENDED, 1)
    assert condition(status, "Suspended") == ("True", "Suspended")
    assert condition(status, "Ready") == ("False", "Suspended")
    assert status.roles is not None and status.roles.trainer is not None
    assert status.roles.trainer.desired == 0
    assert status.attempts[-1].end_reason == "Suspended"
    world.gone()
    assert_quiet(world)


def test_resume_starts_a_new_attempt_once_the_old_pods_are_gone() -> None:
    world = running_world()
    restarts_before = world.job.status.restarts
    world.edit(suspend=True)
    world.step()
    world.edit(suspend=False)
    plan = world.step()  # the old attempt's pods are still terminating
    assert events(plan) == [("Normal", "Resumed")]
    assert plan.status.attempt == 2
    assert TRAINER_A2 not in applied(plan)
    assert condition(plan.status, "Suspended") == ("False", "NotSuspended")
    world.gone()
    plan = world.step()
    assert TRAINER_A2 in applied(plan)
    assert events(plan) == [("Normal", "Created")]
    assert plan.status.restarts == restarts_before
    assert [record.attempt for record in plan.status.attempts] == [1, 2]
    env = trainer_env(plan)
    assert env["RLJOB_ATTEMPT"] == "2"
    assert env["PET_MASTER_ADDR"] == f"{JOB}-trainer-a2-0.{JOB}-trainer.rl.svc"
    world.ready()
    assert world.step().status.phase == JobPhase.RUNNING


def test_job_created_suspended_starts_with_attempt_one() -> None:
    body = example_body()
    body["spec"]["suspend"] = True
    world = World(body)
    plan = world.step()
    assert TRAINER_A1 not in applied(plan)
    assert plan.status.phase == JobPhase.SUSPENDED
    world.edit(suspend=False)
    plan = world.step()
    assert plan.status.attempt == 1
    assert TRAINER_A1 in applied(plan)


# Completion.


def test_success_scales_down_keeps_the_job_and_honours_the_ttl() -> None:
    world = running_world()  # ttlSecondsAfterFinished: 3600
    world.finish_job(1, succeeded=True, ready_replicas=0)
    plan = world.step()
    assert plan.status.phase == JobPhase.SUCCEEDED
    assert plan.status.completion_time == T0
    assert events(plan) == [("Normal", "Completed")]
    assert condition(plan.status, "Succeeded") == ("True", "TrainerSucceeded")
    assert {c.body["spec"]["replicas"] for c in plan.apply if c.kind == "Deployment"} == {0}
    assert plan.delete == ()
    assert plan.requeue_after == 3600
    assert plan.delete_job is False
    world.advance(1000)
    plan = world.step()
    assert (plan.apply, plan.delete, plan.events) == ((), (), ())
    assert plan.requeue_after == 2600
    world.advance(2600)
    assert world.plan().delete_job is True


def test_success_without_ttl_keeps_the_job() -> None:
    body = example_body()
    del body["spec"]["ttlSecondsAfterFinished"]
    world = running_world(body)
    world.finish_job(1, succeeded=True)
    world.step()
    world.advance(10**6)
    plan = world.plan()
    assert (plan.requeue_after, plan.delete_job) == (None, False)


def test_ttl_zero_deletes_on_the_pass_after_the_status_is_written() -> None:
    body = example_body()
    body["spec"]["ttlSecondsAfterFinished"] = 0
    world = running_world(body)
    world.finish_job(1, failed=True, failed_message="boom")
    plan = world.step()
    assert (plan.delete_job, plan.requeue_after) == (False, 0)
    assert world.plan().delete_job is True


def _rank(
    index: int,
    exit_code: int | None,
    reason: str = "Error",
    message: str = "",
    finished: dt.datetime | None = None,
) -> Any:
    return pod(
        f"{JOB}-trainer-a1-{index}",
        "trainer",
        attempt=1,
        completion_index=index,
        phase="Failed" if exit_code not in (None, 0) else "Running",
        exit_code=exit_code,
        reason=reason,
        message=message,
        finished_at=finished,
    )


@pytest.mark.parametrize(
    ("ranks", "reason", "message"),
    [
        pytest.param(
            [_rank(0, None), _rank(1, 137, "OOMKilled")],
            "OOMKilled",
            f"trainer rank 1 (pod {JOB}-trainer-a1-1) exited with code 137 (OOMKilled)",
            id="one-rank",
        ),
        pytest.param(
            [
                _rank(3, 1, "Error", "ValueError: bad batch"),
                _rank(1, 134, "Error", "[Rank 1] Watchdog caught collective operation timeout"),
            ],
            "Error",
            f"trainer rank 3 (pod {JOB}-trainer-a1-3) exited with code 1 (Error): "
            "ValueError: bad batch",
            id="a-user-error-behind-watchdog-timeouts-is-the-root-cause",
        ),
        pytest.param(
            [
                _rank(0, 1, "Error", "second", finished=T0 + dt.timedelta(seconds=5)),
                _rank(2, 1, "Error", "first", finished=T0),
            ],
            "Error",
            f"trainer rank 2 (pod {JOB}-trainer-a1-2) exited with code 1 (Error): first",
            id="the-first-observed-failure-not-the-lowest-index",
        ),
        pytest.param(
            [_rank(2, 1, "Error", "two", finished=T0), _rank(1, 1, "Error", "one", finished=T0)],
            "Error",
            f"trainer rank 1 (pod {JOB}-trainer-a1-1) exited with code 1 (Error): one",
            id="same-second-lowest-index",
        ),
        pytest.param(
            [
                dataclasses.replace(_rank(0, 143, "Error", "SIGTERM"), deleting=True),
                _rank(1, 1, "Error", "CUDA error: an illegal memory access"),
            ],
            "Error",
            f"trainer rank 1 (pod {JOB}-trainer-a1-1) exited with code 1 (Error): "
            "CUDA error: an illegal memory access",
            id="ranks-killed-by-the-job-controller-are-victims",
        ),
        pytest.param(
            [_rank(0, 0)],
            "TrainerFailed",
            "Job failed: PodFailurePolicy",
            id="falls-back-to-job-condition",
        ),
        pytest.param(
            [_rank(0, 2, "", "line one\nline two")],
            "TrainerFailed",
            f"trainer rank 0 (pod {JOB}-trainer-a1-0) exited with code 2 (TrainerFailed): "
            "line one line two",
            id="no-reason-multiline-message",
        ),
    ],
)
def test_failure_reports_the_failing_rank(ranks: list[Any], reason: str, message: str) -> None:
    world = running_world()
    for rank in ranks:
        world.pods[rank.name] = rank
    world.finish_job(1, failed=True, failed_message="Job failed: PodFailurePolicy")
    plan = world.step()
    assert plan.status.phase == JobPhase.FAILED
    failed = find(plan.status.conditions, "Failed")
    assert failed is not None
    assert (failed.reason, failed.message) == (reason, message)
    assert condition(plan.status, "Progressing") == ("False", "Failed")
    assert events(plan) == [("Warning", "Failed")]
    assert plan.events[0].message == message
    assert {c.body["spec"]["replicas"] for c in plan.apply if c.kind == "Deployment"} == {0}
    assert plan.delete == ()
    assert plan.status.attempts[-1].end_reason == reason


def test_finished_job_stays_finished() -> None:
    world = running_world()
    world.finish_job(1, failed=True, failed_message="boom")
    world.step()
    world.edit(suspend=True)
    plan = world.step()
    assert plan.status.phase == JobPhase.FAILED
    assert (plan.delete, plan.events) == ((), ())


# Scheduling.


def test_unschedulable_pod_carries_the_scheduler_message_verbatim() -> None:
    world = World(example_body())
    world.step()
    world.start_ranks(1, scheduled=1, message=GPU_MESSAGE)
    plan = world.step()
    scheduled = find(plan.status.conditions, "PodsScheduled")
    assert scheduled is not None and scheduled.status == ConditionStatus.FALSE
    assert scheduled.reason == "Unschedulable"
    assert GPU_MESSAGE in scheduled.message
    assert scheduled.message == f"trainer pod {JOB}-trainer-a1-1: {GPU_MESSAGE}"
    assert events(plan) == [("Warning", "Unschedulable")]
    assert plan.requeue_after == 120  # schedulingTimeout 2m from the Job's creation
    world.advance(30)
    plan = world.step()
    assert plan.events == ()
    assert plan.requeue_after == 90


def test_scheduling_timeout_deletes_the_attempt_and_retries_after_backoff() -> None:
    world = World(example_body())  # schedulingTimeout 2m, backoff.initial 2s
    world.step()
    world.ready()
    world.start_ranks(1, scheduled=1, message=GPU_MESSAGE)
    world.advance(120)
    plan = world.step()
    assert deleted(plan) == [("Job", f"{JOB}-trainer-a1", "SchedulingTimeout")]
    assert plan.apply == ()
    assert events(plan) == [("Warning", "SchedulingTimeout")]
    assert GPU_MESSAGE in plan.events[0].message
    status = plan.status
    assert status.attempt == 2
    assert status.restarts is not None and status.restarts.total == 0
    assert condition(status, "Progressing") == ("False", "Unschedulable")
    progressing = find(status.conditions, "Progressing")
    assert progressing is not None and GPU_MESSAGE in progressing.message
    assert status.attempts[0].end_reason == "Unschedulable"
    assert plan.requeue_after == 2

    world.gone()
    world.advance(1)
    plan = world.step()
    assert plan.apply == ()
    assert plan.requeue_after == 1
    assert condition(plan.status, "Progressing") == ("False", "Unschedulable")

    world.advance(1)
    plan = world.step()
    assert applied(plan) == [TRAINER_A2]
    world.start_ranks(2)
    plan = world.step()
    assert condition(plan.status, "Progressing") == ("True", "Running")
    assert plan.status.phase == JobPhase.RUNNING


def test_a_job_that_ran_never_times_out() -> None:
    world = running_world()
    world.advance(3600)
    name = f"{JOB}-trainer-a1-1"
    world.pods[name] = dataclasses.replace(world.pods[name], node="", ready=False)
    plan = world.step()
    assert plan.delete == ()
    assert plan.status.attempt == 1


def test_old_attempt_jobs_are_deleted_before_the_new_attempt_starts() -> None:
    world = running_world()
    world.body["status"]["attempt"] = 2
    plan = world.step()
    assert deleted(plan) == [("Job", f"{JOB}-trainer-a1", "SupersededAttempt")]
    assert TRAINER_A2 not in applied(plan)
    progressing = find(plan.status.conditions, "Progressing")
    assert progressing is not None and "2 trainer pods" in progressing.message
    world.gone()
    assert applied(world.step()) == [TRAINER_A2]


def test_the_next_attempt_waits_until_the_old_job_is_gone_even_with_every_rank_ended() -> None:
    """A gang restart: every old rank has ended (Failed), but they exist until the old Job's
    foreground deletion removes them; the new Job is created only after that."""
    world = running_world()
    world.fail_rank(1, 0, exit_code=1)
    world.fail_rank(1, 1, exit_code=137)
    world.finish_job(1, failed=True, failed_message="Job failed: PodFailurePolicy")
    world.body["status"]["attempt"] = 2  # what the journaled gang restart records
    plan = world.step()
    assert deleted(plan) == [("Job", f"{JOB}-trainer-a1", "SupersededAttempt")]
    assert TRAINER_A2 not in applied(plan)
    progressing = find(plan.status.conditions, "Progressing")
    assert progressing is not None and f"Job {JOB}-trainer-a1" in progressing.message
    assert TRAINER_A2 not in applied(world.step())  # still deleting
    world.gone()
    assert applied(world.step()) == [TRAINER_A2]


def test_terminated_pods_of_old_attempts_do_not_block() -> None:
    world = World(example_body())
    world.pods["old"] = pod("old", "trainer", attempt=0, phase="Failed", exit_code=1)
    assert TRAINER_A1 in applied(world.step())


# Extras.


def test_resume_and_policy_env_from_the_caller() -> None:
    extras = ReconcileExtras(
        resume_env={
            "RLJOB_RESUME_URI": "s3://b/p/v000000000100-a000001",
            "RLJOB_RESUME_STEP": "100",
            "RLJOB_RESUME_VERSION": "v000000000100-a000001",
        },
        policy_env={"RLJOB_POLICY_GENERATION": "5"},
        trainer_master_port=29600,
    )
    world = World(example_body(), extras)
    plan = world.step()
    record = plan.status.attempts[0]
    assert (record.resumed_from_step, record.resumed_from_version) == (100, "v000000000100-a000001")
    env = trainer_env(plan)
    assert env["RLJOB_RESUME_STEP"] == "100"
    assert env["PET_MASTER_PORT"] == "29600"


def test_status_from_an_operator_restart_is_the_source_of_truth() -> None:
    world = running_world()
    again = World(world.body)
    again.children, again.pods = dict(world.children), dict(world.pods)
    assert_quiet(again)
