"""Which failed rank explains a trainer attempt: the first observed failure across its pods.

torchrun's "Root Cause (first observed failure)" block orders one node's ranks; across pods the
only shared clock is each container's termination time (`finishedAt`, whole seconds, set by each
node's kubelet), so ties go to the lowest completion index. A cluster disruption (preemption, a
lost node) explains the others' failures; a rank the Job controller deleted after the first
failure is a victim; a rank that timed out waiting for a peer (an NCCL watchdog timeout) is a
symptom, never the root cause while another rank shows a primary failure, so a Python exception
on one rank behind the others' watchdog timeouts is reported as that exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from rljob.health.termination import (
    Classification,
    ContainerTermination,
    PodCondition,
    classify_disruption,
    classify_termination,
)
from rljob.reconcile.observed import ObservedPod

_NEVER = datetime.max.replace(tzinfo=UTC)

RankKey = tuple[bool, bool, bool, datetime, bool, int, str]


def classify_rank(pod: ObservedPod) -> Classification | None:
    """The rank's failure: its disruption by the cluster first, else its container's exit."""
    if pod.disruption:
        condition = PodCondition("DisruptionTarget", "True", pod.disruption, pod.disruption_message)
        disrupted = classify_disruption([condition])
        if disrupted is not None:
            return disrupted
    termination = ContainerTermination(pod.exit_code, pod.reason or None, pod.message or None)
    return classify_termination(termination)


def is_waiting(classification: Classification | None) -> bool:
    """Whether the rank only timed out waiting for, or lost, a peer that failed first (the
    classifier's `primary` is False: a collective timeout, a closed connection)."""
    return classification is not None and not classification.primary


def root_cause(ranks: Sequence[ObservedPod]) -> ObservedPod | None:
    """The rank whose failure explains the attempt among `ranks` (the failed ones)."""
    return min(ranks, key=rank_key, default=None)


def rank_key(pod: ObservedPod) -> RankKey:
    """Disrupted first, then ranks that failed on their own (not victims, not waiting), then
    the earliest termination, then the lowest completion index."""
    return (
        not pod.disruption,
        pod.deleting,
        is_waiting(classify_rank(pod)),
        pod.finished_at or _NEVER,
        pod.completion_index is None,
        pod.completion_index or 0,
        pod.name,
    )
