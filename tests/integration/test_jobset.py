"""A JobSet against the real JobSet controller (its manager built from sigs.k8s.io/jobset v0.12.0,
its webhooks on, rljob.dev.jobset): its webhooks default and validate what the bed sends, its
Jobs and pods run on the bed's kwok nodes, and its failure policy works as documented
(api/jobset/v1alpha2/jobset_types.go, FailurePolicy; pkg/controllers/failure_policy.go at
09e9a3b): a failed Job under RestartJobSet, the default action (failure_policy.go:45), recreates
every Job of the JobSet (status.restarts + 1) while status.restartsCountTowardsMax is below
failurePolicy.maxRestarts (failure_policy.go:226), and the next failure fails the JobSet with
ReachedMaxRestarts, its active Jobs deleted (jobset_controller.go:163-166).

A pod fails as on the bed's other tests: kwok's pod-fail stage (dev/kwok-stages.yaml) ends a
Running pod Failed with the exit code its sim.rljob.io/fail-* annotations give."""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from rljob.dev.binaries import bin_dir
from rljob.dev.jobset import JOBSET_API, JOBSET_NAMESPACE_LABEL, JobSetManager
from rljob.dev.kubeapi import ApiError
from rljob.dev.processes import tail
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, delete_namespace

# Its webhook configurations are cluster-scoped: one JobSet manager per plane.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

NAME = "rl"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
FAULT = {"sim.rljob.io/fail-exit-code": "1", "sim.rljob.io/fail-reason": "Error"}
# rollout: 2 Jobs of 1 pod; trainer: 1 Job of 2 pods in parallel.
SHAPE = {"rollout": (2, 1), "trainer": (1, 2)}
JOB_NAMES = {f"{NAME}-{rjob}-{i}" for rjob, (replicas, _) in SHAPE.items() for i in range(replicas)}
POD_COUNT = sum(replicas * parallelism for replicas, parallelism in SHAPE.values())


@pytest.fixture(scope="module")
def jobset(cluster: Cluster) -> Iterator[JobSetManager]:
    manager = JobSetManager(cluster.run, bin_dir())
    manager.start(cluster.api)
    try:
        yield manager
    finally:
        manager.stop(cluster.api)


@pytest.fixture
def jobset_namespace(cluster: Cluster, jobset: JobSetManager) -> Iterator[str]:
    """A namespace JobSet's webhooks cover."""
    name = f"jobset-{secrets.token_hex(3)}"
    meta = {"name": name, "labels": {JOBSET_NAMESPACE_LABEL: "true"}}
    cluster.api.create("/api/v1/namespaces", {"metadata": meta})
    wait_for(
        lambda: cluster.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        30,
        f"the default ServiceAccount in {name}",
    )
    yield name
    delete_namespace(cluster, name)


def _replicated_job(name: str, replicas: int, parallelism: int) -> dict[str, Any]:
    container = {
        "name": name,
        "image": f"rljob.io/sim-{name}:dev",  # kwok runs no image
        "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
    }
    pod_spec = {"restartPolicy": "Never", "containers": [container]}
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": 0,  # one failed pod fails its Job
                "template": {"spec": pod_spec},
            }
        },
    }


def _jobset(max_restarts: int, **failure_policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": NAME},
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts, **failure_policy},
            "replicatedJobs": [_replicated_job(n, r, p) for n, (r, p) in SHAPE.items()],
        },
    }


def _selected(cluster: Cluster, path: str) -> list[dict[str, Any]]:
    selector = urllib.parse.quote(f"{JOBSET_NAME}={NAME}")
    return list(cluster.api.get(f"{path}?labelSelector={selector}")["items"])


def _jobs(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return _selected(cluster, f"/apis/batch/v1/namespaces/{ns}/jobs")


def _pods(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return _selected(cluster, f"/api/v1/namespaces/{ns}/pods")


def _get_jobset(cluster: Cluster, ns: str) -> dict[str, Any]:
    return cluster.api.get(f"{JOBSET_API}/namespaces/{ns}/jobsets/{NAME}")


def _condition(jobset: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conditions = (jobset.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def _running_attempt(
    cluster: Cluster, ns: str, attempt: int
) -> tuple[dict[str, str], dict[str, str]]:
    """Waits for the JobSet's attempt `attempt` to run: its 3 Jobs (and no other) and their 4 pods
    Running on the kwok nodes, and JobSet counting every Job ready. Returns the Jobs' and pods'
    uids by name."""

    def running() -> tuple[dict[str, str], dict[str, str]] | None:
        jobs, pods = _jobs(cluster, ns), _pods(cluster, ns)
        if {j["metadata"]["name"] for j in jobs} != JOB_NAMES or len(pods) != POD_COUNT:
            return None
        for item in (*jobs, *pods):
            if item["metadata"]["labels"][RESTART_ATTEMPT] != str(attempt):
                return None
            if item["metadata"].get("deletionTimestamp"):
                return None
        if any(p["status"].get("phase") != "Running" for p in pods):
            return None
        status = _get_jobset(cluster, ns).get("status") or {}
        ready = {s["name"]: s.get("ready", 0) for s in status.get("replicatedJobsStatus") or []}
        if ready != {rjob: replicas for rjob, (replicas, _) in SHAPE.items()}:
            return None
        job_uids = {j["metadata"]["name"]: j["metadata"]["uid"] for j in jobs}
        pod_uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        return job_uids, pod_uids

    return wait_for(running, 90, f"attempt {attempt}'s {POD_COUNT} pods Running, its Jobs ready")


def _fail_one_pod(cluster: Cluster, ns: str, replicated_job: str) -> str:
    """Ends one Running pod of `replicated_job` Failed (exit code 1); returns its name."""
    pod = next(
        p for p in _pods(cluster, ns) if p["metadata"]["labels"][REPLICATED_JOB] == replicated_job
    )
    name = str(pod["metadata"]["name"])
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    cluster.api.merge_patch(path, {"metadata": {"annotations": FAULT}})
    wait_for(
        lambda: cluster.api.get(path)["status"].get("phase") == "Failed",
        30,
        f"kwok to end {name} Failed",
    )
    return name


def test_a_jobset_restarts_every_job_then_fails_once_max_restarts_is_spent(
    cluster: Cluster, jobset: JobSetManager, jobset_namespace: str
) -> None:
    ns = jobset_namespace
    try:
        _restart_then_fail(cluster, ns)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- jobset manager ---\n{tail(jobset.log, 40)}") from None


def _restart_then_fail(cluster: Cluster, ns: str) -> None:
    # Its validating webhook answers here: the alpha InPlaceRestart gate is off (as by default).
    with pytest.raises(ApiError) as refused:
        cluster.api.create(
            f"{JOBSET_API}/namespaces/{ns}/jobsets",
            _jobset(1, restartStrategy="InPlaceRestart"),
        )
    assert "InPlaceRestart feature gate is disabled" in str(refused.value.body)

    created = cluster.api.create(f"{JOBSET_API}/namespaces/{ns}/jobsets", _jobset(1))
    # Its mutating webhook ran: defaults only it sets (jobset_webhook.go:111-139).
    assert created["spec"]["network"]["enableDNSHostnames"] is True
    assert created["spec"]["successPolicy"] == {"operator": "All"}

    first_jobs, first_pods = _running_attempt(cluster, ns, attempt=0)
    trainer = cluster.api.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{NAME}-trainer-0")
    assert trainer["spec"]["parallelism"] == 2
    nodes = {p["spec"]["nodeName"] for p in _pods(cluster, ns)}
    assert nodes and all(n.startswith("gpu-node-") for n in nodes), nodes

    failed = _fail_one_pod(cluster, ns, "trainer")
    wait_for(
        lambda: (_get_jobset(cluster, ns).get("status") or {}).get("restarts") == 1,
        60,
        f"JobSet to restart after {failed} failed",
    )
    said = wait_for(
        lambda: _event(cluster, ns, "RestartJobSetFailurePolicyAction"),
        30,
        "JobSet's event for the restart",
    )
    assert said == (
        f"applying RestartJobSet failure policy action (first failed job: {NAME}-trainer-0)"
    )
    second_jobs, second_pods = _running_attempt(cluster, ns, attempt=1)
    # Every Job was recreated, not only the failed one: new uids, no pod of attempt 0 left.
    assert set(second_jobs) == set(first_jobs) == JOB_NAMES
    assert not set(second_jobs.values()) & set(first_jobs.values())
    assert not set(second_pods.values()) & set(first_pods.values())
    current = _get_jobset(cluster, ns)
    assert (current["status"]["restarts"], current["status"]["restartsCountTowardsMax"]) == (1, 1)
    assert _condition(current, "Failed") is None

    failed = _fail_one_pod(cluster, ns, "rollout")

    def ended() -> dict[str, Any] | None:
        js = _get_jobset(cluster, ns)
        condition = _condition(js, "Failed")
        return js if condition is not None and condition["status"] == "True" else None

    final = wait_for(ended, 60, f"JobSet to fail after {failed} failed with maxRestarts spent")
    condition = _condition(final, "Failed")
    assert condition is not None and condition["reason"] == "ReachedMaxRestarts", condition
    assert final["status"]["terminalState"] == "Failed"
    assert final["status"]["restarts"] == 1, "no third attempt"
    wait_for(
        lambda: all(
            j["metadata"].get("deletionTimestamp") or _job_ended(j) for j in _jobs(cluster, ns)
        ),
        60,
        "the failed JobSet's active Jobs deleted",
    )
    assert all(j["metadata"]["labels"][RESTART_ATTEMPT] == "1" for j in _jobs(cluster, ns))


def _event(cluster: Cluster, ns: str, reason: str) -> str | None:
    """The message of the JobSet's newest Event with `reason`, if any."""
    events = cluster.api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    mine = [
        e
        for e in events
        if e.get("reason") == reason and e["involvedObject"].get("kind") == "JobSet"
    ]
    return str(mine[-1].get("message", "")) if mine else None


def _job_ended(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Failed", "Complete") and c["status"] == "True" for c in conditions)
