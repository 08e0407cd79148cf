"""Simulated workloads scraped by a real Prometheus on the local control plane.

Pods labelled like the operator's children (a rollout Deployment, an Indexed trainer Job, a
verifier Deployment) get simulated workloads; Prometheus (Debian's package, 1 s scrape) finds
them through the simulator's file_sd and its series carry namespace and pod. Rates follow the
profile, injected faults show in PromQL, deleted pods leave the targets, and every listener is
on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import json
import math
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rljob.dev.prometheus import PrometheusServer
from rljob.dev.sim import SimClient, Simulator
from rljob.dev.sim.launcher import start_with_prometheus
from tests.helpers import wait_for
from tests.integration.conftest import Cluster
from tests.integration.worker import WATCHED

# xdist_group: one worker: the module's own simulator and Prometheus are started once.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("sim_prometheus")]

JOB = "sim1"
ROLLOUTS = 3
THROUGHPUT = 1000.0  # tokens/s, from the pods' profile annotation
TRAINERS = 2
RATE_WINDOW = "10s"
MANAGED = {"app.kubernetes.io/managed-by": "rljob-operator", "rljob.io/job": JOB}


@pytest.fixture(scope="module")
def stack(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Simulator, PrometheusServer]]:
    """A simulator and Prometheus of this module's own: these tests count targets and series,
    which the session's stack, attached to every earlier test's pods, would blur. Like the
    session's, it watches only this worker's namespaces."""
    sim, prometheus = start_with_prometheus(
        tmp_path_factory.mktemp("sim-prometheus-module"), cluster.run.kubeconfig,
        namespaces=WATCHED,
    )  # fmt: skip
    yield sim, prometheus
    prometheus.stop()
    sim.stop()


@pytest.fixture(scope="module")
def simulator(stack: tuple[Simulator, PrometheusServer]) -> Simulator:
    return stack[0]


@pytest.fixture(scope="module")
def prometheus(stack: tuple[Simulator, PrometheusServer]) -> PrometheusServer:
    return stack[1]


def _labels(role: str, **extra: str) -> dict[str, str]:
    return {**MANAGED, "rljob.io/role": role, **extra}


def _env(namespace: str, role: str, **extra: str) -> list[dict[str, str]]:
    values = {"RLJOB_NAME": JOB, "RLJOB_NAMESPACE": namespace, "RLJOB_ROLE": role, **extra}
    return [{"name": k, "value": v} for k, v in values.items()]


def _deployment(
    namespace: str, role: str, replicas: int, profile: dict[str, Any]
) -> dict[str, Any]:
    labels = _labels(role)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{JOB}-{role}", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"rljob.io/job": JOB, "rljob.io/role": role}},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"sim.rljob.io/profile": json.dumps(profile)},
                },
                "spec": {
                    "containers": [
                        {"name": role, "image": "sim/vllm:1", "env": _env(namespace, role)}
                    ]
                },
            },
        },
    }


def _trainer_job(namespace: str) -> dict[str, Any]:
    labels = _labels("trainer", **{"rljob.io/attempt": "1"})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{JOB}-trainer-a1", "labels": labels},
        "spec": {
            "completions": TRAINERS,
            "parallelism": TRAINERS,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "sim/trainer:1",
                            "env": _env(namespace, "trainer", RLJOB_ATTEMPT="1"),
                        }
                    ],
                },
            },
        },
    }


class Workloads:
    """One test's simulated RLJob children and how to see them."""

    def __init__(
        self, cluster: Cluster, namespace: str, sim: Simulator, prom: PrometheusServer
    ) -> None:
        self.cluster, self.ns, self.sim, self.prom = cluster, namespace, sim, prom
        self.client: SimClient = sim.client()

    def create(self, verifiers: int = 0) -> None:
        deployments = f"/apis/apps/v1/namespaces/{self.ns}/deployments"
        self.cluster.api.create(
            deployments, _deployment(self.ns, "rollout", ROLLOUTS, {"throughput": THROUGHPUT})
        )
        if verifiers:
            self.cluster.api.create(
                deployments,
                _deployment(self.ns, "verifier", verifiers, {"requests_per_second": 50}),
            )
        self.cluster.api.create(f"/apis/batch/v1/namespaces/{self.ns}/jobs", _trainer_job(self.ns))

    def running(self, role: str) -> set[str]:
        pods = self.cluster.api.get(
            f"/api/v1/namespaces/{self.ns}/pods?labelSelector=rljob.io/role%3D{role}"
        )["items"]
        return {
            p["metadata"]["name"]
            for p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        }

    def wait_running(self, role: str, count: int) -> set[str]:
        def running() -> set[str] | None:
            names = self.running(role)
            return names if len(names) == count else None

        return wait_for(running, 60, f"{count} Running {role} pods in {self.ns}")

    def values(self, expr: str) -> dict[str, float]:
        return self.prom.values(expr)

    def sel(self, role: str = "rollout", **labels: str) -> str:
        pairs = {"namespace": self.ns, "role": role, **labels}
        return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"

    def rates(self) -> dict[str, float]:
        return self.values(f"rate(vllm:generation_tokens_total{self.sel()}[{RATE_WINDOW}])")

    def wait_series(self, metric: str, role: str, pods: set[str]) -> None:
        wait_for(
            lambda: set(self.values(f"{metric}{self.sel(role)}")) == pods,
            60,
            f"Prometheus series {metric} for {sorted(pods)}",
        )


@pytest.fixture
def bed(
    cluster: Cluster, namespace: str, simulator: Simulator, prometheus: PrometheusServer
) -> Iterator[Workloads]:
    workloads = Workloads(cluster, namespace, simulator, prometheus)
    yield workloads
    workloads.client.clear(namespace=namespace)


def _within(values: dict[str, float], expected: float, pods: set[str], tolerance: float) -> bool:
    return set(values) == pods and all(
        abs(v - expected) <= tolerance * expected for v in values.values()
    )


def test_series_for_every_running_pod_with_namespace_and_pod_labels(bed: Workloads) -> None:
    bed.create()
    rollouts = bed.wait_running("rollout", ROLLOUTS)
    trainers = bed.wait_running("trainer", TRAINERS)
    bed.wait_series("vllm:generation_tokens_total", "rollout", rollouts)
    bed.wait_series("rljob_trainer_heartbeat_timestamp_seconds", "trainer", trainers)
    (sample, *_) = bed.prom.query(f"vllm:generation_tokens_total{bed.sel()}")
    labels = sample["metric"]
    assert labels["namespace"] == bed.ns and labels["pod"] in rollouts
    assert labels["rljob_job"] == JOB and labels["role"] == "rollout"
    assert labels["job"] == "rljob-workloads"
    assert labels["model_name"] == "sim-model" and labels["engine"] == "0"
    for metric in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:num_preemptions_total",
    ):
        assert set(bed.values(f"{metric}{bed.sel()}")) == rollouts, metric
    awake = bed.values(f"vllm:engine_sleep_state{bed.sel(sleep_state='awake')}")
    assert awake == dict.fromkeys(rollouts, 1.0)
    phases = bed.prom.query(f"rljob_trainer_phase{bed.sel('trainer')} == 1")
    assert {s["metric"]["pod"] for s in phases} == trainers
    # The simulator's own metrics are scraped too (its own target, on its own scrape schedule).
    wait_for(
        lambda: bed.values('rljob_sim_workloads{job="rljob-sim",role="rollout"}'),
        30,
        "the simulator's own rljob_sim_workloads scraped",
    )


def test_rate_matches_the_profile_and_a_drift_shows(bed: Workloads) -> None:
    bed.create()
    rollouts = bed.wait_running("rollout", ROLLOUTS)
    wait_for(
        lambda: _within(bed.rates(), THROUGHPUT, rollouts, 0.15),
        60,
        f"rate() of every engine within 15% of {THROUGHPUT} tok/s",
    )
    drifting = sorted(rollouts)[0]
    result = bed.client.inject("drift", namespace=bed.ns, pod=drifting, drop=0.3)
    assert result["matched"] == [f"{bed.ns}/{drifting}"]

    def drifted() -> bool:
        rates = bed.rates()
        others = {pod: rate for pod, rate in rates.items() if pod != drifting}
        return _within(
            {drifting: rates.get(drifting, 0.0)}, 0.7 * THROUGHPUT, {drifting}, 0.15
        ) and (_within(others, THROUGHPUT, rollouts - {drifting}, 0.15))

    wait_for(drifted, 60, f"{drifting} at 70% of {THROUGHPUT} tok/s and its peers unchanged")
    hit_rate = bed.values(
        f"rate(vllm:prefix_cache_hits_total{bed.sel(pod=drifting)}[{RATE_WINDOW}])"
        f" / rate(vllm:prefix_cache_queries_total{bed.sel(pod=drifting)}[{RATE_WINDOW}])"
    )
    assert hit_rate[drifting] < 0.7 * 0.9


def test_sleep_flattens_the_counter_and_sets_the_sleep_state(bed: Workloads) -> None:
    bed.create()
    rollouts = bed.wait_running("rollout", ROLLOUTS)
    bed.wait_series("vllm:generation_tokens_total", "rollout", rollouts)
    result = bed.client.inject("sleep", namespace=bed.ns, job=JOB, role="rollout")
    assert len(result["matched"]) == ROLLOUTS
    wait_for(
        lambda: (
            bed.values(f"vllm:engine_sleep_state{bed.sel(sleep_state='weights_offloaded')}")
            == dict.fromkeys(rollouts, 1.0)
        ),
        30,
        "engine_sleep_state{sleep_state=weights_offloaded} = 1 on every engine",
    )
    assert bed.values(f"vllm:engine_sleep_state{bed.sel(sleep_state='awake')}") == dict.fromkeys(
        rollouts, 0.0
    )
    flat = wait_for(
        lambda: (
            v
            if set(v := bed.values(f"changes(vllm:generation_tokens_total{bed.sel()}[5s])"))
            == rollouts
            and not any(v.values())
            else None
        ),
        30,
        "the token counters flat for 5 s",
    )
    assert flat == dict.fromkeys(rollouts, 0.0)
    assert bed.values(f"vllm:num_requests_waiting{bed.sel()}") == dict.fromkeys(rollouts, 0.0)
    bed.client.inject("sleep", namespace=bed.ns, job=JOB, role="rollout", on=False)
    wait_for(
        lambda: _within(
            bed.values(f"rate(vllm:generation_tokens_total{bed.sel()}[3s])"),
            THROUGHPUT,
            rollouts,
            0.25,
        ),
        30,
        "the engines generating again after waking up",
    )


def test_verifier_latency_injection_shows_in_histogram_quantile(bed: Workloads) -> None:
    bed.create(verifiers=1)
    (verifier,) = bed.wait_running("verifier", 1)
    bed.wait_series("rljob_verifier_request_duration_seconds_count", "verifier", {verifier})
    bed.client.inject("latency", namespace=bed.ns, pod=verifier, p99_seconds=8.0)
    expr = (
        "histogram_quantile(0.99, rate("
        f"rljob_verifier_request_duration_seconds_bucket{bed.sel('verifier')}[5s]))"
    )
    wait_for(
        lambda: 5.0 < bed.values(expr).get(verifier, math.nan) <= 10.0,
        30,
        "the verifier's p99 in the 5-10 s bucket",
    )


def test_deleting_a_pod_removes_its_target(bed: Workloads) -> None:
    bed.create()
    rollouts = bed.wait_running("rollout", ROLLOUTS)
    bed.wait_series("vllm:generation_tokens_total", "rollout", rollouts)
    victim = sorted(rollouts)[0]

    def published(path: Path) -> set[str]:
        return {
            g["labels"]["pod"]
            for g in json.loads(path.read_text())
            if g["labels"]["namespace"] == bed.ns
        }

    assert victim in published(bed.sim.targets_file)
    # kwok hands out pod IPs from the plane's range inside 127/8 (where the simulator can serve).
    pod = bed.cluster.api.get(f"/api/v1/namespaces/{bed.ns}/pods/{victim}")
    assert ipaddress.ip_address(pod["status"]["podIP"]).is_loopback
    bed.cluster.api.delete(f"/api/v1/namespaces/{bed.ns}/pods/{victim}")
    wait_for(
        lambda: victim not in published(bed.sim.targets_file),
        30,
        f"{victim} gone from the file_sd targets",
    )

    def prometheus_dropped() -> bool:
        return not [
            t
            for t in bed.prom.targets()
            if t["labels"].get("namespace") == bed.ns and t["labels"].get("pod") == victim
        ]

    wait_for(prometheus_dropped, 30, f"Prometheus to drop {victim}'s target")
    replacement = bed.wait_running("rollout", ROLLOUTS)
    assert victim not in replacement
    wait_for(
        lambda: published(bed.sim.targets_file) >= replacement,
        30,
        "the replacement pod published",
    )


def _listening(pid: int) -> list[tuple[str, int]]:
    process = psutil.Process(pid)
    return [
        (conn.laddr.ip, conn.laddr.port)
        for proc in (process, *process.children(recursive=True))
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]


def test_every_listener_is_on_loopback(bed: Workloads) -> None:
    bed.create(verifiers=1)
    bed.wait_running("rollout", ROLLOUTS)
    wait_for(
        lambda: len(bed.client.workloads(namespace=bed.ns)) == ROLLOUTS + TRAINERS + 1,
        60,
        "every workload attached",
    )
    assert bed.sim.pid is not None and bed.prom.pid is not None
    sim_sockets = _listening(bed.sim.pid)
    prom_sockets = _listening(bed.prom.pid)
    assert len(sim_sockets) >= ROLLOUTS + TRAINERS + 2  # workloads plus the control API
    assert (("127.0.0.1", bed.sim.port)) in sim_sockets
    assert prom_sockets == [("127.0.0.1", bed.prom.port)]
    assert {ip for ip, _ in sim_sockets + prom_sockets} == {"127.0.0.1"}


def test_simulator_stops_cleanly_on_sigterm(cluster: Cluster, tmp_path: Path) -> None:
    sim = Simulator(tmp_path, cluster.run.kubeconfig, namespaces=["kube-system"])
    sim.start()
    assert sim.process is not None
    process = sim.process.process
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    sim.stop()
