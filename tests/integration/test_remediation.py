"""Trainer failures through the failure policy on the real control plane: an NCCL watchdog
abort gang-restarts the trainer from the newest checkpoint; a restart storm exhausts the budget
and fails the job; a SIGKILL of the operator at every crash point of a gang restart resumes the
journaled restart instead of repeating it; a RestartJob rule restarts the gang and rolls the
serving roles as one action."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from rljob.crashpoints import (
    GANG_RESTART_CRASH_POINTS,
    POD_RESTART_CRASH_POINTS,
    ROLE_RESTART_CRASH_POINTS,
)
from rljob.dev.crash_entry import crash_env
from rljob.dev.kubeapi import ApiError
from rljob.dev.scrape import metric_values
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.pod_history import PodHistory, trainer_pod_history
from tests.integration.rljobs import (
    JOBS,
    NCCL_FAULT,
    PODS,
    apply_rljob,
    children,
    condition,
    events,
    example,
    fail_rank0,
    get_rljob,
    trainer_env,
    wait_condition,
    wait_phase,
)
from tests.integration.s3_fixtures import S3Bucket
from tests.integration.test_operator_checkpoints import _commit, _writer

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"


def _spec(bucket: S3Bucket, **policy: Any) -> dict[str, Any]:
    return example(
        roles={"rollout": {"replicas": 1, "gpus": 1}, "trainer": {"nodes": 2, "gpus": 8}},
        checkpoint={"uri": f"s3://{bucket.name}/ckpt", "addressingStyle": "path"},
        failurePolicy={"backoff": {"initial": "1s", "max": "2s"}, **policy},
    )


def _crash_ids(crash_at: str | None) -> str:
    return "uninterrupted" if crash_at is None else f"sigkill-at-{crash_at}"


def test_nccl_watchdog_abort_gang_restarts_from_the_newest_checkpoint(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    with trainer_pod_history(cluster, namespace) as history:
        apply_rljob(cluster, namespace, _spec(s3_bucket))
        wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
        _commit(_writer(s3_bucket, namespace, attempt=1), 50)
        fail_rank0(cluster, namespace, NAME)
        env = trainer_env(cluster, namespace, 2)
        wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _assert_one_attempt_at_a_time(history, attempts={"1", "2"})
    assert env["RLJOB_RESUME_STEP"] == "50"
    job = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    restarts = job["status"]["restarts"]
    assert (job["status"]["attempt"], restarts["total"], restarts["byReason"]) == (
        2,
        1,
        {"NCCLTimeout": 1},
    )
    assert "Watchdog caught collective operation timeout" in restarts["recent"][-1]["message"]
    assert "inFlight" not in job["status"]
    assert len(events(cluster, namespace, "GangRestarted")) == 1
    assert [j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME)] == [
        f"{NAME}-trainer-a2"
    ]
    matchers = (f'namespace="{namespace}"', 'reason="NCCLTimeout"', 'action="RestartTrainerGang"')
    assert sum(metric_values(operator.metrics_url, "rljob_restarts_total", *matchers)) == 1.0


def test_a_restart_storm_exhausts_the_budget_and_fails_the_job(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    always_fails = {"metadata": {"annotations": {**NCCL_FAULT, "sim.rljob.io/fail-after": "1s"}}}
    body = _spec(s3_bucket, maxRestarts=2)
    body["spec"]["roles"]["trainer"]["podTemplate"] = always_fails
    apply_rljob(cluster, namespace, body)

    job = wait_phase(cluster, namespace, NAME, "Failed", timeout=120)
    assert job["status"]["restarts"]["counted"] == 2
    failed = condition(job, "Failed")
    assert failed["reason"] == "FailurePolicy" and "NCCLTimeout" in failed["message"]
    assert len(events(cluster, namespace, "GangRestarted")) == 2


def test_gang_restarts_resuming_from_the_same_step_end_the_job(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    """noProgressRestarts: attempts that keep resuming from the same place (here: scratch,
    no checkpoint is ever written) fail the job long before the restart budget is spent."""
    always_fails = {"metadata": {"annotations": {**NCCL_FAULT, "sim.rljob.io/fail-after": "1s"}}}
    body = _spec(s3_bucket, maxRestarts=10, noProgressRestarts=2)
    body["spec"]["roles"]["trainer"]["podTemplate"] = always_fails
    apply_rljob(cluster, namespace, body)

    job = wait_phase(cluster, namespace, NAME, "Failed", timeout=120)
    failed = condition(job, "Failed")
    assert failed["reason"] == "FailurePolicy"
    assert "no progress: the last 2 gang restarts all resumed from scratch" in failed["message"]
    assert job["status"]["restarts"]["counted"] == 2
    assert len(events(cluster, namespace, "GangRestarted")) == 2


def test_old_pods_stuck_terminating_on_a_ready_node_are_reported_not_force_deleted(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    """A rank that keeps terminating on a healthy node may still be saving its checkpoint on
    SIGTERM: after teardownTimeout the operator says so (TrainerTeardownStuck), force-deletes
    nothing and waits; only a lost node's pods are force-deleted (tests/unit/reconcile/
    test_decide.py). Once the old pods go, the next attempt starts."""
    body = _spec(s3_bucket, teardownTimeout="5s")
    body["spec"]["roles"]["trainer"]["terminationGracePeriodSeconds"] = 5  # within the teardown
    never_confirmed = {"metadata": {"annotations": {"sim.rljob.io/delete-after": "1h"}}}
    body["spec"]["roles"]["trainer"]["podTemplate"] = never_confirmed
    try:
        with trainer_pod_history(cluster, namespace) as history:
            apply_rljob(cluster, namespace, body)
            wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
            fail_rank0(cluster, namespace, NAME)
            wait_for(
                lambda: events(cluster, namespace, "TrainerTeardownStuck"),
                60,
                "a TrainerTeardownStuck Event",
            )
            assert events(cluster, namespace, "PodForceDeleted") == []
            jobs = [j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME)]
            assert f"{NAME}-trainer-a2" not in jobs
            _force_delete_pods(cluster, namespace)  # the old pods finally go
            trainer_env(cluster, namespace, 2)
            wait_for(lambda: "2" in history.attempts_seen, 60, "attempt 2's pods in the watch")
    finally:  # attempt 2's pods would hold the namespace's deletion for the hour
        _force_delete_pods(cluster, namespace)
    _assert_one_attempt_at_a_time(history, attempts={"1", "2"})


@pytest.mark.parametrize("crash_at", [None, *ROLE_RESTART_CRASH_POINTS], ids=_crash_ids)
def test_a_role_restart_rule_rolls_every_engine_once_and_leaves_the_trainer(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    s3_bucket: S3Bucket,
    crash_at: str | None,
) -> None:
    """Also when the operator is SIGKILLed at each of the roll's crash points."""
    rule = {"roles": ["rollout"], "onReasons": ["OOMKilled"], "action": "RestartRole"}
    body = _spec(s3_bucket, rules=[rule])
    body["spec"]["roles"]["rollout"]["replicas"] = 2
    apply_rljob(cluster, namespace, body)
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    before = {p["metadata"]["uid"] for p in children(cluster, namespace, PODS, NAME, "rollout")}
    (trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    victim = sorted(
        p["metadata"]["name"] for p in children(cluster, namespace, PODS, NAME, "rollout")
    )[0]
    _oom_twice(
        cluster, operator, namespace, victim, crash_at, settled=_roll_settled(cluster, namespace)
    )

    def rolled() -> bool:
        pods = children(cluster, namespace, PODS, NAME, "rollout")
        uids = {p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}
        return len(uids) == 2 and not uids & before

    wait_for(rolled, 90, "every rollout pod replaced by the roll")
    job = wait_condition(cluster, namespace, NAME, "Ready", timeout=60)
    assert job["status"]["restarts"]["total"] == 1
    recent = job["status"]["restarts"]["recent"][-1]
    assert (recent["reason"], recent["action"]) == ("OOMKilled", "RestartRole")
    assert len(events(cluster, namespace, "RoleRestarted")) == 1
    deployment = cluster.api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{NAME}-rollout")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["rljob.io/restarted-at"] == "role-rollout-1"
    (same_trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    assert same_trainer["metadata"]["uid"] == trainer["metadata"]["uid"]
    wait_for(
        lambda: condition(get_rljob(cluster, namespace, NAME), "Restarting")["status"] == "False",
        60,
        "the Restarting condition to clear once rolled",
    )


@pytest.mark.parametrize("point", GANG_RESTART_CRASH_POINTS)
def test_sigkill_at_a_crash_point_resumes_the_gang_restart_exactly_once(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket, point: str
) -> None:
    with trainer_pod_history(cluster, namespace) as history:
        apply_rljob(cluster, namespace, _spec(s3_bucket))
        wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
        operator.restart(env=crash_env(point, namespace))
        fail_rank0(cluster, namespace, NAME)
        wait_for(
            lambda: operator.current.process.poll() is not None,
            60,
            f"the operator to die at {point}",
        )
        operator.restart()
        trainer_env(cluster, namespace, 2)
        job = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _assert_one_attempt_at_a_time(history, attempts={"1", "2"})
    assert job["status"]["attempt"] == 2
    assert job["status"]["restarts"]["total"] == 1
    assert len(events(cluster, namespace, "GangRestarted")) == 1
    assert [j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME)] == [
        f"{NAME}-trainer-a2"
    ]
    assert get_rljob(cluster, namespace, NAME)["status"].get("inFlight") is None


def test_a_restart_job_rule_restarts_the_gang_and_rolls_every_serving_role_once(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    """RestartJob, with the operator SIGKILLed once the roll was sent: the next one finishes the
    journaled action (the new attempt created, the journal settled), never a second one."""
    rule = {"onReasons": ["NCCLTimeout"], "action": "RestartJob"}
    with trainer_pod_history(cluster, namespace) as history:
        apply_rljob(cluster, namespace, _spec(s3_bucket, rules=[rule]))
        wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
        engines = {
            p["metadata"]["uid"] for p in children(cluster, namespace, PODS, NAME, "rollout")
        }
        operator.restart(env=crash_env("job-restart:rolled", namespace))
        fail_rank0(cluster, namespace, NAME)
        wait_for(
            lambda: operator.current.process.poll() is not None,
            60,
            "the operator to die once the roll was sent",
        )
        operator.restart()
        trainer_env(cluster, namespace, 2)
        wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    _assert_one_attempt_at_a_time(history, attempts={"1", "2"})

    def replaced() -> bool:
        pods = children(cluster, namespace, PODS, NAME, "rollout")
        live = {p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}
        return bool(live) and not live & engines

    wait_for(replaced, 90, "the rollout engine replaced by the roll")
    wait_for(
        lambda: get_rljob(cluster, namespace, NAME)["status"].get("inFlight") is None,
        60,
        "the job restart to settle",
    )
    status = get_rljob(cluster, namespace, NAME)["status"]
    assert (status["attempt"], status["restarts"]["total"]) == (2, 1)
    assert status["restarts"]["recent"][-1]["action"] == "RestartJob"
    assert len(events(cluster, namespace, "JobRestarted")) == 1
    assert events(cluster, namespace, "GangRestarted") == []
    deployment = cluster.api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{NAME}-rollout")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["rljob.io/restarted-at"] == "job-a2"


@pytest.mark.parametrize("crash_at", [None, *POD_RESTART_CRASH_POINTS], ids=_crash_ids)
def test_a_rollout_pod_oom_killed_repeatedly_is_restarted_alone_once(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    s3_bucket: S3Bucket,
    crash_at: str | None,
) -> None:
    """Also when the operator is SIGKILLed at each of the restart's crash points."""
    body = _spec(s3_bucket)
    body["spec"]["roles"]["rollout"]["replicas"] = 2
    apply_rljob(cluster, namespace, body)
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    victim, bystander = sorted(
        (p["metadata"]["name"], p["metadata"]["uid"])
        for p in children(cluster, namespace, PODS, NAME, "rollout")
    )
    (trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    _oom_twice(cluster, operator, namespace, victim[0], crash_at)

    def replaced() -> bool:
        uids = {p["metadata"]["uid"] for p in children(cluster, namespace, PODS, NAME, "rollout")}
        return victim[1] not in uids and bystander[1] in uids

    wait_for(replaced, 60, "the OOM-killed pod to be replaced and the other kept")
    job = wait_condition(cluster, namespace, NAME, "Ready", timeout=60)
    restarts = job["status"]["restarts"]
    assert (restarts["total"], restarts["byReason"]) == (1, {"OOMKilled": 1})
    assert restarts["recent"][-1]["pod"] == victim[0]
    assert len(events(cluster, namespace, "PodRestarted")) == 1
    (same_trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    assert same_trainer["metadata"]["uid"] == trainer["metadata"]["uid"]


def test_an_oom_kill_the_policy_only_reports_is_said_and_nothing_restarts(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    rule = {"roles": ["rollout"], "onReasons": ["OOMKilled"], "action": "Report"}
    apply_rljob(cluster, namespace, _spec(s3_bucket, rules=[rule]))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    (victim,) = children(cluster, namespace, PODS, NAME, "rollout")
    _oom_twice(cluster, operator, namespace, victim["metadata"]["name"], crash_at=None)

    wait_for(lambda: events(cluster, namespace, "OOMKilled"), 60, "the OOMKilled report")
    (report,) = events(cluster, namespace, "OOMKilled")
    assert report["involvedObject"]["kind"] == "RLJob"
    assert report["message"].endswith("; report"), report["message"]
    (same,) = children(cluster, namespace, PODS, NAME, "rollout")
    assert same["metadata"]["uid"] == victim["metadata"]["uid"]
    assert get_rljob(cluster, namespace, NAME)["status"]["restarts"]["total"] == 0


def _roll_settled(cluster: Cluster, namespace: str) -> Callable[[], bool]:
    """Whether the role roll finished: its journal cleared with the Deployment rolled."""

    def settled() -> bool:
        job = get_rljob(cluster, namespace, NAME)
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{NAME}-rollout"
        template = cluster.api.get(path)["spec"]["template"]["metadata"]
        rolled = (template.get("annotations") or {}).get("rljob.io/restarted-at")
        return rolled == "role-rollout-1" and not job["status"].get("inFlight")

    return settled


def _oom_twice(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    pod: str,
    crash_at: str | None,
    settled: Callable[[], bool] | None = None,
) -> None:
    """OOM-kills the pod's container twice in place, with the operator set to die at
    `crash_at` meanwhile (then restarted), if given; `settled`: see _restart_after_the_crash."""
    if crash_at is not None:
        operator.restart(env=crash_env(crash_at, namespace))
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
    oom = {"sim.rljob.io/fail-exit-code": "137", "sim.rljob.io/fail-reason": "OOMKilled"}
    for restarts in (1, 2):
        _crash_in_place(cluster, path, oom, restarts)
    if crash_at is not None:
        _restart_after_the_crash(operator, crash_at, settled)


def _restart_after_the_crash(
    operator: Operator, point: str, settled: Callable[[], bool] | None = None, timeout: float = 60
) -> None:
    """Waits for the operator to die at `point`, then restarts it. `settled`: the action
    finished without passing the point, which is allowed for a point after a side effect whose
    pass can fail after the effect landed (a timeout under load): the next pass sees the effect
    done and never reaches the point."""

    def died_or_settled() -> bool:
        if operator.current.process.poll() is not None:
            return True
        return settled is not None and settled()

    wait_for(died_or_settled, timeout, f"the operator to die at {point}")
    if operator.current.process.poll() is None:
        print(f"the action settled without reaching {point}: its effect landed, its pass failed")
    operator.restart()


def _crash_in_place(cluster: Cluster, path: str, fault: dict[str, str], restarts: int) -> None:
    """Annotates the pod until its container has restarted `restarts` times (the kwok stage
    consumes the annotation; a patch racing its removal is simply repeated)."""
    patched_at = [-1e9]

    def restarted() -> bool:
        count = _restart_count(cluster, path)
        if count >= restarts or count == GONE:  # the operator may replace it at once
            return True
        if time.monotonic() - patched_at[0] > 15:
            cluster.api.merge_patch(path, {"metadata": {"annotations": fault}})
            patched_at[0] = time.monotonic()
        return False

    wait_for(restarted, 90, f"{path} to restart in place {restarts} time(s)")


GONE = -1


def _restart_count(cluster: Cluster, path: str) -> int:
    try:
        statuses = cluster.api.get(path)["status"].get("containerStatuses") or []
    except ApiError as exc:
        if exc.status == 404:
            return GONE
        raise
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def _assert_one_attempt_at_a_time(history: PodHistory, attempts: set[str]) -> None:
    """From the watch: every attempt's pods were seen, never two attempts' pods at once."""
    assert history.attempts_seen == attempts, history.attempts_seen
    assert history.overlaps == [], history.overlaps[:3]


def _force_delete_pods(cluster: Cluster, namespace: str) -> None:
    pods = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    for pod in pods:
        path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"
        with contextlib.suppress(ApiError):
            cluster.api.delete(path, {"gracePeriodSeconds": 0})


def test_sigkill_after_the_attempt_marker_creates_the_attempt_once(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    """Killed between writing attempt 1's marker and recording it: the restarted operator
    starts the same attempt (the marker rewritten, not a second attempt) and one Job."""
    operator.restart(env=crash_env("attempt:marker-written", namespace))
    apply_rljob(cluster, namespace, _spec(s3_bucket))
    _restart_after_the_crash(operator, "attempt:marker-written")
    job = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    assert job["status"]["attempt"] == 1
    assert [j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME)] == [
        f"{NAME}-trainer-a1"
    ]
    markers = s3_bucket.all_keys(f"ckpt/{namespace}/{NAME}/attempts/")
    assert markers == [f"ckpt/{namespace}/{NAME}/attempts/a000001.json"]


def test_sigkill_halfway_through_retention_loses_no_eligible_checkpoint(
    cluster: Cluster, operator: Operator, namespace: str, s3_bucket: S3Bucket
) -> None:
    """Killed after retention deleted old manifests but not their shards: the gang restart
    finishes once, resuming from the newest version, which is intact."""
    body = _spec(s3_bucket)
    body["spec"]["checkpoint"]["keep"] = 1
    apply_rljob(cluster, namespace, body)
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    writer = _writer(s3_bucket, namespace, attempt=1)
    for step in (10, 20, 30):
        _commit(writer, step)
    operator.restart(env=crash_env("retention:manifests-deleted", namespace))
    fail_rank0(cluster, namespace, NAME)
    _restart_after_the_crash(operator, "retention:manifests-deleted")

    env = trainer_env(cluster, namespace, 2)
    assert env["RLJOB_RESUME_STEP"] == "30"
    job = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    assert (job["status"]["attempt"], job["status"]["restarts"]["total"]) == (2, 1)
    newest = f"ckpt/{namespace}/{NAME}/v000000000030-a000001/"
    assert f"{newest}manifest.json" in s3_bucket.all_keys(newest)
    assert len(s3_bucket.all_keys(newest)) == 3  # two shards and the manifest
