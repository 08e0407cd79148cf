"""Time to recover, on the bed: an NCCL watchdog abort of trainer rank 0 (the kwok fault
annotations) and a hung trainer (the simulator stops its heartbeat), each on a fresh RLJob so
that no restart backoff applies.

Operator-attributable time (docs/architecture.md section 12) = (crash visible -> old Job delete
issued) + (last old pod gone -> new Job created); backoff and pod termination are excluded.
"Visible" and "gone" are watch-event arrival times in the bench; "issued" and "created" are the
audit log's completion times of the operator's own requests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.bed import (
    BUCKET,
    RECOVERY_NAMESPACE,
    BenchBed,
    apply_job,
    example,
    is_ready,
    rljob_path,
    wait_value,
)
from bench.watch import Event, Watcher
from rljob.dev.controlplane import wait_until
from rljob.dev.sim import Simulator
from rljob.reconcile.names import ATTEMPT_LABEL, COMPLETION_INDEX_ANNOTATION, trainer_job_name

STALL_TIMEOUT = 10.0
NCCL_FAULT = {
    "sim.rljob.io/fail-exit-code": "1",
    "sim.rljob.io/fail-reason": "Error",
    "sim.rljob.io/fail-message": (
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, "
        "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
    ),
}
TIMEOUT = 120.0


@dataclass(frozen=True)
class GangRestart:
    """One NCCL-abort gang restart, seconds."""

    to_delete: float  # crash visible -> old Job delete issued
    teardown: float  # delete issued -> last old pod gone (pod termination: not the operator's)
    to_create: float  # last old pod gone -> new Job created
    job_failed: float  # crash visible -> the Job controller marks the old Job failed

    @property
    def attributable(self) -> float:
        return self.to_delete + self.to_create

    @property
    def total(self) -> float:
        return self.to_delete + self.teardown + self.to_create


@dataclass(frozen=True)
class HangRestart:
    """One hung-trainer gang restart, seconds from the hang."""

    to_delete: float
    to_create: float
    stall_timeout: float = STALL_TIMEOUT


def recovery_job(name: str, prometheus_url: str, repo_example: dict[str, Any]) -> dict[str, Any]:
    spec = {
        **repo_example["spec"],
        "roles": {
            "rollout": {**repo_example["spec"]["roles"]["rollout"], "replicas": 1},
            "trainer": {"nodes": 2, "gpus": 8},
        },
        "checkpoint": {"uri": f"s3://{BUCKET}/ckpt", "addressingStyle": "path"},
        "health": {
            "source": {"prometheus": {"url": prometheus_url}},
            "interval": "1s",
            "trainerStall": {"timeout": f"{STALL_TIMEOUT:.0f}s", "startupGrace": "5s"},
        },
        "failurePolicy": {"backoff": {"initial": "1s", "max": "2s"}},
    }
    return {**repo_example, "metadata": {"name": name}, "spec": spec}


class RecoveryJob:
    """One RLJob in the recovery namespace, watched from its apply on."""

    def __init__(self, bed: BenchBed, watcher: Watcher, name: str) -> None:
        self.bed, self.watcher, self.name = bed, watcher, name
        self.api = bed.api

    def start(self) -> None:
        assert self.bed.recovery is not None
        url = self.bed.recovery.prometheus.url
        apply_job(
            self.api, RECOVERY_NAMESPACE, recovery_job(self.name, url, example(self.bed.repo))
        )
        wait_until(self._ready, TIMEOUT, f"{self.name} to be Ready", interval=0.5)

    def _ready(self) -> bool:
        return is_ready(self.api.get(rljob_path(RECOVERY_NAMESPACE, self.name)))

    def trainer_pods(self, attempt: int) -> list[Event]:
        """The newest event of each trainer pod of `attempt`."""
        job = trainer_job_name(self.name, attempt)
        latest = [events[-1] for (kind, _), events in self.watcher.events.items() if kind == "Pod"]
        return [
            e
            for e in latest
            if e.body["metadata"].get("labels", {}).get(ATTEMPT_LABEL) == str(attempt)
            and e.body["metadata"].get("labels", {}).get("job-name") == job
        ]

    def rank0(self, attempt: int) -> str:
        def running() -> str | None:
            for event in self.trainer_pods(attempt):
                meta = event.body["metadata"]
                index = meta.get("annotations", {}).get(COMPLETION_INDEX_ANNOTATION)
                if index == "0" and event.body.get("status", {}).get("phase") == "Running":
                    return str(meta["name"])
            return None

        return wait_value(running, TIMEOUT, f"rank 0 of {self.name} running")

    def wait_new_attempt(self) -> None:
        job = trainer_job_name(self.name, 2)
        wait_until(
            lambda: self.watcher.first("Job", job, lambda e: e.type != "DELETED") is not None,
            TIMEOUT,
            f"{job} to be created",
        )

    def operator_write(self, verb: str, attempt: int) -> float:
        """Completion time of the operator's first `verb` (patch = server-side apply) of the
        trainer Job of `attempt`."""
        assert self.bed.operator is not None
        job, user = trainer_job_name(self.name, attempt), self.bed.operator.user
        for write in self.bed.all_writes():
            if (write.user, write.verb, write.resource, write.name) == (user, verb, "jobs", job):
                return write.time.timestamp()
        return math.nan

    def last_pod_gone(self, attempt: int) -> float:
        gone = [
            self.watcher.first("Pod", e.body["metadata"]["name"], lambda e: e.type == "DELETED")
            for e in self.trainer_pods(attempt)
        ]
        return max((t for t in gone if t is not None), default=math.nan)


def nccl_abort(bed: BenchBed, watcher: Watcher, name: str) -> GangRestart:
    job = RecoveryJob(bed, watcher, name)
    job.start()
    rank0 = job.rank0(1)
    path = f"/api/v1/namespaces/{RECOVERY_NAMESPACE}/pods/{rank0}"
    job.api.merge_patch(path, {"metadata": {"annotations": NCCL_FAULT}})
    job.wait_new_attempt()
    crashed = watcher.first("Pod", rank0, _failed_pod) or math.nan
    job_failed = watcher.first("Job", trainer_job_name(name, 1), _failed_job) or math.nan
    deleted = job.operator_write("delete", 1)
    gone = job.last_pod_gone(1)
    created = job.operator_write("patch", 2)
    return GangRestart(deleted - crashed, gone - deleted, created - gone, job_failed - crashed)


def _failed_pod(event: Event) -> bool:
    return bool(event.body.get("status", {}).get("phase") == "Failed")


def _failed_job(event: Event) -> bool:
    conditions = event.body.get("status", {}).get("conditions") or []
    return any(
        c["type"] in ("FailureTarget", "Failed") and c["status"] == "True" for c in conditions
    )


def trainer_hang(bed: BenchBed, watcher: Watcher, name: str, simulator: Simulator) -> HangRestart:
    job = RecoveryJob(bed, watcher, name)
    job.start()
    client = simulator.client()

    def training() -> bool:
        trainers = client.workloads(namespace=RECOVERY_NAMESPACE, job=name, role="trainer")
        return bool(trainers) and all(t["state"].get("phase") == "training" for t in trainers)

    wait_until(training, 60, f"{name}'s trainer to be training", interval=0.1)
    hung_at = time.time()
    client.inject("hang", namespace=RECOVERY_NAMESPACE, job=name, role="trainer")
    job.wait_new_attempt()
    deleted = job.operator_write("delete", 1)
    created = job.operator_write("patch", 2)
    return HangRestart(deleted - hung_at, created - hung_at)


@dataclass(frozen=True)
class RecoveryResult:
    gang: tuple[GangRestart, ...]
    hang: tuple[HangRestart, ...]


def measure(
    bed: BenchBed, repetitions: int, run: Callable[[Any], Any], log: Callable[[str], None]
) -> RecoveryResult:
    """`run(coroutine)` runs a coroutine on the bench's background loop (where the watcher
    lives)."""
    stack = bed.start_recovery_metrics()
    watcher = Watcher(bed.plane.api().creds, RECOVERY_NAMESPACE, ("Job", "Pod"))
    run(watcher.start())
    try:
        gang = []
        for index in range(repetitions):
            gang.append(nccl_abort(bed, watcher, f"nccl-{index}"))
            log(f"  NCCL abort {index + 1}: {gang[-1].attributable:.2f} s operator-attributable")
        hang = []
        for index in range(repetitions):
            hang.append(trainer_hang(bed, watcher, f"hang-{index}", stack.simulator))
            log(f"  trainer hang {index + 1}: new Job {hang[-1].to_create:.1f} s after the hang")
    finally:
        run(watcher.stop())
    return RecoveryResult(tuple(gang), tuple(hang))
