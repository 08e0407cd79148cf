"""Helpers for tests that drive RLJobs through the real API server and the operator."""

from __future__ import annotations

import copy
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import yaml

from rljob.dev.binaries import bin_dir
from rljob.dev.kubeapi import ApiError
from tests.helpers import wait_for
from tests.integration.conftest import Cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JOB_LABEL = "rljob.io/job"
ROLE_LABEL = "rljob.io/role"


def example(name: str = "rljob-minimal", **spec_changes: Any) -> dict[str, Any]:
    docs = yaml.safe_load_all((EXAMPLES / f"{name}.yaml").read_text())
    body: dict[str, Any] = next(d for d in docs if d and d.get("kind") == "RLJob")
    body["spec"].update(copy.deepcopy(spec_changes))
    return body


def rljob_path(namespace: str, name: str = "") -> str:
    tail = f"/{name}" if name else ""
    return f"/apis/rljob.io/v1alpha1/namespaces/{namespace}/rljobs{tail}"


def apply_rljob(cluster: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    body = {**body, "metadata": {**body["metadata"], "namespace": namespace}}
    path = rljob_path(namespace, body["metadata"]["name"]) + "?fieldValidation=Strict"
    return cluster.api.apply(path, body, field_manager="rljob-tests")


def admission_refusal(cluster: Cluster, namespace: str, body: dict[str, Any]) -> str | None:
    """Applies `body` under a fresh name (never a terminating one): the API's refusal, else None
    with what was created deleted again. For waiting until an admission policy helm just created
    is read by the API server."""
    body = {**body, "metadata": {"name": f"admitted-{secrets.token_hex(3)}"}}
    try:
        created = apply_rljob(cluster, namespace, body)
    except ApiError as exc:
        return str(exc)
    cluster.api.delete(rljob_path(namespace, created["metadata"]["name"]))
    return None


def patch_spec(cluster: Cluster, namespace: str, name: str, spec: dict[str, Any]) -> None:
    cluster.api.merge_patch(rljob_path(namespace, name), {"spec": spec})


def get_rljob(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.api.get(rljob_path(namespace, name))


def condition(job: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = job.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def wait_condition(
    cluster: Cluster,
    namespace: str,
    name: str,
    kind: str,
    *,
    status: str = "True",
    timeout: float = 60,
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = get_rljob(cluster, namespace, name)
        return job if condition(job, kind).get("status") == status else None

    return wait_for(reached, timeout, f"{name} condition {kind}={status}")


def settled_job(cluster: Cluster, namespace: str, name: str, *, replicas: int) -> dict[str, Any]:
    """The job once its status reports the current generation, Ready, with `replicas` ready
    engines, each serving in the roster, and no restart in progress: every write the job's
    state calls for is done, however late a loaded machine lets it land. Else raises naming
    what it saw (wait_for reports the last error)."""
    job = get_rljob(cluster, namespace, name)
    status = job.get("status", {})
    rollout = status.get("roles", {}).get("rollout") or {}
    seen = {
        "generation": job["metadata"]["generation"],
        "observedGeneration": status.get("observedGeneration"),
        "ready": condition(job, "Ready").get("status"),
        "restarting": condition(job, "Restarting").get("status"),
        "rollout": rollout,
    }
    roster = [member.get("state") for member in rollout.get("engines") or []]
    if (
        seen["observedGeneration"] != seen["generation"]
        or seen["ready"] != "True"
        or seen["restarting"] == "True"
        or rollout.get("ready") != replicas
        or roster != ["serving"] * replicas
    ):
        raise ValueError(f"not settled: {seen}")
    return job


def wait_phase(
    cluster: Cluster, namespace: str, name: str, phase: str, timeout: float = 60
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = get_rljob(cluster, namespace, name)
        return job if job.get("status", {}).get("phase") == phase else None

    return wait_for(reached, timeout, f"{name} phase {phase}")


def children(
    cluster: Cluster, namespace: str, plural_path: str, job: str, role: str | None = None
) -> list[dict[str, Any]]:
    selector = f"{JOB_LABEL}={job}" + (f",{ROLE_LABEL}={role}" if role else "")
    items: list[dict[str, Any]] = cluster.api.get(
        f"{plural_path.format(ns=namespace)}?labelSelector={selector}"
    )["items"]
    return items


DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"
REPLICASETS = "/apis/apps/v1/namespaces/{ns}/replicasets"
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
SERVICES = "/api/v1/namespaces/{ns}/services"
PODS = "/api/v1/namespaces/{ns}/pods"


def trainer_env(
    cluster: Cluster,
    namespace: str,
    attempt: int,
    *,
    job: str = "grpo-minimal",
    timeout: float = 60,
) -> dict[str, str]:
    """The env of the trainer Job of `job`'s attempt, once the operator has created it."""

    def created() -> dict[str, Any] | None:
        name = f"{job}-trainer-a{attempt}"
        jobs = children(cluster, namespace, JOBS, job)
        return next((j for j in jobs if j["metadata"]["name"] == name), None)

    trainer = wait_for(created, timeout, f"{job}'s trainer Job of attempt {attempt}")
    env = trainer["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", "") for e in env}


NCCL_WATCHDOG = (
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE) "
    "ran for 600000 milliseconds before timing out."
)
NCCL_FAULT = {  # the simulator fails the container with these (a kwok stage consumes them)
    "sim.rljob.io/fail-exit-code": "1",
    "sim.rljob.io/fail-reason": "Error",
    "sim.rljob.io/fail-message": NCCL_WATCHDOG,
}


def pod_uids(cluster: Cluster, namespace: str, job: str, role: str) -> dict[str, str]:
    """The role's pods, name -> uid: a restarted pod is a new uid or gone."""
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in children(cluster, namespace, PODS, job, role)
    }


def fail_rank0(cluster: Cluster, namespace: str, job: str, attempt: int = 1) -> dict[str, Any]:
    """Fails rank 0 of the trainer attempt with an NCCL watchdog abort, once it runs."""

    def rank0() -> dict[str, Any] | None:
        return next(
            (
                pod
                for pod in children(cluster, namespace, PODS, job, "trainer")
                if pod["metadata"]["labels"].get("rljob.io/attempt") == str(attempt)
                and pod["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
                == "0"
                and pod["status"].get("phase") == "Running"
            ),
            None,
        )

    pod: dict[str, Any] = wait_for(rank0, 60, f"rank 0 of attempt {attempt} running")
    path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"
    cluster.api.merge_patch(path, {"metadata": {"annotations": NCCL_FAULT}})
    return pod


def kubectl(cluster: Cluster, *args: str) -> str:
    out = subprocess.run(
        [str(bin_dir() / "kubectl"), f"--kubeconfig={cluster.run.kubeconfig}", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout


def events(cluster: Cluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    """The namespace's Events with `reason`."""
    path = f"/api/v1/namespaces/{namespace}/events?fieldSelector=reason%3D{reason}"
    found: list[dict[str, Any]] = cluster.api.get(path)["items"]
    return found


# The drift window and warm-up every second-scale health scenario runs with.
DRIFT_WINDOW, DRIFT_WARMUP = 20.0, 10.0


def second_scale_health(source: dict[str, Any], **detectors: Any) -> dict[str, Any]:
    """spec.health for the bed's scenarios: evaluated every second, a 20 s drift window after
    10 s of warm-up, a 10-minute cooldown; `detectors` add or override detector settings."""
    return {
        "source": source,
        "interval": "1s",
        "kvDrift": {
            "threshold": 0.2,
            "window": f"{DRIFT_WINDOW:.0f}s",
            "warmup": f"{DRIFT_WARMUP:.0f}s",
            "cooldown": "10m",
        },
        **detectors,
    }


# A restarted gang or pod comes back within seconds on the bed.
FAST_BACKOFF = {"backoff": {"initial": "1s", "max": "2s"}}


def engines_job(prometheus_url: str, profile: dict[str, Any], **rollout: Any) -> dict[str, Any]:
    """A job of simulated rollout engines (one GPU each, `profile` their simulator profile) and
    a one-node trainer, on second-scale health and a fast backoff; `rollout` its role's fields."""
    env = [{"name": "RLJOB_SIM_PROFILE", "value": json.dumps(profile)}]
    return example(
        roles={"rollout": {"gpus": 1, "env": env, **rollout}, "trainer": {"nodes": 1, "gpus": 8}},
        health=second_scale_health({"prometheus": {"url": prometheus_url}}),
        failurePolicy=FAST_BACKOFF,
    )
