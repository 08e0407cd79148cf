"""The bench's own test bed, in a temporary run folder: the control plane (bench profile), an
S3 server, the simulated workloads scraped by Prometheus, and the operator under its
ServiceAccount. Everything binds to 127.0.0.1 and is stopped by `stop()`.

Two simulator/Prometheus pairs: the fleet's scrapes every 30 s (the jobs' health interval; a
1 s scrape of a thousand pods would measure Prometheus, not the operator), the recovery
scenario's every second, started only for it.
"""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from rljob.dev.audit import AuditWrite, read_writes
from rljob.dev.bed import (
    BED_ALLOWLIST,
    OperatorProcess,
    ensure_namespace,
    install_crd,
    start_operator,
)
from rljob.dev.binaries import bin_dir
from rljob.dev.controlplane import ControlPlane, wait_until
from rljob.dev.kubeapi import KubeApi
from rljob.dev.processes import free_ports
from rljob.dev.prometheus import PrometheusServer
from rljob.dev.s3server import S3Server
from rljob.dev.sim import Simulator
from rljob.dev.sim.launcher import start_with_prometheus

T = TypeVar("T")
PROFILE = "bench"
FIELD_MANAGER = "rljob-bench"
FLEET_NAMESPACE = "bench-fleet"
PROBE_NAMESPACE = "bench-probe"
RECOVERY_NAMESPACE = "bench-recovery"
BUCKET = "rljob-bench"
FLEET_SCRAPE = "30s"
FLEET_HEALTH_INTERVAL = "30s"
# The fleet's simulator lists a thousand pods per poll: every 5 s, not every 0.5 s.
FLEET_SIM_POLL = 5.0
# The fleet's trainers step at a production pace (the simulator's default compresses a step
# into seconds for the tests): rollouts for 2 minutes, a minute of training, a checkpoint every
# 10 steps. Each step is a new policy generation.
FLEET_TRAINER = {
    "wait_for_rollouts": 120.0,
    "step_seconds": 60.0,
    "checkpoint_every": 10,
    "checkpoint_seconds": 60.0,
    "heartbeat_interval": 10.0,
}


def rljob_path(namespace: str, name: str = "") -> str:
    return f"/apis/rljob.io/v1alpha1/namespaces/{namespace}/rljobs" + (f"/{name}" if name else "")


def example(repo: Path) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((repo / "examples" / "rljob-minimal.yaml").read_text())
    return body


@dataclass
class MetricsStack:
    simulator: Simulator
    prometheus: PrometheusServer

    def stop(self) -> None:
        self.prometheus.stop()
        self.simulator.stop()


@dataclass
class BenchBed:
    run_dir: Path
    repo: Path
    plane: ControlPlane = field(init=False)
    store: S3Server = field(init=False)
    fleet: MetricsStack | None = None
    recovery: MetricsStack | None = None
    operator: OperatorProcess | None = None
    profile_to: Path | None = None  # the operator's profile, written when it stops
    profile_kind: str = "cpu"  # or "memory" (see bench/profiling/sitecustomize.py)

    def __post_init__(self) -> None:
        self.plane = ControlPlane(self.run_dir / "plane", bin_dir(), PROFILE)
        self.store = S3Server(self.run_dir / "s3", bin_dir(), free_ports(1)[0])

    @property
    def api(self) -> KubeApi:
        return self.plane.api()

    def start(self) -> None:
        self.plane.start()
        api = self.api
        install_crd(api)
        for namespace in (FLEET_NAMESPACE, PROBE_NAMESPACE, RECOVERY_NAMESPACE):
            ensure_namespace(api, namespace)
        self.store.start()
        self.store.create_bucket(BUCKET)
        self.fleet = self._metrics(
            "fleet-metrics",
            scrape_interval=FLEET_SCRAPE,
            namespaces=(FLEET_NAMESPACE, PROBE_NAMESPACE),
            poll_interval=FLEET_SIM_POLL,
            profiles={"trainer": FLEET_TRAINER},
        )
        self.operator = start_operator(
            api, self.plane.dir, self.run_dir / "operator", *BED_ALLOWLIST, env=self._operator_env()
        )

    def restart_profile(self) -> None:
        """The operator's CPU profile starts over now (a window of its own)."""
        if self.profile_to is not None and self.operator is not None:
            os.kill(self.operator.process.pid, signal.SIGUSR2)

    def dump_profile(self, timeout: float = 300.0) -> None:
        """Asks the profiled operator to write its profile now, and waits for the file."""
        if self.profile_to is None or self.operator is None:
            return
        os.kill(self.operator.process.pid, signal.SIGUSR1)
        wait_until(self.profile_to.exists, timeout, "the operator's profile", interval=1.0)

    def _operator_env(self) -> dict[str, str]:
        env = self.store.env()
        if self.profile_to is not None:
            env["PYTHONPATH"] = str(self.repo / "bench" / "profiling")  # its sitecustomize
            env["BENCH_PROFILE_OUT"] = str(self.profile_to)
            env["BENCH_PROFILE_KIND"] = self.profile_kind
            env["BENCH_PROFILE_FRAMES"] = os.environ.get("BENCH_PROFILE_FRAMES", "1")
        return env

    def start_recovery_metrics(self) -> MetricsStack:
        if self.recovery is None:
            self.recovery = self._metrics(
                "recovery-metrics", scrape_interval="1s", namespaces=(RECOVERY_NAMESPACE,)
            )
        return self.recovery

    def _metrics(self, folder: str, scrape_interval: str, **sim: Any) -> MetricsStack:
        simulator, prometheus = start_with_prometheus(
            self.run_dir / folder,
            self.plane.dir.kubeconfig,
            scrape_interval=scrape_interval,
            evaluation_interval=scrape_interval,
            **sim,
        )
        return MetricsStack(simulator, prometheus)

    def stop(self) -> None:
        for part in (self.operator, self.recovery, self.fleet, self.store, self.plane):
            if part is not None:
                part.stop()

    def processes(self) -> dict[str, int]:
        """Every process of the bed but the operator, by name."""
        pids = dict(self.plane.state.pids)
        for name, stack in (("fleet", self.fleet), ("recovery", self.recovery)):
            if stack is not None:
                pids[f"prometheus ({name})"] = stack.prometheus.pid or 0
                pids[f"simulator ({name})"] = stack.simulator.pid or 0
        pids["s3 (versitygw)"] = self.store.pid or 0
        return {name: pid for name, pid in pids.items() if pid}

    def all_writes(self) -> Iterator[AuditWrite]:
        return read_writes(self.plane.dir.audit_log)


def wait_value(get: Callable[[], T | None], timeout: float, what: str) -> T:
    """The first value `get` returns that is not None, polled until `timeout`."""
    found: list[T] = []

    def check() -> bool:
        value = get()
        if value is not None:
            found.append(value)
        return value is not None

    wait_until(check, timeout, what)
    return found[0]


def apply_job(api: KubeApi, namespace: str, body: dict[str, Any]) -> None:
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    path = rljob_path(namespace, body["metadata"]["name"]) + "?fieldValidation=Strict"
    api.apply(path, body, field_manager=FIELD_MANAGER)


def is_ready(job: dict[str, Any]) -> bool:
    conditions = job.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def ready_jobs(api: KubeApi, namespace: str) -> int:
    """How many RLJobs of the namespace have Ready=True."""
    return sum(1 for job in api.get(rljob_path(namespace))["items"] if is_ready(job))


def pod_count(api: KubeApi, *namespaces: str) -> int:
    return sum(
        len(api.get(f"/api/v1/namespaces/{ns}/pods?fieldSelector=status.phase=Running")["items"])
        for ns in namespaces
    )
