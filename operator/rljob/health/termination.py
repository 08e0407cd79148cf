"""Why a pod or container failed, from what the API shows (docs/architecture.md section 7).

Termination messages and logs are written by the workload, so they are untrusted: every message
is cut to its last 4 KiB (the end of a log holds the failure) and stripped of control and format
characters before it is matched or quoted.

Precedence, most specific first: a disruption by the cluster (preemption, eviction, lost node)
explains a container's SIGKILL better than the container does; then image and configuration
errors; then the container's own termination (OOM kill, NCCL signatures, torchrun's exit
pattern), and last a generic failure.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

from rljob.health.evaluation import (
    CONTAINER_RESTARTS,
    Evaluation,
    finding,
    format_duration,
    healthy,
)
from rljob.health.rank_evidence import Verdict, read_evidence
from rljob.health.sanitize import (
    MAX_EVIDENCE_LINE,
    bounded_lines,
    clip,
    label,
    sanitize_line,
    sanitize_message,
)
from rljob.vocabulary.enums import FailureReason

# sanitize_line and sanitize_message are re-exported: callers read untrusted text through here.
__all__ = [
    "CONFIG_WAITING_REASONS",
    "CRASH_LOOP_WAITING_REASON",
    "DISRUPTION_REASONS",
    "IMAGE_PULL_WAITING_REASONS",
    "POD_STATUS_REASONS",
    "Classification",
    "ContainerTermination",
    "CrashRepeatTracker",
    "PodCondition",
    "PodObservation",
    "RestartPolicy",
    "classify_disruption",
    "classify_node",
    "classify_pod",
    "classify_termination",
    "classify_waiting",
    "sanitize_line",
    "sanitize_message",
]

RestartPolicy = Literal["Always", "OnFailure", "Never"]


# The failure signatures live in rljob.signatures, shared with the SDK's entrypoint wrapper
# (read by rank_evidence); what is left here reads a message with no signature line.
# torchrun exits 1 when a worker died; its ChildFailedError summary names the signal.
_CHILD_FAILURE = re.compile(r"ChildFailedError|Root Cause \(first observed failure\)|FAILED")
_SIGABRT = re.compile(r"exitcode\s*:\s*-6\b|Signal 6 \(SIGABRT\)|SIGABRT")
_NCCL = re.compile(r"nccl", re.IGNORECASE)
_OOM_TEXT = re.compile(r"\bOOM\b|out of memory|oom[-_ ]kill", re.IGNORECASE)

EXIT_SIGABRT = 134
EXIT_SIGKILL = 137

IMAGE_PULL_WAITING_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull"})
CONFIG_WAITING_REASONS = frozenset(
    {"InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}
)
CRASH_LOOP_WAITING_REASON = "CrashLoopBackOff"

# DisruptionTarget condition reasons (Kubernetes >= 1.26).
DISRUPTION_REASONS = {
    "PreemptionByScheduler": FailureReason.PREEMPTED,
    "PreemptionByKubeScheduler": FailureReason.PREEMPTED,
    "TerminationByKubelet": FailureReason.EVICTED,
    "EvictionByEvictionAPI": FailureReason.EVICTED,
    "DeletionByTaintManager": FailureReason.NODE_LOST,
    "DeletionByPodGC": FailureReason.NODE_LOST,
    # Not Kubernetes': the operator's own reading of a rank whose node stays unreachable.
    "NodeLost": FailureReason.NODE_LOST,
}
# pod.status.reason values set when the node, not the workload, ended the pod.
POD_STATUS_REASONS = {
    "Evicted": FailureReason.EVICTED,
    "Preempting": FailureReason.PREEMPTED,
    "NodeLost": FailureReason.NODE_LOST,
    "Terminated": FailureReason.EVICTED,
    "NodeShutdown": FailureReason.EVICTED,
}


@dataclass(frozen=True, slots=True)
class ContainerTermination:
    """A container's `state.terminated` or `lastState.terminated`."""

    exit_code: int | None
    reason: str | None = None
    message: str | None = None
    container: str | None = None


@dataclass(frozen=True, slots=True)
class Classification:
    """A failure reason with its evidence: `message` is one sanitized line for Events.

    `rank`: the global rank whose failure this is, when the output names it. `exit_code`: that
    rank's exit status when torchrun's summary gives it (a worker's exit 93 or SIGKILL, 128+N,
    under torchrun's own exit 1), else the container's. `primary`: the container's own failure;
    False for a symptom of waiting for a peer that failed (a collective timeout, a closed
    connection), which is never a root cause while another rank or pod shows a primary one."""

    reason: FailureReason
    exit_code: int | None
    message: str
    rank: int | None = None
    primary: bool = True


def _first_line_matching(lines: list[str], patterns: Iterable[re.Pattern[str]]) -> str | None:
    for line in lines:
        if any(pattern.search(line) for pattern in patterns):
            return line
    return None


def _is_torchrun_nccl_abort(exit_code: int | None, joined: str) -> bool:
    return (
        exit_code in (1, EXIT_SIGABRT)
        and bool(_SIGABRT.search(joined))
        and bool(_NCCL.search(joined))
        and (exit_code == EXIT_SIGABRT or bool(_CHILD_FAILURE.search(joined)))
    )


def _describe(termination: ContainerTermination, detail: str | None) -> str:
    container, reason = label(termination.container), label(termination.reason)
    who = f"container {container} " if container else ""
    how = f"exit {termination.exit_code}" if termination.exit_code is not None else "terminated"
    why = f" ({reason})" if reason else ""
    return clip(f"{who}{how}{why}" + (f": {clip(sanitize_line(detail))}" if detail else ""), 1024)


def _nccl_evidence(termination: ContainerTermination, lines: list[str]) -> str | None:
    """A SIGABRT whose text mentions NCCL: the watchdog's abort, with no signature line kept."""
    joined = " ".join(lines)
    if _is_torchrun_nccl_abort(termination.exit_code, joined):
        return _first_line_matching(lines, (_NCCL,)) or _first_line_matching(lines, (_SIGABRT,))
    return None


def _is_oom(termination: ContainerTermination, lines: list[str]) -> bool:
    if termination.reason == "OOMKilled":
        return True
    return termination.exit_code == EXIT_SIGKILL and any(_OOM_TEXT.search(line) for line in lines)


def _is_success(termination: ContainerTermination) -> bool:
    return termination.exit_code == 0 and termination.reason in (None, "Completed")


def classify_termination(
    termination: ContainerTermination, restart_policy: RestartPolicy = "Never"
) -> Classification | None:
    """The failure a terminated container shows, or None when it completed successfully under
    a policy that lets it (Never, OnFailure). Under restartPolicy Always any exit is a crash, and
    one without a more specific reason is CrashLoop; otherwise ContainerFailed."""
    lines = bounded_lines(termination.message)
    exit_code = termination.exit_code
    if restart_policy != "Always" and _is_success(termination):
        return None
    if _is_oom(termination, lines):
        oom_line = _first_line_matching(lines, (_OOM_TEXT,))
        return Classification(FailureReason.OOM_KILLED, exit_code, _describe(termination, oom_line))
    verdict = read_evidence(lines, exit_code)
    if verdict is not None:
        return _from_verdict(termination, verdict, restart_policy)
    nccl_line = _nccl_evidence(termination, lines)
    if nccl_line is not None:
        return Classification(
            FailureReason.NCCL_TIMEOUT,
            exit_code,
            _describe(termination, nccl_line),
            primary=False,
        )
    generic = (
        FailureReason.CRASH_LOOP if restart_policy == "Always" else FailureReason.CONTAINER_FAILED
    )
    detail = lines[-1] if lines else None
    return Classification(generic, exit_code, _describe(termination, detail))


def _from_verdict(
    termination: ContainerTermination, verdict: Verdict, restart_policy: RestartPolicy
) -> Classification:
    """A server restarted in place (Always) that failed with no specific reason crash-loops."""
    reason = FailureReason(verdict.reason)
    if reason == FailureReason.CONTAINER_FAILED and restart_policy == "Always":
        reason = FailureReason.CRASH_LOOP
    rank = f"rank {verdict.rank}: " if verdict.rank is not None else ""
    detail = f"{rank}{verdict.line}" if verdict.line else rank.rstrip(": ") or None
    exit_code = verdict.exit_code if verdict.exit_code is not None else termination.exit_code
    return Classification(
        reason,
        exit_code,
        _describe(termination, detail),
        rank=verdict.rank,
        primary=verdict.primary,
    )


def classify_waiting(reason: str | None, message: str | None = None) -> Classification | None:
    """A container's `state.waiting` reason: image and configuration errors, crash loops."""
    if reason is None:
        return None
    text = sanitize_message(message, MAX_EVIDENCE_LINE)
    described = clip(f"{reason}: {text}" if text else reason, 1024)
    if reason in IMAGE_PULL_WAITING_REASONS:
        return Classification(FailureReason.IMAGE_PULL_FAILED, None, described)
    if reason in CONFIG_WAITING_REASONS:
        return Classification(FailureReason.CONFIG_ERROR, None, described)
    if reason == CRASH_LOOP_WAITING_REASON:
        return Classification(FailureReason.CRASH_LOOP, None, described)
    return None


@dataclass(frozen=True, slots=True)
class PodCondition:
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


def classify_disruption(
    conditions: Iterable[PodCondition],
    pod_reason: str | None = None,
    pod_message: str | None = None,
) -> Classification | None:
    """Preempted, Evicted or NodeLost from a `DisruptionTarget` condition or the pod's reason."""
    for condition in conditions:
        if condition.type == "DisruptionTarget" and condition.status == "True":
            reason = DISRUPTION_REASONS.get(condition.reason or "", FailureReason.EVICTED)
            text = sanitize_message(condition.message, MAX_EVIDENCE_LINE)
            name = label(condition.reason) or "DisruptionTarget"
            return Classification(reason, None, clip(f"{name}: {text}" if text else name))
    if pod_reason in POD_STATUS_REASONS:
        text = sanitize_message(pod_message, MAX_EVIDENCE_LINE)
        return Classification(
            POD_STATUS_REASONS[pod_reason],
            None,
            clip(f"{pod_reason}: {text}" if text else pod_reason),
        )
    return None


def classify_node(node: str | None, ready_status: str | None) -> Classification | None:
    """NodeLost when the pod's node stopped reporting (Ready Unknown) or is gone."""
    if ready_status == "Unknown":
        return Classification(
            FailureReason.NODE_LOST,
            None,
            f"node {label(node) or '?'} stopped reporting (Ready Unknown)",
        )
    return None


@dataclass(frozen=True, slots=True)
class PodObservation:
    """What the failure classification reads from one pod, its containers and its node."""

    name: str
    restart_policy: RestartPolicy = "Always"
    reason: str | None = None
    message: str | None = None
    conditions: tuple[PodCondition, ...] = ()
    node: str | None = None
    node_ready: str | None = None
    terminated: tuple[ContainerTermination, ...] = ()
    waiting_reasons: tuple[tuple[str, str | None], ...] = ()


# Among a pod's containers: the most specific, then the own failure before a waiting symptom.
_SPECIFICITY = {
    FailureReason.GPU_HARDWARE_ERROR: 0,
    FailureReason.NCCL_NETWORK_ERROR: 1,
    FailureReason.CUDA_OUT_OF_MEMORY: 2,
    FailureReason.CUDA_ERROR: 3,
    FailureReason.NCCL_TIMEOUT: 4,
    FailureReason.OOM_KILLED: 5,
}


def classify_pod(pod: PodObservation) -> Classification | None:
    """The pod's failure, most specific cause first, or None when nothing failed."""
    infrastructure = classify_disruption(pod.conditions, pod.reason, pod.message) or classify_node(
        pod.node, pod.node_ready
    )
    if infrastructure is not None:
        return infrastructure
    waiting = [classify_waiting(reason, message) for reason, message in pod.waiting_reasons]
    blocking = [c for c in waiting if c is not None and c.reason != FailureReason.CRASH_LOOP]
    if blocking:
        return blocking[0]
    terminated = [classify_termination(t, pod.restart_policy) for t in pod.terminated]
    failures = [c for c in terminated if c is not None]
    if failures:
        return min(
            failures, key=lambda c: (_SPECIFICITY.get(c.reason, len(_SPECIFICITY)), not c.primary)
        )
    return next((c for c in waiting if c is not None), None)


class CrashRepeatTracker:
    """Deployment pods restart in place: this turns restartCount increases into OOMKilled or
    CrashLoop findings once a container restarted `repeats` times within `window`.

    Two within ten minutes by default: one OOM kill on an adversarial prompt is the kubelet's to
    absorb, a second one soon after means the pod keeps failing and a fresh pod is due. The first
    count seen for a container is its baseline (restarts before it have unknown times), unless
    the caller knows the count last recorded (`recorded`: status kept it across an operator
    restart): restarts past it happened since, and count as seen now.
    """

    def __init__(self, repeats: int = 2, window: float = 600.0) -> None:
        self.repeats = max(1, repeats)
        self.window = window
        self._counts: dict[tuple[str, str], int] = {}
        self._restarts: dict[tuple[str, str], deque[float]] = {}

    def observe(
        self,
        pod: str,
        container: str,
        restart_count: int,
        last_terminated: ContainerTermination | None,
        now: float,
        *,
        recorded: int | None = None,
    ) -> Evaluation:
        key = (pod, container)
        previous = self._counts.get(key, recorded)
        self._counts[key] = restart_count
        times = self._restarts.setdefault(key, deque(maxlen=self.repeats))
        if previous is None or restart_count < previous:
            times.clear()
            return healthy(CONTAINER_RESTARTS, pod, f"{pod}/{container}: {restart_count} restarts")
        for _ in range(min(restart_count - previous, self.repeats)):
            times.append(now)
        recent = [t for t in times if now - t <= self.window]
        if len(recent) < self.repeats:
            return healthy(CONTAINER_RESTARTS, pod, f"{pod}/{container}: {restart_count} restarts")
        times.clear()
        return self._finding(pod, container, restart_count, last_terminated)

    def _finding(
        self,
        pod: str,
        container: str,
        restart_count: int,
        last_terminated: ContainerTermination | None,
    ) -> Evaluation:
        classified = (
            classify_termination(last_terminated, "Always") if last_terminated is not None else None
        )
        reason = (
            FailureReason.OOM_KILLED
            if classified is not None and classified.reason == FailureReason.OOM_KILLED
            else FailureReason.CRASH_LOOP
        )
        last = f", last {classified.message}" if classified is not None else ""
        message = (
            f"{pod} container {container} restarted {self.repeats} times within "
            f"{format_duration(self.window)}{last}"
        )
        evidence: dict[str, float | str] = {"restart_count": restart_count, "container": container}
        if last_terminated is not None and last_terminated.exit_code is not None:
            evidence["exit_code"] = last_terminated.exit_code
        return finding(CONTAINER_RESTARTS, pod, reason, message, evidence)

    def forget(self, pod: str) -> None:
        for key in [key for key in self._counts if key[0] == pod]:
            self._counts.pop(key, None)
            self._restarts.pop(key, None)

    def retain(self, pods: Collection[str]) -> None:
        for pod in {key[0] for key in self._counts if key[0] not in pods}:
            self.forget(pod)
