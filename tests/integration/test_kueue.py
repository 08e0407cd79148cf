"""A queued RLJob against the real Kueue (its manager built from sigs.k8s.io/kueue v0.17.0, its
webhooks on, RLJob under integrations.externalFrameworks, waitForPodsReady at 30 s): the
Workload the operator writes passes Kueue's validation, no pod exists before Kueue admits it,
the admission's flavor is in its pods, the operator writes PodsReady (before any weight sync of
a Gated job), a queue without quota or a missing one keeps it waiting with Kueue's reason, a
preempted job saves, queues and resumes from its newest checkpoint within its cohort's GPU
quota, a pod-set change re-queues it as Kueue's OutOfSync does, its end finishes the Workload,
a deleted RLJob's Workload gives its quota back, and a job without the label runs as before."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rljob.checkpoint_protocol.layout import CheckpointLocation
from rljob.dev.bed import BED_ALLOWLIST, OperatorProcess, start_operator
from rljob.dev.binaries import bin_dir
from rljob.dev.kubeapi import ApiError
from rljob.dev.kueue import KUEUE_NAMESPACE_LABEL, KueueManager
from rljob.reconcile.workload import workload_name
from rljob.sdk.checkpoint import CheckpointWriter
from rljob.vocabulary.kueue import RESOURCE_IN_USE_FINALIZER
from tests.helpers import quiet_for, wait_for
from tests.integration.conftest import Cluster, Operator, delete_namespace
from tests.integration.rljobs import (
    JOB_LABEL,
    PODS,
    apply_rljob,
    children,
    condition,
    example,
    get_rljob,
    rljob_path,
    trainer_env,
    wait_condition,
    wait_phase,
)
from tests.integration.s3_fixtures import S3Bucket
from tests.integration.test_operator_checkpoints import _commit

pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

GPU_PRODUCT = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}  # every bed node's
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "rl-gpus"
FLAVOR = "h100"
# Short, so a job that reported PodsReady late would be evicted within a test's time.
PODS_READY_TIMEOUT = 30


@pytest.fixture(scope="module")
def kueue(cluster: Cluster) -> Iterator[KueueManager]:
    manager = KueueManager(cluster.run, bin_dir(), pods_ready_timeout=f"{PODS_READY_TIMEOUT}s")
    manager.start(cluster.api)
    _apply_kueue(cluster, "ResourceFlavor", FLAVOR, {"spec": {"nodeLabels": GPU_PRODUCT}})
    try:
        yield manager
    finally:
        manager.stop(cluster.api)


def _cluster_queue(
    cluster: Cluster,
    gpus: int,
    name: str = CLUSTER_QUEUE,
    *,
    cohort: str | None = None,
    preemption: dict[str, str] | None = None,
) -> None:
    quota = {"cpu": "1000", "memory": "10Ti", "nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [
                    {
                        "name": FLAVOR,
                        "resources": [
                            {"name": resource, "nominalQuota": value}
                            for resource, value in quota.items()
                        ],
                    }
                ],
            }
        ],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    if preemption is not None:
        spec["preemption"] = preemption
    _apply_kueue(cluster, "ClusterQueue", name, {"spec": spec})


def _local_queue(cluster: Cluster, namespace: str, name: str, cluster_queue: str) -> None:
    spec = {"clusterQueue": cluster_queue}
    _apply_kueue(cluster, "LocalQueue", name, {"spec": spec}, namespace=namespace)


def _apply_kueue(
    cluster: Cluster, kind: str, name: str, fields: dict[str, Any], namespace: str | None = None
) -> None:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, **fields}
    scope = f"/namespaces/{namespace}" if namespace else ""
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    cluster.api.apply(f"{KUEUE}{scope}/{plural}/{name}", body, field_manager="test")


@pytest.fixture
def queued_namespace(cluster: Cluster, kueue: KueueManager) -> Iterator[str]:
    """A namespace Kueue manages, with a LocalQueue `team-a` on the ClusterQueue."""
    name = f"kueue-{secrets.token_hex(3)}"
    meta = {"name": name, "labels": {KUEUE_NAMESPACE_LABEL: "true"}}
    cluster.api.create("/api/v1/namespaces", {"metadata": meta})
    wait_for(
        lambda: cluster.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        30,
        f"the default ServiceAccount in {name}",
    )
    _local_queue(cluster, name, "team-a", CLUSTER_QUEUE)
    yield name
    delete_namespace(cluster, name)


@pytest.fixture
def kueue_operator(
    cluster: Cluster, operator: Operator, queued_namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """An operator run as with the chart's kueue.enabled, alone on the queued namespace (the
    session's operator stops meanwhile: it might watch every namespace)."""
    operator.current.stop()
    started = start_operator(
        cluster.api, cluster.run, tmp_path / "operator", "--resync-seconds=20", *BED_ALLOWLIST,
        watch=(queued_namespace,), kueue=True, env=operator.store.env(),
    )  # fmt: skip
    try:
        yield started
        _delete_every_rljob(cluster, queued_namespace)
    finally:
        started.stop()
        operator.ensure_default()


def _delete_every_rljob(cluster: Cluster, namespace: str) -> None:
    """The test's RLJobs deleted while its operator runs: their Workloads give their quota
    back (the operator takes Kueue's finalizer off a Workload whose RLJob is gone)."""
    cluster.api.delete(f"/apis/rljob.io/v1alpha1/namespaces/{namespace}/rljobs")
    wait_for(
        lambda: not cluster.api.get(f"{KUEUE}/namespaces/{namespace}/workloads")["items"],
        60,
        f"the Workloads in {namespace} gone with their RLJobs",
    )


def _queued_job(name: str) -> dict[str, Any]:
    body = example("rljob-minimal")
    body["metadata"] = {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}
    return body


def _workload(cluster: Cluster, namespace: str, job: dict[str, Any]) -> dict[str, Any] | None:
    name = workload_name(job["metadata"]["name"], job["metadata"]["uid"])
    try:
        return cluster.api.get(f"{KUEUE}/namespaces/{namespace}/workloads/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def _condition(body: dict[str, Any] | None, kind: str) -> tuple[str, str] | None:
    for c in ((body or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"], c["reason"]
    return None


def _pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return list(cluster.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"])


def test_a_queued_job_runs_once_kueue_admits_it(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    ns = queued_namespace
    _cluster_queue(cluster, gpus=0)
    job = apply_rljob(cluster, ns, _queued_job("queued"))
    workload = wait_for(lambda: _workload(cluster, ns, job), 60, "the job's Workload")
    assert workload["spec"]["queueName"] == "team-a"
    assert "reserved for internal kueue use" in _refused(cluster, ns, workload)
    assert [s["name"] for s in workload["spec"]["podSets"]] == ["rollout", "trainer"]

    def waiting() -> dict[str, Any] | None:
        queue = (get_rljob(cluster, ns, "queued").get("status") or {}).get("queue") or {}
        return queue if "insufficient quota" in queue.get("message", "") else None

    queue = wait_for(waiting, 60, "the job to say why Kueue keeps it waiting")
    assert queue["state"] == "Pending"
    assert _pods(cluster, ns) == []

    _cluster_queue(cluster, gpus=16)  # rollout 2 x 1 + trainer 1 x 8
    wait_for(
        lambda: _condition(_workload(cluster, ns, job), "Admitted") == ("True", "Admitted"),
        60,
        "Kueue to admit the Workload",
    )
    trainer = wait_for(
        lambda: _trainer_job(cluster, ns), 60, "the trainer Job, once the job is admitted"
    )
    template = trainer["spec"]["template"]
    assert template["spec"]["nodeSelector"] == GPU_PRODUCT
    assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "trainer"
    assert not trainer["spec"].get("suspend"), "Kueue's job integration suspended our child"
    wait_for(
        lambda: _condition(_workload(cluster, ns, job), "PodsReady") == ("True", "Started"),
        120,
        "the operator to report PodsReady",
    )
    status = get_rljob(cluster, ns, "queued")["status"]
    assert (status["queue"]["state"], status["queue"]["clusterQueue"]) == (
        "Admitted",
        CLUSTER_QUEUE,
    )


def test_a_job_whose_queue_does_not_exist_says_so(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    ns = queued_namespace
    body = _queued_job("lost")
    body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "nowhere"
    apply_rljob(cluster, ns, body)

    def said() -> dict[str, Any] | None:
        queue = (get_rljob(cluster, ns, "lost").get("status") or {}).get("queue") or {}
        return queue if "nowhere" in queue.get("message", "") else None

    # Kueue's words: "LocalQueue nowhere doesn't exist" (workload_controller.go:603)
    queue = wait_for(said, 60, "the job to say its LocalQueue does not exist")
    assert (queue["state"], queue["reason"], queue["localQueue"]) == (
        "Pending",
        "Inadmissible",
        "nowhere",
    )
    assert _pods(cluster, ns) == []


def _refused(cluster: Cluster, namespace: str, workload: dict[str, Any]) -> str:
    """Kueue's validating webhook answers for this namespace: a copy of the operator's Workload
    asking for the `pods` resource (Kueue's own, workload_webhook.go:165-174) is refused."""
    bad = {k: workload[k] for k in ("apiVersion", "kind", "spec")}
    bad["metadata"] = {"name": "refused", "namespace": namespace}
    container = bad["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
    container.setdefault("resources", {}).setdefault("requests", {})["pods"] = "1"
    with pytest.raises(ApiError) as refused:
        cluster.api.create(f"{KUEUE}/namespaces/{namespace}/workloads", bad)
    return str(refused.value.body)


def _trainer_job(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    jobs = cluster.api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    return next(iter(jobs), None)


COHORT_GPUS = 10  # the cohort's whole GPU quota: one job's (rollout 2 x 1 + trainer 1 x 8)
PRIORITIES = {"rl-low": 100, "rl-high": 1000}


@pytest.fixture
def cohort(cluster: Cluster, queued_namespace: str) -> Iterator[str]:
    """Two ClusterQueues in one cohort: `rl-lender` owns the cohort's GPUs and reclaims them from
    lower-priority borrowers; `rl-borrower` owns none. LocalQueues `high` and `low` on them."""
    for name, value in PRIORITIES.items():
        _apply_kueue(cluster, "WorkloadPriorityClass", name, {"value": value})
    reclaim = {"reclaimWithinCohort": "LowerPriority"}
    _cluster_queue(cluster, COHORT_GPUS, "rl-lender", cohort="rl", preemption=reclaim)
    _cluster_queue(cluster, 0, "rl-borrower", cohort="rl")
    _local_queue(cluster, queued_namespace, "high", "rl-lender")
    _local_queue(cluster, queued_namespace, "low", "rl-borrower")
    yield queued_namespace
    delete_namespace(cluster, queued_namespace)  # its Workloads go before their ClusterQueues
    for name in ("rl-lender", "rl-borrower"):
        cluster.api.delete(f"{KUEUE}/clusterqueues/{name}")


def _prioritised_job(name: str, queue: str, priority: str, **spec: Any) -> dict[str, Any]:
    body = example("rljob-minimal", **spec)
    labels = {"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/priority-class": priority}
    body["metadata"] = {"name": name, "labels": labels}
    return body


@dataclass
class QuotaWatch:
    """Samples the namespace four times a second: the GPUs its live pods request (never above the
    cohort's quota), and the pods of `job` while its status says it is queued (never any)."""

    cluster: Cluster
    namespace: str
    job: str
    samples: int = 0
    most_gpus: int = 0
    pods_while_queued: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> QuotaWatch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            before = self._queue_state()
            pods = [p for p in _pods(self.cluster, self.namespace) if not _ended(p)]
            after = self._queue_state()
            self.samples += 1
            self.most_gpus = max(self.most_gpus, sum(_gpus(p) for p in pods))
            if before == after and before[0] == "Pending":
                mine = [p for p in pods if _job_of(p) == self.job]
                self.pods_while_queued += [p["metadata"]["name"] for p in mine]

    def _queue_state(self) -> tuple[str, str]:
        job = get_rljob(self.cluster, self.namespace, self.job)
        queue = (job.get("status") or {}).get("queue") or {}
        return queue.get("state", ""), queue.get("since", "")


def _ended(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", 0))
        for c in pod["spec"]["containers"]
    )


def _job_of(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(JOB_LABEL, ""))


def _queue(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return (get_rljob(cluster, namespace, name).get("status") or {}).get("queue") or {}


def _in_state(cluster: Cluster, namespace: str, name: str, state: str) -> dict[str, Any] | None:
    queue = _queue(cluster, namespace, name)
    return queue if queue.get("state") == state else None


def test_a_preempted_job_saves_waits_and_resumes_from_its_newest_checkpoint(
    cluster: Cluster, kueue_operator: OperatorProcess, cohort: str, s3_bucket: S3Bucket
) -> None:
    ns, said = cohort, Timeline()
    checkpoint = {"uri": f"s3://{s3_bucket.name}/ckpt", "addressingStyle": "path"}
    low = _prioritised_job("grpo-low", "low", "rl-low", checkpoint=checkpoint)
    with QuotaWatch(cluster, ns, "grpo-low") as watch:
        said.mark("low applied")
        apply_rljob(cluster, ns, low)
        wait_for(lambda: _in_state(cluster, ns, "grpo-low", "Admitted"), 60, "grpo-low admitted")
        said.mark("low admitted (borrowing the lender's GPUs)")
        wait_condition(cluster, ns, "grpo-low", "Ready", timeout=90)
        said.mark("low Ready")
        location = CheckpointLocation(s3_bucket.name, "ckpt", ns, "grpo-low")
        writer = CheckpointWriter(location, 1, endpoint=s3_bucket.endpoint)
        _commit(writer, 50)

        apply_rljob(cluster, ns, _prioritised_job("grpo-high", "high", "rl-high"))
        evicted = wait_for(
            lambda: _in_state(cluster, ns, "grpo-low", "Evicted"), 60, "Kueue to evict grpo-low"
        )
        said.mark("low evicted")
        assert evicted["reason"] == "Preempted", evicted
        # The save its trainer makes in the SIGTERM window (kwok's pods run no process).
        _commit(writer, 60)
        wait_for(lambda: not _live_pods(cluster, ns, "grpo-low"), 60, "grpo-low's pods gone")
        said.mark("low's pods gone")
        queued = wait_for(
            lambda: _in_state(cluster, ns, "grpo-low", "Pending"), 60, "grpo-low queued again"
        )
        said.mark("low queued again, its quota given back")
        assert queued["message"].startswith("evicted (Preempted: "), queued
        job = wait_phase(cluster, ns, "grpo-low", "Suspended")
        suspended = condition(job, "Suspended")
        assert (suspended["reason"], job["status"]["restarts"]["total"]) == ("Queued", 0)
        assert "evicted (Preempted: " in suspended["message"], suspended
        wait_for(lambda: _in_state(cluster, ns, "grpo-high", "Admitted"), 60, "grpo-high admitted")
        said.mark("high admitted")

        # grpo-high's user suspends it: spec.active false, Kueue evicts it, its quota returns.
        cluster.api.merge_patch(rljob_path(ns, "grpo-high"), {"spec": {"suspend": True}})
        env = trainer_env(cluster, ns, 2, job="grpo-low", timeout=90)
        said.mark("low re-admitted, attempt 2 created")
        wait_condition(cluster, ns, "grpo-low", "Ready", timeout=90)
        said.mark("low Ready again")
    said.report()
    assert env["RLJOB_RESUME_STEP"] == "60", "attempt 2 resumes from the save made on eviction"
    status = get_rljob(cluster, ns, "grpo-low")["status"]
    assert (status["restarts"]["total"], status["attempts"][0]["endReason"]) == (0, "Evicted")
    assert status["checkpoint"]["resumedFrom"]["step"] == 60
    assert watch.samples >= 10 and 0 < watch.most_gpus <= COHORT_GPUS, watch
    assert watch.pods_while_queued == [], "a queued job had pods"


def _live_pods(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    return [p for p in _pods(cluster, namespace) if _job_of(p) == job and not _ended(p)]


@dataclass
class Timeline:
    """Seconds from the first mark, printed for the record (pytest -s)."""

    marks: list[tuple[str, float]] = field(default_factory=list)

    def mark(self, what: str) -> None:
        self.marks.append((what, time.monotonic()))

    def report(self) -> None:
        start = self.marks[0][1] if self.marks else 0.0
        for what, at in self.marks:
            print(f"  {at - start:6.1f} s  {what}")


def _gated_job(name: str) -> dict[str, Any]:
    """The disaggregated example, smaller: its engines wait for the trainer's weights, and no
    simulated trainer runs in the Kueue namespaces, so they wait for good."""
    body = example("rljob-disaggregated")
    rollout = {**body["spec"]["roles"]["rollout"], "replicas": 2}
    body["spec"]["roles"] = {"rollout": rollout, "trainer": {"nodes": 1, "gpus": 8}}
    del body["spec"]["checkpoint"]
    body["metadata"] = {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}
    return body


def test_a_gated_job_is_pods_ready_before_any_weight_sync(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    ns = queued_namespace
    _cluster_queue(cluster, gpus=16)
    job = apply_rljob(cluster, ns, _gated_job("gated"))
    wait_for(
        lambda: _condition(_workload(cluster, ns, job), "PodsReady") == ("True", "Started"),
        PODS_READY_TIMEOUT,
        "PodsReady within Kueue's waitForPodsReady timeout",
    )
    engines = children(cluster, ns, PODS, "gated", "rollout")
    assert len(engines) == 2 and not any(_pod_ready(p) for p in engines), "engines not gated"
    quiet_for(PODS_READY_TIMEOUT + 10)  # past the timeout: Kueue would have evicted by now
    workload = _workload(cluster, ns, job)
    assert _condition(workload, "Evicted") is None, workload
    assert _condition(workload, "Admitted") == ("True", "Admitted")
    assert _queue(cluster, ns, "gated")["state"] == "Admitted"


def _pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_a_pod_set_change_while_admitted_queues_the_job_again(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    ns = queued_namespace
    _cluster_queue(cluster, gpus=16)
    job = apply_rljob(cluster, ns, _queued_job("grown"))
    first = wait_for(
        lambda: _admitted_workload(cluster, ns, job), 60, "the first Workload admitted"
    )
    wait_for(lambda: len(_live_pods(cluster, ns, "grown")) == 3, 60, "the job's 3 pods")
    patch = {"spec": {"roles": {"rollout": {"replicas": 3}}}}
    cluster.api.merge_patch(rljob_path(ns, "grown"), patch)

    def readmitted() -> dict[str, Any] | None:
        found = _admitted_workload(cluster, ns, job)
        new = found is not None and found["metadata"]["uid"] != first["metadata"]["uid"]
        return found if new else None

    # Kueue's OutOfSync: the pods stop, the Workload is replaced, then queued and admitted.
    second = wait_for(readmitted, 90, "a new Workload for 3 rollout pods, admitted")
    assert [s["count"] for s in second["spec"]["podSets"]] == [3, 1]
    wait_for(lambda: len(_live_pods(cluster, ns, "grown")) == 4, 60, "the job's 4 pods")
    status = get_rljob(cluster, ns, "grown")["status"]
    assert (status["attempt"], status["restarts"]["total"]) == (2, 0), status


def _admitted_workload(
    cluster: Cluster, namespace: str, job: dict[str, Any]
) -> dict[str, Any] | None:
    found = _workload(cluster, namespace, job)
    return found if _condition(found, "Admitted") == ("True", "Admitted") else None


def test_a_role_pinned_off_every_flavor_stays_queued_with_kueues_reason(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    """Kueue assigns no flavor whose node labels the pod set's nodeSelector contradicts, so the
    job is never admitted where its pods could not run (the operator's FailedToStart for such
    an admission is the unit tier's)."""
    ns = queued_namespace
    _cluster_queue(cluster, gpus=16)
    body = _queued_job("pinned")
    body["spec"]["roles"]["trainer"]["nodeSelector"] = {"nvidia.com/gpu.product": "A100"}
    apply_rljob(cluster, ns, body)

    def said() -> dict[str, Any] | None:
        queue = _queue(cluster, ns, "pinned")
        # flavorassigner.go:951
        return (
            queue
            if f"flavor {FLAVOR} doesn't match node affinity" in queue.get("message", "")
            else None
        )

    queue = wait_for(said, 60, "the job to say no flavor matches its trainer's nodeSelector")
    assert queue["state"] == "Pending"
    assert _pods(cluster, ns) == []


def test_a_job_that_ends_finishes_its_workload_and_gives_its_quota_back(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    ns = queued_namespace
    _cluster_queue(cluster, gpus=16)
    body = _queued_job("done")
    done = {"metadata": {"annotations": {"sim.rljob.io/complete-after": "3s"}}}
    body["spec"]["roles"]["trainer"]["podTemplate"] = done
    job = apply_rljob(cluster, ns, body)
    wait_phase(cluster, ns, "done", "Succeeded", timeout=90)

    def finished() -> dict[str, Any] | None:
        found = _workload(cluster, ns, job)
        held = RESOURCE_IN_USE_FINALIZER in (found or {}).get("metadata", {}).get("finalizers", [])
        return (
            found if _condition(found, "Finished") == ("True", "Succeeded") and not held else None
        )

    wait_for(finished, 60, "the Workload Finished and its quota released")
    assert _queue(cluster, ns, "done")["state"] == "Finished"


def test_a_job_without_the_queue_label_runs_as_before(
    cluster: Cluster, kueue_operator: OperatorProcess, queued_namespace: str
) -> None:
    """Kueue manages jobs without a queue name in this namespace (manageJobsWithoutQueueName),
    yet the children of an RLJob are left alone: RLJob is an external framework, and Kueue's
    Job and Deployment integrations skip what a managed kind owns."""
    ns = queued_namespace
    body = _queued_job("unqueued")
    del body["metadata"]["labels"]
    apply_rljob(cluster, ns, body)
    wait_for(lambda: len(_live_pods(cluster, ns, "unqueued")) == 3, 60, "the job's 3 pods")
    trainer = _trainer_job(cluster, ns)
    assert trainer is not None and not trainer["spec"].get("suspend")
    workloads = cluster.api.get(f"{KUEUE}/namespaces/{ns}/workloads")["items"]
    assert workloads == [], [w["metadata"]["name"] for w in workloads]
    assert "queue" not in get_rljob(cluster, ns, "unqueued")["status"]
