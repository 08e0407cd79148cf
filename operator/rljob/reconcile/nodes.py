"""The nodes under the trainer's ranks, as a pass reads them: which ranks are lost with their
node, which pods the next attempt need not wait for, and which a force delete may remove.

Kubernetes' node lifecycle controller marks a node's Ready condition Unknown once its kubelet has
posted nothing for --node-monitor-grace-period (50 s upstream since 1.32), and sets the Ready
condition of the pods on it False. Nothing upstream ends such a pod: the taint manager deletes it
gracefully after the unreachable toleration (300 s by default) and no kubelet confirms, and a Job
with a podFailurePolicy counts a terminating pod as failed only once its phase is Failed. So the
gang would sit at N-1 ranks until the others' NCCL watchdog fires (600 s by default). Here a rank
whose node has stayed Unknown for failurePolicy.nodeLostTimeout (default 1m: a kubelet restart or
a brief partition heals within it, and it is well inside the watchdog) is lost: the attempt is
restarted as a gang with reason NodeLost, and the next attempt does not wait for pods on lost
nodes, since a rank there that still runs (a partition) is fenced from the checkpoint store by
the newer attempt's marker. A pod is force-deleted only where nothing can still run it: its Node
object is gone, or carries node.kubernetes.io/out-of-service (set by a person or a node
remediator that powered it off), never on Ready Unknown alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from rljob.api import RLJob, RoleName
from rljob.api.durations import parse_duration
from rljob.reconcile.observed import Observed, ObservedPod

# The node lifecycle controller's Ready condition of an unreachable node, and node states.
READY, NOT_READY, UNKNOWN, GONE, UNREAD = "Ready", "NotReady", "Unknown", "Gone", "Unread"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
NODE_LOST_DISRUPTION = "NodeLost"  # the disruption a lost rank is classified by


@dataclass(frozen=True)
class NodeState:
    """A node as last read: its Ready condition's status (Ready, NotReady, Unknown), Gone (no
    Node object) or Unread (the read failed: proves nothing); since when it has been so; whether
    it carries the out-of-service taint."""

    ready: str
    since: datetime | None = None
    out_of_service: bool = False

    @property
    def released(self) -> bool:
        """Nothing can still run a pod of it: a force delete is safe."""
        return self.ready == GONE or (self.out_of_service and self.ready != READY)


NodeStates = Mapping[str, NodeState]


def nodes_to_read(job: RLJob, observed: Observed) -> list[str]:
    """The nodes a pass needs: those of trainer pods not ready, terminating or of the current
    attempt (a rank whose node stopped reporting turns not ready first; the runtime serves one
    read to every job for a few seconds, so a gang starting costs little)."""
    attempt = job.status.attempt or 1
    nodes = {
        pod.node
        for pod in observed.pods
        if pod.role == RoleName.TRAINER.value
        and pod.node
        and not pod.terminal
        and not pod.ready
        and (pod.deleting or pod.disruption or pod.attempt == attempt)
    }
    return sorted(nodes)


def lost_rank(
    job: RLJob, observed: Observed, nodes: NodeStates, now: datetime
) -> ObservedPod | None:
    """The current attempt's first rank lost with its node, as a disrupted pod (NodeLost) with
    what the node says; None when every rank's node answers (or could not be read)."""
    attempt = job.status.attempt or 1
    timeout = timedelta(seconds=parse_duration(job.spec.failure_policy.node_lost_timeout))
    for pod in sorted(observed.pods, key=lambda p: (p.completion_index or 0, p.name)):
        if pod.role != RoleName.TRAINER.value or pod.attempt != attempt or pod.terminal:
            continue
        state = nodes.get(pod.node)
        if state is not None and _lost(state, now, timeout):
            return dataclasses.replace(
                pod,
                disruption=NODE_LOST_DISRUPTION,
                disruption_message=_described(pod.node, state, now),
            )
    return None


def lost_recheck_after(
    job: RLJob, observed: Observed, nodes: NodeStates, now: datetime
) -> float | None:
    """Seconds until a rank's node, Unknown now, has been so for nodeLostTimeout: the pass that
    finds it lost must not wait for another event."""
    timeout = timedelta(seconds=parse_duration(job.spec.failure_policy.node_lost_timeout))
    attempt = job.status.attempt or 1
    deadlines = [
        (state.since + timeout - now).total_seconds()
        for pod in observed.pods
        if pod.role == RoleName.TRAINER.value and pod.attempt == attempt and not pod.terminal
        and (state := nodes.get(pod.node)) is not None
        and state.ready == UNKNOWN and state.since is not None
    ]  # fmt: skip
    pending = [seconds for seconds in deadlines if seconds > 0]
    return min(pending) if pending else None


def lost_nodes(job: RLJob, nodes: NodeStates, now: datetime) -> frozenset[str]:
    """Nodes gone, or unreachable for nodeLostTimeout: the next attempt does not wait for them."""
    timeout = timedelta(seconds=parse_duration(job.spec.failure_policy.node_lost_timeout))
    return frozenset(name for name, state in nodes.items() if _lost(state, now, timeout))


def _lost(state: NodeState, now: datetime, timeout: timedelta) -> bool:
    if state.ready == GONE:
        return True
    return state.ready == UNKNOWN and state.since is not None and now - state.since >= timeout


def _described(node: str, state: NodeState, now: datetime) -> str:
    if state.ready == GONE:
        return f"node {node} is gone (no Node object)"
    seconds = int((now - state.since).total_seconds()) if state.since else 0
    return f"node {node} unreachable (Ready Unknown: its kubelet stopped reporting) for {seconds}s"


def without_lost(observed: Observed, lost_nodes: frozenset[str]) -> Observed:
    """What the next attempt waits for: older attempts' pods on lost nodes left out, and their
    Jobs being deleted whose every remaining pod is there (the Job's foreground deletion waits
    for pods no kubelet will ever confirm gone)."""
    if not lost_nodes:
        return observed
    held = {p for p in observed.pods if p.role == RoleName.TRAINER.value and p.node in lost_nodes}
    pods = tuple(p for p in observed.pods if p not in held)
    kept_attempts = {p.attempt for p in pods if p.role == RoleName.TRAINER.value}
    held_attempts = {p.attempt for p in held}
    children = tuple(
        c
        for c in observed.children
        if not (
            c.kind == "Job"
            and c.deleting
            and c.attempt in held_attempts
            and c.attempt not in kept_attempts
        )
    )
    return Observed(children, pods)
