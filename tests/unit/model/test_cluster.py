"""The in-memory cluster behaves like the real one where the operator can tell: API answers
(409, 404, 422), server-side apply, rolls, foreground deletion, terminating pods, the Job and
Deployment controllers, faults, and an index that lags its watches."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rljob.adapters.kube import KubeError
from rljob.adapters.observe import summarize_child, summarize_pod
from rljob.adapters.paths import object_path
from tests.unit.model.cluster import NAMESPACE, Cluster, ProcessDied

JSON = dict[str, Any]
JOB = "demo"
LABELS = {"app.kubernetes.io/managed-by": "rljob-operator", "rljob.io/job": JOB}
NCCL = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7) ran for 600000 ms"


def rljob() -> JSON:
    meta = {"name": JOB, "namespace": NAMESPACE}
    return {"apiVersion": "rljob.io/v1alpha1", "kind": "RLJob", "metadata": meta, "spec": {}}


def deployment(replicas: int = 4, max_unavailable: int = 1, **labels: str) -> JSON:
    pod_labels = {**LABELS, "rljob.io/role": "rollout"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"{JOB}-rollout",
            "namespace": NAMESPACE,
            "labels": {**pod_labels, **labels},
        },
        "spec": {
            "replicas": replicas,
            "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": max_unavailable}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [{"name": "engine", "image": "vllm:1"}]},
            },
        },
    }


def trainer_job(attempt: int = 1, nodes: int = 2) -> JSON:
    labels = {**LABELS, "rljob.io/role": "trainer", "rljob.io/attempt": str(attempt)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{JOB}-trainer-a{attempt}",
            "namespace": NAMESPACE,
            "labels": labels,
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "rl:1"}],
                },
            },
        },
    }


async def running(cluster: Cluster, *manifests: JSON, steps: int = 2) -> None:
    """Applies the manifests and lets the controllers and kubelets run them."""
    for manifest in manifests:
        await cluster.apply(manifest)
    for _ in range(steps):
        cluster.step_controllers()


def names(cluster: Cluster, role: str) -> list[str]:
    return [p["metadata"]["name"] for p in cluster.pods(role)]


def live(cluster: Cluster, kind: str, name: str) -> JSON:
    body = cluster.get(kind, name)
    assert body is not None, f"{kind} {name} is gone"
    return body


# -- API answers ---------------------------------------------------------------------------------

Call = Callable[[Cluster, JSON], Awaitable[object]]


async def _stale_status(c: Cluster, job: JSON) -> object:
    await c.patch_status(NAMESPACE, JOB, {"phase": "Running"}, resource_version="1")
    return await c.patch_status(NAMESPACE, JOB, {"phase": "Failed"}, resource_version="1")


async def _injected_conflict(c: Cluster, job: JSON) -> object:
    c.conflict_next_status_writes()
    return await c.patch_status(NAMESPACE, JOB, {"phase": "Running"})


async def _wrong_uid(c: Cluster, job: JSON) -> object:
    await c.delete("rljob.io/v1alpha1", "RLJob", NAMESPACE, JOB, "not-its-uid")
    return None


async def _missing_raw(c: Cluster, job: JSON) -> object:
    return await c.request("delete", object_path("v1", "Pod", NAMESPACE, "nope"), {})


async def _merge_patch_of_another_uid(c: Cluster, job: JSON) -> object:
    patch = {"metadata": {"uid": "not-its-uid", "labels": {"rljob.io/slot-0": "held"}}}
    path = object_path("rljob.io/v1alpha1", "RLJob", NAMESPACE, JOB)
    return await c.request("patch", path, patch, content_type="application/merge-patch+json")


async def _failing_write(c: Cluster, job: JSON) -> object:
    c.fail_next_writes(status=500)
    return await c.apply(deployment())


async def _named_event_twice(c: Cluster, job: JSON) -> object:
    event = {"metadata": {"name": f"{JOB}.gang-a2", "namespace": NAMESPACE}, "reason": "X"}
    await c.request("post", object_path("v1", "Event", NAMESPACE), event)
    return await c.request("post", object_path("v1", "Event", NAMESPACE), event)


async def _job_template_change(c: Cluster, job: JSON) -> object:
    await c.apply(trainer_job())
    changed = trainer_job()
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "rl:2"
    return await c.apply(changed)


@pytest.mark.parametrize(
    ("call", "status"),
    [
        pytest.param(_stale_status, 409, id="status-patch-on-stale-resourceVersion"),
        pytest.param(_injected_conflict, 409, id="injected-status-conflict"),
        pytest.param(_wrong_uid, 409, id="delete-with-another-uid"),
        pytest.param(_merge_patch_of_another_uid, 409, id="merge-patch-with-another-uid"),
        pytest.param(_missing_raw, 404, id="raw-delete-of-missing-object"),
        pytest.param(_failing_write, 500, id="injected-write-failure"),
        pytest.param(_named_event_twice, 409, id="named-event-posted-twice"),
        pytest.param(_job_template_change, 422, id="job-template-is-immutable"),
    ],
)
async def test_api_errors(call: Call, status: int) -> None:
    cluster = Cluster()
    job = cluster.create(rljob())
    before = cluster.revision
    with pytest.raises(KubeError) as caught:
        await call(cluster, job)
    assert caught.value.status == status
    assert cluster.log[-1].code == status
    assert cluster.revision >= before


@pytest.mark.parametrize(
    ("resource_version", "conflicts"),
    [
        pytest.param("current", 0, id="guarded-write-with-current-version"),
        pytest.param(None, 0, id="unguarded-write"),
        pytest.param(None, 1, id="retry-after-one-injected-conflict"),
    ],
)
async def test_status_patch_merges_and_bumps_version(
    resource_version: str | None, conflicts: int
) -> None:
    cluster = Cluster()
    job = cluster.create(rljob())
    await cluster.patch_status(NAMESPACE, JOB, {"phase": "Running", "attempt": 1})
    cluster.conflict_next_status_writes(conflicts)
    for _ in range(conflicts):
        with pytest.raises(KubeError):
            await cluster.patch_status(NAMESPACE, JOB, {"phase": "Failed"})
    version = live(cluster, "RLJob", JOB)["metadata"]["resourceVersion"]
    wanted = version if resource_version == "current" else None
    updated = await cluster.patch_status(
        NAMESPACE, JOB, {"attempt": 2, "phase": None}, resource_version=wanted
    )
    assert updated["status"] == {"attempt": 2}
    assert int(updated["metadata"]["resourceVersion"]) > int(version)
    assert updated["metadata"]["generation"] == job["metadata"]["generation"]


async def test_missing_delete_through_the_adapter_is_quiet() -> None:
    cluster = Cluster()
    await cluster.delete("v1", "Pod", NAMESPACE, "gone", "uid")
    assert cluster.log[-1].code == 404


async def test_the_process_dies_before_the_armed_write() -> None:
    cluster = Cluster()
    cluster.create(rljob())
    cluster.die_before_write(1)
    await cluster.patch_status(NAMESPACE, JOB, {"phase": "Running"})
    with pytest.raises(ProcessDied):
        await cluster.apply(deployment())
    assert cluster.get("Deployment", f"{JOB}-rollout") is None
    await cluster.apply(deployment())  # the next process writes again


# -- server-side apply and rolls ------------------------------------------------------------------


async def test_apply_replaces_what_it_applied_and_keeps_the_rest() -> None:
    cluster = Cluster()
    await running(cluster, deployment(replicas=2, extra="x"))
    roll = {"spec": {"template": {"metadata": {"annotations": {"rljob.io/restarted-at": "n1"}}}}}
    path = object_path("apps/v1", "Deployment", NAMESPACE, f"{JOB}-rollout")
    await cluster.request("patch", path, roll, content_type="application/merge-patch+json")
    rolled = live(cluster, "Deployment", f"{JOB}-rollout")
    reapplied = await cluster.apply(deployment(replicas=3))
    template = reapplied["spec"]["template"]["metadata"]
    assert template["annotations"] == {"rljob.io/restarted-at": "n1"}, "another manager's field"
    assert "extra" not in reapplied["metadata"]["labels"], "a label we no longer apply"
    assert reapplied["spec"]["replicas"] == 3
    assert reapplied["status"] == rolled["status"], "status is the controller's"
    assert reapplied["metadata"]["generation"] == rolled["metadata"]["generation"] + 1
    assert reapplied["metadata"]["uid"] == rolled["metadata"]["uid"]


@pytest.mark.parametrize(
    ("replicas", "max_unavailable"),
    [
        pytest.param(4, 1, id="four-one-at-a-time"),
        pytest.param(4, 2, id="four-two-at-a-time"),
        pytest.param(1, 1, id="single-replica"),
    ],
)
async def test_a_roll_keeps_within_max_unavailable(replicas: int, max_unavailable: int) -> None:
    cluster = Cluster()
    await running(cluster, deployment(replicas, max_unavailable))
    old = set(names(cluster, "rollout"))
    path = object_path("apps/v1", "Deployment", NAMESPACE, f"{JOB}-rollout")
    roll = {"spec": {"template": {"metadata": {"annotations": {"rljob.io/restarted-at": "n"}}}}}
    await cluster.request("patch", path, roll, content_type="application/merge-patch+json")
    stale = summarize_child(live(cluster, "Deployment", f"{JOB}-rollout"))
    assert stale.updated_replicas == replicas, "status is stale until the controller's step"
    assert stale.restarted_at == "n"
    for _ in range(4 * replicas):
        cluster.step_controllers()
        cluster.kubelet_confirm_all()
        pods = [p for p in cluster.pods("rollout") if not p["metadata"].get("deletionTimestamp")]
        ready = [p for p in pods if summarize_pod(p).ready]
        assert len(ready) >= replicas - max_unavailable
    deployed = live(cluster, "Deployment", f"{JOB}-rollout")
    assert deployed["status"]["observedGeneration"] == deployed["metadata"]["generation"]
    assert summarize_child(deployed).updated_replicas == replicas
    assert not old & set(names(cluster, "rollout")), "every pod replaced, under a new name"


# -- pods and the kubelet -------------------------------------------------------------------------


async def _pod(cluster: Cluster) -> JSON:
    await running(cluster, deployment(replicas=1))
    return cluster.pods("rollout")[0]


@pytest.mark.parametrize(
    ("grace", "node_ready", "terminating", "confirmed"),
    [
        pytest.param(None, True, True, True, id="graceful-until-the-kubelet-confirms"),
        pytest.param(0, True, False, False, id="grace-zero-is-gone-at-once"),
        pytest.param(None, False, True, False, id="a-down-node-never-confirms"),
        pytest.param(0, False, False, False, id="forced-on-a-down-node"),
    ],
)
async def test_pod_deletion(
    grace: int | None, node_ready: bool, terminating: bool, confirmed: bool
) -> None:
    cluster = Cluster()
    pod = await _pod(cluster)
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    if not node_ready:
        cluster.node_not_ready(pod["spec"]["nodeName"], evict=False)
    await cluster.delete("v1", "Pod", NAMESPACE, name, uid, grace_period_seconds=grace)
    left = cluster.get("Pod", name)
    assert (left is not None and summarize_pod(left).deleting) == terminating
    assert cluster.kubelet_confirm(name) == confirmed
    if confirmed or grace == 0:
        assert cluster.get("Pod", name) is None


async def test_an_unscheduled_pod_goes_at_once() -> None:
    cluster = Cluster(nodes=1)
    cluster.node_not_ready("gpu-0", evict=False)
    await running(cluster, deployment(replicas=1))
    pod = cluster.pods("rollout")[0]
    assert "0/1 nodes are available" in summarize_pod(pod).unschedulable_message
    await cluster.delete("v1", "Pod", NAMESPACE, pod["metadata"]["name"], pod["metadata"]["uid"])
    assert cluster.get("Pod", pod["metadata"]["name"]) is None


async def test_a_container_restarts_in_place() -> None:
    cluster = Cluster()
    name = (await _pod(cluster))["metadata"]["name"]
    cluster.crash_container(name, "OOMKilled", 137, "CUDA out of memory")
    crashed = summarize_pod(live(cluster, "Pod", name))
    assert (crashed.restart_count, crashed.reason, crashed.exit_code) == (1, "OOMKilled", 137)
    assert (crashed.phase, crashed.ready) == ("Running", False)
    cluster.step_controllers()
    assert summarize_pod(live(cluster, "Pod", name)).ready


async def test_pod_labels_merge_under_their_uid() -> None:
    """Kube.set_pod_labels' merge patch: a value sets, None removes, the other labels stay; one
    naming another uid (a namesake's) is refused (409) and changes nothing."""
    cluster = Cluster()
    pod = await _pod(cluster)
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    assert await cluster.set_pod_labels(NAMESPACE, name, uid, {"rljob.io/slot-0": "held"})
    namesake = "its-namesake"
    assert not await cluster.set_pod_labels(NAMESPACE, name, namesake, {"rljob.io/slot-1": "held"})
    assert await cluster.set_pod_labels(
        NAMESPACE, name, uid, {"rljob.io/slot-0": None, "rljob.io/slot-2": "held"}
    )
    labels = live(cluster, "Pod", name)["metadata"]["labels"]
    assert summarize_pod(live(cluster, "Pod", name)).slots == {2}
    assert labels["rljob.io/role"] == "rollout"
    assert [w.code for w in cluster.log if w.verb == "patch"] == [200, 409, 200]


async def test_behind_a_closed_gate_the_containers_are_ready_and_the_pod_is_not() -> None:
    """A readiness gate holds Ready back, not ContainersReady; the pod has its IP, and a
    container that crashes behind the closed gate starts again."""
    cluster = Cluster()
    gated = deployment(replicas=1)
    gated["spec"]["template"]["spec"]["readinessGates"] = [{"conditionType": "rljob.io/gate"}]
    await running(cluster, gated)
    name = cluster.pods("rollout")[0]["metadata"]["name"]
    cluster.crash_container(name)
    cluster.step_controllers()
    pod = summarize_pod(live(cluster, "Pod", name))
    assert (pod.containers_ready, pod.ready, pod.container_running, pod.restart_count) == (
        True, False, True, 1
    )  # fmt: skip
    assert pod.ip.startswith("10.244.")


async def test_a_node_going_not_ready_evicts_its_pods_for_good() -> None:
    cluster = Cluster(nodes=1)
    name = (await _pod(cluster))["metadata"]["name"]
    cluster.node_not_ready("gpu-0")
    evicted = summarize_pod(live(cluster, "Pod", name))
    assert (evicted.deleting, evicted.ready, evicted.disruption) == (
        True, False, "DeletionByTaintManager"
    )  # fmt: skip
    assert cluster.kubelet_confirm_all() == 0
    cluster.node_ready("gpu-0")
    assert cluster.kubelet_confirm_all() == 1


# -- the Job controller and foreground deletion -------------------------------------------------


async def test_an_indexed_job_runs_its_ranks() -> None:
    cluster = Cluster()
    await running(cluster, trainer_job(attempt=3, nodes=3))
    pods = sorted(cluster.pods("trainer"), key=lambda p: summarize_pod(p).completion_index or 0)
    summaries = [summarize_pod(p) for p in pods]
    assert [(s.attempt, s.completion_index, s.phase) for s in summaries] == [
        (3, 0, "Running"), (3, 1, "Running"), (3, 2, "Running")
    ]  # fmt: skip
    assert all(p["metadata"]["name"].startswith(f"{JOB}-trainer-a3-") for p in pods)
    assert summarize_child(live(cluster, "Job", f"{JOB}-trainer-a3")).ready_replicas == 3


@pytest.mark.parametrize(
    ("end", "failure_target", "failed", "succeeded"),
    [
        pytest.param("nccl", True, False, False, id="rank-fails-others-still-terminating"),
        pytest.param("nccl-confirmed", True, True, False, id="rank-fails-others-confirmed"),
        pytest.param("deleted-by-hand", True, True, False, id="rank-deleted-by-hand"),
        pytest.param("all-succeed", False, False, True, id="every-rank-succeeds"),
    ],
)
async def test_how_a_trainer_job_ends(
    end: str, failure_target: bool, failed: bool, succeeded: bool
) -> None:
    cluster = Cluster()
    await running(cluster, trainer_job())
    first, second = names(cluster, "trainer")
    if end.startswith("nccl"):
        cluster.fail_pod(first, 1, "Error", NCCL)
    elif end == "deleted-by-hand":
        cluster.remove("Pod", first)
        cluster.kubelet_confirm(first)
    else:
        cluster.succeed_pod(first)
        cluster.succeed_pod(second)
    cluster.step_controllers()
    if end in {"nccl-confirmed", "deleted-by-hand"}:
        cluster.kubelet_confirm_all()
        cluster.step_controllers()
    job = live(cluster, "Job", f"{JOB}-trainer-a1")
    conditions = {c["type"] for c in job["status"]["conditions"]}
    assert ("FailureTarget" in conditions) == failure_target
    assert summarize_child(job).failed == failure_target
    assert ("Failed" in conditions) == failed
    assert summarize_child(job).succeeded == succeeded
    if end == "nccl":
        assert "exit code 1" in summarize_child(job).failed_message
        assert summarize_pod(live(cluster, "Pod", second)).deleting, "the Job kills the others"


@pytest.mark.parametrize(
    ("propagation", "job_waits", "pods_owned"),
    [
        pytest.param("Foreground", True, True, id="foreground-waits-for-its-pods"),
        pytest.param("Background", False, True, id="background-collects-them-later"),
        pytest.param(None, False, False, id="the-api-default-orphans-them"),
    ],
)
async def test_deleting_a_job(propagation: str | None, job_waits: bool, pods_owned: bool) -> None:
    cluster = Cluster()
    await running(cluster, trainer_job())
    job = live(cluster, "Job", f"{JOB}-trainer-a1")
    options: JSON = {"preconditions": {"uid": job["metadata"]["uid"]}}
    if propagation:
        options["propagationPolicy"] = propagation
    await cluster.request(
        "delete", object_path("batch/v1", "Job", NAMESPACE, job["metadata"]["name"]), options
    )
    assert (cluster.get("Job", job["metadata"]["name"]) is not None) == job_waits
    cluster.step_controllers()
    pods = cluster.pods("trainer")
    assert len(pods) == 2
    assert all(bool(p["metadata"]["ownerReferences"]) == pods_owned for p in pods)
    assert all(summarize_pod(p).deleting == pods_owned for p in pods)
    cluster.kubelet_confirm_all()
    cluster.step_controllers()
    assert cluster.get("Job", job["metadata"]["name"]) is None
    assert len(cluster.pods("trainer")) == (0 if pods_owned else 2)


async def test_a_job_with_a_rank_on_a_dead_node_never_finishes_failing() -> None:
    cluster = Cluster()
    await running(cluster, trainer_job())
    first, second = cluster.pods("trainer")
    cluster.node_not_ready(second["spec"]["nodeName"])
    cluster.fail_pod(first["metadata"]["name"], 1, "Error", NCCL)
    for _ in range(3):
        cluster.step_controllers()
        cluster.kubelet_confirm_all()
    job = summarize_child(live(cluster, "Job", f"{JOB}-trainer-a1"))
    assert job.failed, "FailureTarget is there"
    conditions = live(cluster, "Job", job.name)["status"]["conditions"]
    assert "Failed" not in {c["type"] for c in conditions}, "a rank is still terminating"


# -- the index ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kinds", "deliveries", "pods_seen", "job_seen"),
    [
        pytest.param(("Pod",), 1, 0, True, id="pods-lag-one-delivery"),
        pytest.param(("Job",), 1, 2, False, id="jobs-lag-one-delivery"),
        pytest.param(("Pod", "Job"), 2, 0, False, id="both-lag-two-deliveries"),
        pytest.param((), 0, 2, True, id="no-lag"),
    ],
)
async def test_the_index_lags_per_watch(
    kinds: tuple[str, ...], deliveries: int, pods_seen: int, job_seen: bool
) -> None:
    cluster = Cluster()
    cluster.index.deliver()
    cluster.index.lag(deliveries, kinds)
    await running(cluster, trainer_job())
    for _ in range(max(1, deliveries)):
        cluster.index.deliver()
    observed = cluster.index.observed(("rl", JOB))
    assert len(observed.pods) == pods_seen
    assert any(c.kind == "Job" for c in observed.children) == job_seen
    cluster.index.deliver()
    caught_up = cluster.index.observed(("rl", JOB))
    assert (len(caught_up.pods), len(caught_up.children)) == (2, 1)


async def test_a_relist_catches_up_and_forgets_what_went() -> None:
    cluster = Cluster()
    await running(cluster, trainer_job())
    cluster.index.deliver()
    cluster.index.lag(10)
    pods = cluster.pods("trainer")
    for pod in pods:
        await cluster.delete(
            "v1",
            "Pod",
            NAMESPACE,
            pod["metadata"]["name"],
            pod["metadata"]["uid"],
            grace_period_seconds=0,
        )
    cluster.index.deliver()
    assert len(cluster.index.observed(("rl", JOB)).pods) == 2, "still lagging"
    cluster.index.relist()
    assert len(cluster.index.observed(("rl", JOB)).pods) == 0


async def test_the_kopf_views_match_observed() -> None:
    cluster = Cluster()
    created = cluster.create(rljob())
    await running(cluster, trainer_job(), deployment(replicas=2))
    cluster.index.deliver()
    key = ("rl", JOB)
    views = cluster.index.kopf_indexes()
    observed = cluster.index.observed(key)
    assert sorted(p.name for p in views["pods_idx"].get(key, [])) == [p.name for p in observed.pods]
    assert [c.name for c in views["jobs_idx"][key]] == [f"{JOB}-trainer-a1"]
    assert list(views["deployments_idx"]) == [key]
    assert views["services_idx"].get(("rl", "other"), []) == []
    shown = cluster.index.rljob(JOB)
    assert shown is not None and shown["metadata"]["uid"] == created["metadata"]["uid"]


async def test_edits_bump_generation_only_for_spec() -> None:
    cluster = Cluster()
    created = cluster.create(rljob())

    def annotate(body: JSON) -> None:
        body["metadata"]["annotations"] = {"rljob.io/restart-request": "trainer/n1"}

    def suspend(body: JSON) -> None:
        body["spec"]["suspend"] = True

    annotated = cluster.edit("RLJob", JOB, annotate)
    suspended = cluster.edit("RLJob", JOB, suspend)
    generations = [b["metadata"]["generation"] for b in (created, annotated, suspended)]
    assert generations == [1, 1, 2]
    assert copy.deepcopy(suspended["metadata"]["annotations"]) == {
        "rljob.io/restart-request": "trainer/n1"
    }
