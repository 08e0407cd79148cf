"""Suspect nodes: where a trainer attempt failed with hardware-like evidence, new attempts prefer
other nodes (a soft anti-affinity, see rljob.reconcile.pods) until the entry's `until`.

Only evidence that points at the node marks it: a GPU hardware fault (uncorrectable ECC, Xid), an
NCCL network error on the root-cause rank, a lost node. A preemption or eviction says nothing
about the node, and a software fault (an illegal memory access, CUDA out of memory, a watchdog
timeout, an exit code, an OOM kill, a stalled trainer) follows the job to any node.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from rljob.api import ConditionType, FailureReason, RLJob, RoleName, SuspectNode
from rljob.api.durations import parse_duration
from rljob.api.status import MAX_SUSPECT_NODES
from rljob.reconcile.conditions import ConditionState
from rljob.reconcile.observed import Observed, ObservedPod

# By value: the classifier's hardware reasons (vocabulary/enums.py) are matched as strings.
NODE_REASONS = frozenset({"GPUHardwareError", "NCCLNetworkError", FailureReason.NODE_LOST.value})


def points_at_node(reason: FailureReason) -> bool:
    """Whether a root-cause failure of this reason makes its node suspect."""
    return reason.value in NODE_REASONS


def suspect_ttl(job: RLJob) -> timedelta:
    return timedelta(seconds=parse_duration(job.spec.failure_policy.suspect_node_ttl))


def suspect_until(suspect: SuspectNode, ttl: timedelta) -> datetime:
    """The entry's end; one an older operator wrote without `until` lasts `ttl` from marking."""
    return suspect.until or suspect.marked_at + ttl


def active_suspects(
    suspects: Sequence[SuspectNode], now: datetime, ttl: timedelta
) -> list[SuspectNode]:
    """The entries not yet expired at `now`."""
    return [suspect for suspect in suspects if suspect_until(suspect, ttl) > now]


def marked_suspects(
    current: Sequence[SuspectNode],
    root: ObservedPod | None,
    reason: FailureReason,
    now: datetime,
    ttl: timedelta,
) -> list[SuspectNode]:
    """The active suspects after a gang restart for `reason` on `root`: its node is (re)marked
    until now + ttl when the evidence points at the node; the oldest entries give way."""
    kept = active_suspects(current, now, ttl)
    if root is None or not root.node or not points_at_node(reason):
        return kept
    entry = SuspectNode(name=root.node, reason=reason, marked_at=now, until=now + ttl)
    return [*(s for s in kept if s.name != root.node), entry][-MAX_SUSPECT_NODES:]


def suspect_in_use_state(
    suspects: Sequence[SuspectNode], observed: Observed, attempt: int
) -> list[ConditionState]:
    """SuspectNodeInUse: True while a pod of the current attempt runs on a suspect node (no
    other node fit), False while suspects are avoided, absent (no state) when there are none."""
    if not suspects:
        return []
    names = {suspect.name for suspect in suspects}
    placed = sorted(
        (pod.node, pod.name)
        for pod in observed.pods
        if pod.role == RoleName.TRAINER.value
        and pod.attempt == attempt
        and pod.node in names
        and not pod.terminal
        and not pod.deleting
    )
    if not placed:
        listed = ", ".join(sorted(names))
        message = f"trainer attempt {attempt} avoids suspect nodes {listed}"
        return [
            ConditionState.of(
                ConditionType.SUSPECT_NODE_IN_USE, False, "SuspectNodesAvoided", message
            )
        ]
    nodes = sorted({node for node, _ in placed})
    pods = ", ".join(name for _, name in placed)
    message = (
        f"trainer attempt {attempt} runs on suspect node{'s' if len(nodes) > 1 else ''} "
        f"{', '.join(nodes)} ({pods}): no other node fit; see status.suspectNodes"
    )
    return [
        ConditionState.of(
            ConditionType.SUSPECT_NODE_IN_USE, True, "ScheduledOnSuspectNode", message
        )
    ]
