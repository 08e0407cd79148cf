"""The operator on the real control plane, under its least-privilege ServiceAccount: accepts and
rejects specs, creates and keeps the workloads, follows spec changes, suspend, completion and
failure, reports unschedulable GPUs, and stays quiet when nothing changes."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from rljob.dev.audit import writes_by_user
from rljob.dev.kubeapi import ApiError, Credentials, KubeApi
from rljob.dev.scrape import metric_values
from rljob.kubectl.plugin import render_status
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    DEPLOYMENTS,
    JOBS,
    PODS,
    REPLICASETS,
    SERVICES,
    apply_rljob,
    children,
    condition,
    events,
    example,
    get_rljob,
    kubectl,
    patch_spec,
    rljob_path,
    settled_job,
    wait_condition,
    wait_phase,
)

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"


def _ready_job(
    cluster: Cluster, namespace: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    apply_rljob(cluster, namespace, body or example())
    name = (body or example())["metadata"]["name"]
    return wait_condition(cluster, namespace, name, "Ready", timeout=90)


def _metric(op: Operator, name: str) -> float:
    return sum(metric_values(op.metrics_url, name))


def test_valid_job_is_accepted_and_semantically_invalid_one_is_marked(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    apply_rljob(cluster, namespace, example())
    # podTemplate is free-form to the server: it stores labels that are not a map; the
    # operator refuses them by field instead of merging them into the pods.
    bad = example()
    bad["spec"]["roles"]["rollout"]["podTemplate"] = {"metadata": {"labels": 5}}
    bad["metadata"]["name"] = "grpo-bad"
    apply_rljob(cluster, namespace, bad)

    good = wait_condition(cluster, namespace, NAME, "Accepted")
    assert good["status"]["observedGeneration"] == good["metadata"]["generation"]
    rejected = wait_condition(cluster, namespace, "grpo-bad", "Accepted", status="False")
    accepted = condition(rejected, "Accepted")
    assert accepted["reason"] == "InvalidSpec"
    assert "spec.roles.rollout.podTemplate" in accepted["message"]

    listing = kubectl(cluster, "get", "rlj", "-n", namespace)
    assert NAME in listing and "grpo-bad" in listing
    described = kubectl(cluster, "describe", "rlj", "grpo-bad", "-n", namespace)
    assert "InvalidSpec" in described and "podTemplate" in described


def test_children_exist_with_owner_labels_and_the_job_becomes_ready(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    job = _ready_job(cluster, namespace)
    uid = job["metadata"]["uid"]
    found = {
        (path, item["metadata"]["name"]): item
        for path in (DEPLOYMENTS, JOBS, SERVICES)
        for item in children(cluster, namespace, path, NAME)
    }
    names = {name for _, name in found}
    assert {
        f"{NAME}-rollout",
        f"{NAME}-rollout-headless",
        f"{NAME}-trainer",
        f"{NAME}-trainer-a1",
    } <= names
    for item in found.values():
        owners = item["metadata"]["ownerReferences"]
        assert [(o["uid"], o["controller"]) for o in owners] == [(uid, True)]
        assert item["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "rljob-operator"
    assert job["status"]["phase"] == "Running"
    rollout = job["status"]["roles"]["rollout"]
    assert {k: rollout[k] for k in ("desired", "ready", "restarts")} == {
        "desired": 2,
        "ready": 2,
        "restarts": 0,
    }
    assert [m["state"] for m in rollout["engines"]] == ["serving", "serving"]  # the roster
    wide = kubectl(cluster, "get", "rlj", NAME, "-n", namespace, "-o", "wide")
    header, row = wide.splitlines()[:2]
    assert "PHASE" in header and "RESTARTS" in header
    assert "Running" in row.split()


def test_trainer_pods_get_torchrun_rendezvous_and_a_resolvable_hostname(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _ready_job(
        cluster,
        namespace,
        example(roles={"rollout": {"replicas": 1, "gpus": 1}, "trainer": {"nodes": 2, "gpus": 8}}),
    )

    def two_trainer_pods() -> list[dict[str, Any]] | None:
        pods = children(cluster, namespace, PODS, NAME, "trainer")
        return pods if len(pods) == 2 else None

    pods = wait_for(two_trainer_pods, 60, "two trainer pods")
    for pod in pods:
        spec = pod["spec"]
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        assert spec["subdomain"] == f"{NAME}-trainer"
        assert spec["hostname"].startswith(f"{NAME}-trainer-a1-")
        assert (
            env["PET_MASTER_ADDR"]["value"] == f"{NAME}-trainer-a1-0.{NAME}-trainer.{namespace}.svc"
        )
        assert env["PET_NNODES"]["value"] == "2"
        assert "RANK" not in env and "WORLD_SIZE" not in env
        assert pod["metadata"]["labels"]["rljob.io/attempt"] == "1"
    service = cluster.api.get(f"/api/v1/namespaces/{namespace}/services/{NAME}-trainer")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True


def test_scale_up_and_down_follows_the_spec(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _ready_job(cluster, namespace)
    for replicas in (3, 1):
        patch_spec(cluster, namespace, NAME, {"roles": {"rollout": {"replicas": replicas}}})
        settled = {"desired": replicas, "ready": replicas, "restarts": 0}

        def rollout_settled(settled: dict[str, int] = settled) -> dict[str, Any] | None:
            job = get_rljob(cluster, namespace, NAME)
            rollout = job["status"]["roles"]["rollout"]
            counts = {k: rollout.get(k) for k in settled}
            serving = [m for m in rollout.get("engines") or [] if m["state"] == "serving"]
            return job if counts == settled and len(serving) == settled["ready"] else None

        wait_for(rollout_settled, 60, f"rollout at {replicas} ready replicas")
        (deployment,) = children(cluster, namespace, DEPLOYMENTS, NAME, "rollout")
        assert deployment["spec"]["replicas"] == replicas


def _replicaset_uids(cluster: Cluster, namespace: str, role: str) -> set[str]:
    return {
        rs["metadata"]["uid"] for rs in children(cluster, namespace, REPLICASETS, "grpo-demo", role)
    }


def test_image_update_rolls_only_the_rollout_role(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    demo = example("rljob-demo")
    demo["spec"].pop("checkpoint")
    _ready_job(cluster, namespace, demo)
    before = {
        role: _replicaset_uids(cluster, namespace, role)
        for role in ("rollout", "reference", "verifier")
    }
    (trainer,) = children(cluster, namespace, JOBS, "grpo-demo", "trainer")

    patch_spec(
        cluster,
        namespace,
        "grpo-demo",
        {"roles": {"rollout": {"image": "registry.example.com/rl/vllm:2"}}},
    )
    wait_for(
        lambda: len(_replicaset_uids(cluster, namespace, "rollout") - before["rollout"]) == 1,
        60,
        "a new rollout ReplicaSet",
    )
    assert _replicaset_uids(cluster, namespace, "reference") == before["reference"]
    assert _replicaset_uids(cluster, namespace, "verifier") == before["verifier"]
    (same_trainer,) = children(cluster, namespace, JOBS, "grpo-demo", "trainer")
    assert same_trainer["metadata"]["uid"] == trainer["metadata"]["uid"]
    # The demo's second-scale health values are said once per generation, generations 1 and 2.
    said = wait_for(
        lambda: _guidance_events(cluster, namespace, count=2), 60, "two guidance Warnings"
    )
    assert all("health.kvDrift.window 30s < 10m" in event["message"] for event in said)


def _guidance_events(cluster: Cluster, namespace: str, *, count: int) -> list[dict[str, Any]]:
    said = events(cluster, namespace, "BelowProductionGuidance")
    if len(said) > count:
        raise AssertionError(f"more than {count} guidance Warnings: {said}")
    return said if len(said) == count else []


def test_suspend_removes_pods_and_resume_starts_a_new_uncounted_attempt(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _ready_job(cluster, namespace)
    patch_spec(cluster, namespace, NAME, {"suspend": True})
    suspended = wait_condition(cluster, namespace, NAME, "Suspended")
    assert suspended["status"]["phase"] == "Suspended"
    wait_for(lambda: not children(cluster, namespace, PODS, NAME), 60, "every pod to be gone")
    # Foreground deletion: the Job object goes after its pods.
    wait_for(lambda: not children(cluster, namespace, JOBS, NAME), 60, "the trainer Job to be gone")
    assert all(d["spec"]["replicas"] == 0 for d in children(cluster, namespace, DEPLOYMENTS, NAME))

    patch_spec(cluster, namespace, NAME, {"suspend": False})
    resumed = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    assert resumed["status"]["attempt"] == 2
    assert resumed["status"].get("restarts", {}).get("total", 0) == 0
    assert [j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME)] == [
        f"{NAME}-trainer-a2"
    ]


def test_trainer_success_completes_the_job_and_scales_the_rest_down(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    done = {"metadata": {"annotations": {"sim.rljob.io/complete-after": "3s"}}}
    body = example(
        roles={
            "rollout": {"replicas": 1, "gpus": 1},
            "trainer": {"nodes": 2, "gpus": 8, "podTemplate": done},
        }
    )
    apply_rljob(cluster, namespace, body)
    job = wait_phase(cluster, namespace, NAME, "Succeeded", timeout=90)
    assert job["status"].get("completionTime")
    wait_for(
        lambda: all(
            d["spec"]["replicas"] == 0 for d in children(cluster, namespace, DEPLOYMENTS, NAME)
        ),
        30,
        "the rollout role to be scaled to zero",
    )


def test_trainer_failure_fails_the_job_with_the_ranks_reason(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    crash = {
        "metadata": {
            "annotations": {
                "sim.rljob.io/fail-exit-code": "93",
                "sim.rljob.io/fail-reason": "Error",
                "sim.rljob.io/fail-message": "bad dataset shard: /data/shard-17 is empty",
                "sim.rljob.io/fail-after": "2s",
            }
        }
    }
    body = example(
        roles={
            "rollout": {"replicas": 1, "gpus": 1},
            "trainer": {"nodes": 1, "gpus": 8, "podTemplate": crash},
        },
        failurePolicy={"rules": [{"onExitCodes": [93], "action": "FailJob"}]},
    )
    apply_rljob(cluster, namespace, body)
    job = wait_phase(cluster, namespace, NAME, "Failed", timeout=90)
    messages = " ".join(c.get("message", "") for c in job["status"]["conditions"])
    assert "bad dataset shard" in messages
    events = kubectl(
        cluster, "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={NAME}"
    )
    assert "Failed" in events


def test_unschedulable_gpus_are_reported_and_the_attempt_times_out_uncounted(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    # More GPUs per pod than any test node has (the schema caps `gpus` at 64 per pod, so the
    # request goes through the free-form podTemplate, as a custom device plugin's would).
    greedy = {"limits": {"nvidia.com/gpu": "5000"}, "requests": {"nvidia.com/gpu": "5000"}}
    template = {"spec": {"containers": [{"name": "trainer", "resources": greedy}]}}
    trainer = {"nodes": 2, "gpus": 8, "schedulingTimeout": "3s", "podTemplate": template}
    body = example(roles={"rollout": {"replicas": 1, "gpus": 1}, "trainer": trainer})
    apply_rljob(cluster, namespace, body)

    def scheduler_message() -> str | None:
        job = get_rljob(cluster, namespace, NAME)
        text = " ".join(c.get("message", "") for c in job.get("status", {}).get("conditions", []))
        return text if "Insufficient nvidia.com/gpu" in text else None

    wait_for(scheduler_message, 60, "a condition carrying the scheduler's message")
    job = wait_for(
        lambda: (j := get_rljob(cluster, namespace, NAME))["status"].get("attempt", 1) >= 2 and j,
        60,
        "the scheduling timeout to start a new attempt",
    )
    assert job["status"].get("restarts", {}).get("total", 0) == 0
    events = kubectl(
        cluster, "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={NAME}"
    )
    assert "Unschedulable" in events or "SchedulingTimeout" in events


def test_deleting_the_job_garbage_collects_every_child(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _ready_job(cluster, namespace)
    cluster.api.delete(rljob_path(namespace, NAME))

    def all_gone() -> bool:
        return not any(
            children(cluster, namespace, path, NAME) for path in (DEPLOYMENTS, JOBS, SERVICES, PODS)
        )

    wait_for(all_gone, 90, "every child to be garbage-collected")


def test_operator_identity_is_denied_what_it_does_not_need(
    cluster: Cluster, operator: Operator
) -> None:
    config = (operator.current.log.parent / "operator.kubeconfig").read_text()
    bearer = next(line.split(":", 1)[1].strip() for line in config.splitlines() if "token:" in line)
    api = KubeApi(Credentials(server=cluster.server, ca_file=cluster.run.pki.ca_crt, token=bearer))
    assert api.get("/api/v1/nodes")["items"]  # a granted read
    for method, path, body in (
        ("GET", "/api/v1/secrets", None),
        ("POST", "/api/v1/namespaces", {"metadata": {"name": "nope"}}),
        ("DELETE", "/api/v1/nodes/gpu-node-0", None),
    ):
        with pytest.raises(ApiError) as denied:
            api.request(method, path, body)
        assert denied.value.status == 403


def test_a_healthy_job_causes_no_writes(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _ready_job(cluster, namespace)
    # Settled: every role ready, each engine serving in the roster, the signals condition set
    # (this job has no metrics source, so no health round has progress to record).
    wait_for(lambda: settled_job(cluster, namespace, NAME, replicas=2), 90, "the job to settle")
    assert condition(get_rljob(cluster, namespace, NAME), "HealthSignalsAvailable")
    # Count from a few seconds later, when the settling pass's status write is done.
    start = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    passes_before = _metric(operator, "rljob_reconcile_duration_seconds_count")
    deadline = start + dt.timedelta(minutes=3)
    wait_for(lambda: dt.datetime.now(dt.UTC) >= deadline, 200, "three quiet minutes", interval=5)
    passes = _metric(operator, "rljob_reconcile_duration_seconds_count") - passes_before
    writes = [
        w
        for w in writes_by_user(cluster.run.audit_log, operator.user, since=start)
        if w.namespace == namespace
    ]
    assert passes >= 3
    assert writes == []


def test_a_new_renderer_does_not_roll_running_roles(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _ready_job(cluster, namespace)
    (deployment,) = children(cluster, namespace, DEPLOYMENTS, NAME, "rollout")
    (trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    replicasets = {rs["metadata"]["uid"] for rs in children(cluster, namespace, REPLICASETS, NAME)}

    operator.restart(env={"RLJOB_TEST_RENDER_MARKER": "v2"})
    passes = _metric(operator, "rljob_reconcile_duration_seconds_count")
    other = example()
    other["metadata"]["name"] = "grpo-after-upgrade"
    apply_rljob(cluster, namespace, other)
    wait_condition(cluster, namespace, "grpo-after-upgrade", "Ready", timeout=90)
    wait_for(
        lambda: _metric(operator, "rljob_reconcile_duration_seconds_count") >= passes + 3,
        60,
        "three more reconcile passes",
    )

    (new_deployment,) = children(cluster, namespace, DEPLOYMENTS, "grpo-after-upgrade", "rollout")
    annotations = new_deployment["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.get("rljob.io/render-marker") == "v2"  # the renderer did change
    (same,) = children(cluster, namespace, DEPLOYMENTS, NAME, "rollout")
    assert same["metadata"]["generation"] == deployment["metadata"]["generation"]
    assert {
        rs["metadata"]["uid"] for rs in children(cluster, namespace, REPLICASETS, NAME)
    } == replicasets
    (same_trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    assert same_trainer["metadata"]["uid"] == trainer["metadata"]["uid"]


def test_kubectl_plugin_shows_one_screen_status(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    job = _ready_job(cluster, namespace)
    text = render_status(job)
    assert f"RLJob {namespace}/{NAME}: Running (attempt 1)" in text
    assert re.search(r"^rollout\s+2/2\s+0$", text, re.MULTILINE) and "Ready=True" in text


def _request_restart(cluster: Cluster, namespace: str, value: str) -> None:
    annotations = {"rljob.io/restart-request": value}
    cluster.api.merge_patch(rljob_path(namespace, NAME), {"metadata": {"annotations": annotations}})


def test_manual_restart_is_honoured_once_per_nonce(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _ready_job(cluster, namespace)
    before = {
        rs["metadata"]["uid"] for rs in children(cluster, namespace, REPLICASETS, NAME, "rollout")
    }

    _request_restart(cluster, namespace, "trainer/first")
    wait_for(
        lambda: (
            [j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME)]
            == [f"{NAME}-trainer-a2"]
        ),
        60,
        "attempt 2 to replace attempt 1",
    )
    job = wait_condition(cluster, namespace, NAME, "Ready", timeout=60)
    assert job["status"]["attempt"] == 2
    assert job["status"]["lastRestartRequest"]["id"] == "first"

    _request_restart(cluster, namespace, "rollout/second")
    wait_for(
        lambda: (
            {
                rs["metadata"]["uid"]
                for rs in children(cluster, namespace, REPLICASETS, NAME, "rollout")
            }
            - before
        ),
        60,
        "a new rollout ReplicaSet",
    )
    passes = _metric(operator, "rljob_reconcile_duration_seconds_count")
    wait_for(
        lambda: _metric(operator, "rljob_reconcile_duration_seconds_count") >= passes + 2,
        60,
        "two passes",
    )
    job = get_rljob(cluster, namespace, NAME)
    assert job["status"]["attempt"] == 2  # the trainer nonce was not honoured twice
    assert [j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME)] == [
        f"{NAME}-trainer-a2"
    ]
