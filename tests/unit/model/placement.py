"""The invariant of a gang that fits (rljob.reconcile.placement), read from the API server's
write log, against what each pass's watches showed:

- serving-pods-wait-for-the-trainers-gang: an operator write that scales a Deployment of the job
  above zero replicas comes from a pass that saw one of its Deployments already above zero (its
  engines serve: a gang restart keeps them), or every rank of its newest trainer Job bound to a
  node and not going away."""

from __future__ import annotations

from rljob.adapters.observe import JobKey
from rljob.reconcile.observed import Observed
from tests.unit.model.cluster import Cluster, Write

GANG_FIRST = "serving-pods-wait-for-the-trainers-gang"
CHECKS = frozenset({GANG_FIRST})


class PlacementChecks:
    """Observes one RLJob's passes; `faults(check)` says what broke the invariant."""

    def __init__(self, cluster: Cluster, key: JobKey) -> None:
        self.cluster = cluster
        self.key = key
        self.recorded: dict[str, list[str]] = {check: [] for check in CHECKS}

    def faults(self, check: str) -> list[str]:
        return self.recorded[check]

    def before_pass(self) -> tuple[int, str]:
        """(where the write log stands; why serving may scale up, "" if it may not), from the
        view the pass is about to read."""
        observed = self.cluster.index.observed(self.key)
        serving = any(
            c.kind == "Deployment" and c.replicas > 0 and not c.deleting for c in observed.children
        )
        return len(self.cluster.log), "serving" if serving else _gang_bound(observed)

    def after_pass(self, before: tuple[int, str]) -> None:
        start, allowed = before
        if allowed:
            return
        self.recorded[GANG_FIRST] += [
            f"{write.verb} Deployment/{write.name} to {write.detail.get('replicas')} replicas "
            "before the trainer's ranks were bound"
            for write in self.cluster.log[start:]
            if _scales_up(write)
        ]


def _gang_bound(observed: Observed) -> str:
    jobs = [c for c in observed.children if c.kind == "Job" and not c.deleting]
    if not jobs:
        return ""
    newest = max(jobs, key=lambda c: c.attempt or 0)
    bound = [
        p
        for p in observed.pods
        if p.role == "trainer"
        and p.attempt == newest.attempt
        and p.node
        and not (p.terminal or p.deleting)
    ]
    return "gang bound" if len(bound) >= newest.replicas else ""


def _scales_up(write: Write) -> bool:
    return (
        write.actor.startswith("operator")
        and write.code < 300
        and write.kind == "Deployment"
        and write.verb == "apply"
        and bool(write.detail.get("replicas"))
    )
