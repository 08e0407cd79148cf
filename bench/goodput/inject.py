"""Carries a failure's world events (world.plan) out on the bed, the same way in every arm: kwok's
fault annotations fail a container (dev/kwok-stages.yaml: pod-fail for the Job pods of a
trainer and of a JobSet's engines, pod-crash-restart for a Deployment's engine, with
sim.rljob.io/fail-after for a watchdog's delay), a node's heartbeat stops (the bed's
HEARTBEAT_STOP_LABEL, as tests/integration/test_lost_node.py does), the simulator's control API
injects hang, unreachable, stall, drift and latency."""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from bench.goodput.arms import JOB_NAME, Arm
from bench.goodput.measure import Injected
from bench.goodput.trace import FailureEvent, Role
from bench.goodput.world import NODE_REPAIR_S, Effect, Step, World, go_duration, plan
from rljob.dev.components import HEARTBEAT_STOP_LABEL
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.sim.client import SimClient, SimError
from rljob.dev.sim.pods import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX,
    JOB_LABEL,
    JOBSET_RESTART_ATTEMPT_LABEL,
    ROLE_LABEL,
)

FAIL = "sim.rljob.io/fail-"


def _attempt(pod: dict[str, Any]) -> int:
    labels = pod["metadata"].get("labels") or {}
    value = labels.get(ATTEMPT_LABEL, labels.get(JOBSET_RESTART_ATTEMPT_LABEL, "0"))
    return int(value) if str(value).isdigit() else 0


def _index(pod: dict[str, Any]) -> int:
    meta = pod["metadata"]
    value = (meta.get("annotations") or {}).get(COMPLETION_INDEX, "0")
    return int(value) if str(value).isdigit() else 0


@dataclass
class Injector:
    """Injects into one bed: the API server (admin), the simulator's control API."""

    api: KubeApi
    sim: SimClient
    world: World
    restores: list[tuple[float, str]] = field(default_factory=list)  # (when, node)

    def running_pods(self, arm: Arm, role: Role) -> list[dict[str, Any]]:
        """The role's Running pods that are not terminating; the trainer's of its newest
        attempt only."""
        selector = urllib.parse.quote(f"{JOB_LABEL}={JOB_NAME},{ROLE_LABEL}={role.value}")
        items = self.api.get(f"/api/v1/namespaces/{arm.namespace}/pods?labelSelector={selector}")
        pods = [
            p
            for p in items["items"]
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        if role is Role.TRAINER and pods:
            newest = max(_attempt(p) for p in pods)
            pods = [p for p in pods if _attempt(p) == newest]
        return sorted(pods, key=lambda p: (_index(p), p["metadata"]["name"]))

    def _pick(self, pods: list[dict[str, Any]], role: Role, index: int) -> dict[str, Any] | None:
        if not pods:
            return None
        if role is Role.TRAINER:
            return next((p for p in pods if _index(p) == index), pods[index % len(pods)])
        return pods[index % len(pods)]

    def inject(self, arm: Arm, event: FailureEvent, now: float | None = None) -> Injected:
        """The failure's world events on the arm, now; a failure whose role has no Running pod
        (the arm is restarting it) is skipped, and says so."""
        at = time.time() if now is None else now
        pods = self.running_pods(arm, event.role)
        target = self._pick(pods, event.role, event.index)
        if target is None:
            return Injected(event, at, skipped=f"no Running {event.role} pod")
        ranks = self.running_pods(arm, Role.TRAINER) if event.role is not Role.TRAINER else pods
        instance = self._instance(arm, target)
        for step in plan(event, self.world):
            pod = target if step.rank is None else (self._pick(ranks, Role.TRAINER, step.rank))
            if pod is None:
                continue
            self._carry_out(arm, step, pod, at)
        return Injected(event, at, pod=target["metadata"]["name"], instance=instance)

    def _instance(self, arm: Arm, pod: dict[str, Any]) -> str:
        name = pod["metadata"]["name"]
        try:
            found = self.sim.workloads(namespace=arm.namespace, pod=name)
        except (SimError, OSError):
            return ""
        return str(found[0]["instance"]) if found else ""

    def _carry_out(self, arm: Arm, step: Step, pod: dict[str, Any], at: float) -> None:
        ns, name = arm.namespace, pod["metadata"]["name"]
        params = dict(step.params)
        match step.effect:
            case Effect.HANG_GANG:
                self._sim("hang", namespace=ns, job=JOB_NAME, role=Role.TRAINER.value)
            case Effect.FAIL_RANK | Effect.FAIL_ENGINE:
                rank = _index(pod)
                annotations = {
                    f"{FAIL}exit-code": str(step.exit_code),
                    f"{FAIL}reason": step.reason,
                    f"{FAIL}message": step.message.replace("{rank}", str(rank)),
                }
                if step.delay_s > 0:
                    annotations[f"{FAIL}after"] = go_duration(step.delay_s)
                self._patch(f"/api/v1/namespaces/{ns}/pods/{name}", annotations)
            case Effect.STOP_NODE:
                node = pod["spec"].get("nodeName")
                if node:
                    self.api.merge_patch(
                        f"/api/v1/nodes/{node}",
                        {"metadata": {"labels": {HEARTBEAT_STOP_LABEL: "true"}}},
                    )
                    self.restores.append((at + NODE_REPAIR_S, node))
            case Effect.UNREACHABLE | Effect.STALL:
                self._sim(step.effect.value, namespace=ns, pod=name)
            case Effect.DRIFT | Effect.LATENCY:
                self._sim(step.effect.value, namespace=ns, pod=name, **params)

    def _sim(self, kind: str, **selector: Any) -> None:
        self.sim.inject(kind, **selector)

    def _patch(self, path: str, annotations: dict[str, str]) -> None:
        try:
            self.api.merge_patch(path, {"metadata": {"annotations": annotations}})
        except ApiError as exc:
            if exc.status != 404:  # gone meanwhile: an arm restarted it first
                raise

    def restore_due(self, now: float) -> list[str]:
        """Brings back the nodes whose repair time has come (their heartbeat resumes)."""
        due = [node for when, node in self.restores if when <= now]
        self.restores = [(when, node) for when, node in self.restores if when > now]
        for node in due:
            self.restore(node)
        return due

    def restore(self, node: str) -> None:
        try:
            self.api.merge_patch(
                f"/api/v1/nodes/{node}", {"metadata": {"labels": {HEARTBEAT_STOP_LABEL: None}}}
            )
        except ApiError as exc:
            if exc.status != 404:
                raise


__all__ = ["Injector"]
