"""The goodput benchmark's bed (a temporary run folder): the control plane (test profile), the S3
server, the simulator with its checkpoints on and its NCCL watchdog at the world's scaled timeout,
Prometheus scraping it every second, JobSet's controller manager, the operator watching the
operator arms' namespaces; the arms' node pools and jobs."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.goodput import arms as armlib
from bench.goodput.arms import JOB_NAME, OPERATOR_ARMS, Arm
from bench.goodput.world import World
from rljob.dev.bed import BED_ALLOWLIST, OperatorProcess, ensure_namespace, install_crd
from rljob.dev.bed import start_operator as start_operator_process
from rljob.dev.binaries import bin_dir
from rljob.dev.controlplane import ControlPlane, wait_until
from rljob.dev.jobset import JOBSET_API, JOBSET_NAMESPACE_LABEL, JobSetManager
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.processes import free_ports, terminate
from rljob.dev.prometheus import PrometheusServer
from rljob.dev.s3server import S3Server
from rljob.dev.sim import Simulator
from rljob.dev.sim.launcher import prometheus_for

BUCKET = "goodput"


class BenchSimulator(Simulator):
    """The simulator with its NCCL watchdog at the world's scaled timeout."""

    def __init__(self, *args: Any, watchdog_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watchdog_s = watchdog_s

    def argv(self) -> list[str]:
        return [*super().argv(), f"--nccl-watchdog-seconds={self.watchdog_s}"]


@dataclass
class GoodputBed:
    run_dir: Path
    world: World
    plane: ControlPlane = field(init=False)
    store: S3Server = field(init=False)
    sim: BenchSimulator | None = None
    prometheus: PrometheusServer | None = None
    operator: OperatorProcess | None = None
    jobset: JobSetManager | None = None

    def __post_init__(self) -> None:
        self.plane = ControlPlane(self.run_dir / "plane", bin_dir(), "test")
        self.store = S3Server(self.run_dir / "s3", bin_dir(), free_ports(1)[0])

    @property
    def api(self) -> KubeApi:
        return self.plane.api()

    def start(self) -> None:
        self.plane.start()
        api = self.api
        install_crd(api)
        self.store.start()
        self.store.create_bucket(BUCKET)
        self.sim = BenchSimulator(
            self.run_dir / "sim",
            self.plane.dir.kubeconfig,
            namespaces=("goodput-*",),
            checkpoints=True,
            env=self.store.env(),
            watchdog_s=self.world.nccl_timeout_s,
        )
        self.sim.start()
        self.prometheus = prometheus_for(self.sim, self.run_dir / "prometheus")
        self.prometheus.start()
        self.jobset = JobSetManager(self.plane.dir, bin_dir())
        self.jobset.start(api)
        for arm in Arm:
            ensure_namespace(api, arm.namespace)
        api.merge_patch(
            f"/api/v1/namespaces/{Arm.JOBSET.namespace}",
            {"metadata": {"labels": {JOBSET_NAMESPACE_LABEL: "true"}}},
        )
        self.operator = start_operator_process(
            api, self.plane.dir, self.run_dir / "operator", "--resync-seconds=20",
            *BED_ALLOWLIST, env=self.store.env(), watch=[a.namespace for a in OPERATOR_ARMS],
        )  # fmt: skip

    def stop(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        if self.jobset is not None:
            try:
                self.jobset.stop(self.api)
            except Exception as exc:  # the plane may be gone already: its process still goes
                print(f"stopping JobSet's manager: {exc}", flush=True)
                if self.jobset.proc is not None:
                    terminate(self.jobset.proc.pid, grace=5.0)
        for part in (self.prometheus, self.sim, self.store):
            if part is not None:
                part.stop()
        self.plane.stop()

    def logs(self) -> list[Path]:
        found = [self.plane.dir.logs]
        for part in (self.operator, self.sim):
            if part is not None:
                found.append(part.log)
        return found


def create_pools(api: KubeApi, world: World, timeout: float = 120.0) -> None:
    names = []
    for arm in Arm:
        for node in armlib.pool_for(arm, world).manifests():
            api.create("/api/v1/nodes", node)
            names.append(node["metadata"]["name"])

    def ready() -> bool:
        items = api.get("/api/v1/nodes")["items"]
        ready = {
            n["metadata"]["name"]
            for n in items
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
        }
        return set(names) <= ready

    wait_until(ready, timeout, "the goodput node pools Ready", interval=1.0)


def create_job(api: KubeApi, arm: Arm, world: World, prometheus_url: str) -> float:
    """Creates the arm's job; returns when."""
    uri = f"s3://{BUCKET}/{arm.value}"
    if arm.is_jobset:
        body = armlib.jobset(world, uri)
        path = f"{JOBSET_API}/namespaces/{arm.namespace}/jobsets"
    else:
        body = armlib.rljob(arm, world, prometheus_url, uri)
        path = f"/apis/rljob.io/v1alpha1/namespaces/{arm.namespace}/rljobs"
    created = time.time()
    api.create(path, body)
    return created


def dump_final(api: KubeApi, run_dir: Path) -> None:
    """Each arm's job and Events as they ended, into the run folder (--keep-run-dir keeps it)."""
    for arm in Arm:
        path = (
            f"{JOBSET_API}/namespaces/{arm.namespace}/jobsets/{JOB_NAME}"
            if arm.is_jobset
            else f"/apis/rljob.io/v1alpha1/namespaces/{arm.namespace}/rljobs/{JOB_NAME}"
        )
        try:
            found = {
                "job": api.get(path),
                "events": api.get(f"/api/v1/namespaces/{arm.namespace}/events")["items"],
            }
        except (ApiError, OSError) as exc:
            found = {"error": str(exc)}
        (run_dir / f"final-{arm.value}.json").write_text(json.dumps(found, indent=1))


__all__ = ["BUCKET", "BenchSimulator", "GoodputBed", "create_job", "create_pools", "dump_final"]
