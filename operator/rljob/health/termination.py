"""Why a pod or container failed, from what the API shows (DESIGN section 6).

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
import unicodedata
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

from rljob.api.enums import FailureReason
from rljob.health.evaluation import (
    CONTAINER_RESTARTS,
    Evaluation,
    finding,
    format_duration,
    healthy,
)

MAX_MESSAGE_BYTES = 4096
MAX_EVIDENCE_LINE = 256
# Reasons and container names are set through the API (a pod's status is writable by whoever
# may patch it): bounded and cleaned like messages before they are quoted.
MAX_LABEL = 128

RestartPolicy = Literal["Always", "OnFailure", "Never"]

_WHITESPACE = re.compile(r"\s+")
_LINE_BREAKS = re.compile(r"[\r\n\t\v\f\u2028\u2029\x85]")

# Strings PyTorch's ProcessGroupNCCL and NCCL print when a collective times out or a
# communicator dies (reference/workload-signals.md section 3.2).
NCCL_SIGNATURES = tuple(
    re.compile(pattern)
    for pattern in (
        r"Watchdog caught collective operation timeout",
        r"NCCL communicator was aborted",
        r"ProcessGroupNCCL('s)? watchdog (got stuck|hang)",
        r"Some NCCL operations have failed or timed out",
        r"failure detected by watchdog at work sequence id",
        r"[Ww]atchdog thread terminated with exception",
        r"ncclRemoteError",
        r"NCCL error: remote process exited",
        r"c10::DistBackendError",
        r"ProcessGroupNCCL.{0,120}?(timed out|[Tt]imeout)",
    )
)
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
}
# pod.status.reason values set when the node, not the workload, ended the pod.
POD_STATUS_REASONS = {
    "Evicted": FailureReason.EVICTED,
    "Preempting": FailureReason.PREEMPTED,
    "NodeLost": FailureReason.NODE_LOST,
    "Terminated": FailureReason.EVICTED,
    "NodeShutdown": FailureReason.EVICTED,
}


def _keep(character: str) -> bool:
    return unicodedata.category(character) not in ("Cc", "Cf", "Cs", "Co", "Cn")


def _tail(text: str, limit: int) -> str:
    encoded = text[-limit:].encode("utf-8", "replace")
    return encoded[-limit:].decode("utf-8", "ignore")


def sanitize_line(text: str) -> str:
    """One printable line: control and format characters dropped, whitespace collapsed."""
    flat = _LINE_BREAKS.sub(" ", text)
    return _WHITESPACE.sub(" ", "".join(c for c in flat if _keep(c))).strip()


def sanitize_message(text: str | None, limit: int = MAX_MESSAGE_BYTES) -> str:
    """An untrusted message as one printable line of at most `limit` UTF-8 bytes (its end)."""
    if not text:
        return ""
    return _tail(sanitize_line(_tail(text, limit * 4)), limit)


def _bounded_lines(text: str | None) -> list[str]:
    if not text:
        return []
    lines = (sanitize_line(line) for line in _tail(text, MAX_MESSAGE_BYTES).splitlines())
    return [line for line in lines if line]


def _clip(line: str, limit: int = MAX_EVIDENCE_LINE) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class ContainerTermination:
    """A container's `state.terminated` or `lastState.terminated`."""

    exit_code: int | None
    reason: str | None = None
    message: str | None = None
    container: str | None = None


@dataclass(frozen=True, slots=True)
class Classification:
    """A failure reason with its evidence: `message` is one sanitized line for Events."""

    reason: FailureReason
    exit_code: int | None
    message: str


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


def _label(text: str | None) -> str:
    """A short API-set word (a reason, a container name) as one clean, bounded token."""
    return _clip(sanitize_line(text or ""), MAX_LABEL)


def _describe(termination: ContainerTermination, detail: str | None) -> str:
    container, reason = _label(termination.container), _label(termination.reason)
    who = f"container {container} " if container else ""
    how = f"exit {termination.exit_code}" if termination.exit_code is not None else "terminated"
    why = f" ({reason})" if reason else ""
    return _clip(f"{who}{how}{why}" + (f": {_clip(detail)}" if detail else ""), 1024)


def _nccl_evidence(termination: ContainerTermination, lines: list[str]) -> str | None:
    signature_line = _first_line_matching(lines, NCCL_SIGNATURES)
    if signature_line is not None:
        return signature_line
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
    lines = _bounded_lines(termination.message)
    exit_code = termination.exit_code
    if _is_oom(termination, lines):
        oom_line = _first_line_matching(lines, (_OOM_TEXT,))
        return Classification(FailureReason.OOM_KILLED, exit_code, _describe(termination, oom_line))
    nccl_line = _nccl_evidence(termination, lines)
    if nccl_line is not None:
        return Classification(
            FailureReason.NCCL_TIMEOUT, exit_code, _describe(termination, nccl_line)
        )
    if restart_policy != "Always" and _is_success(termination):
        return None
    generic = (
        FailureReason.CRASH_LOOP if restart_policy == "Always" else FailureReason.CONTAINER_FAILED
    )
    detail = lines[-1] if lines else None
    return Classification(generic, exit_code, _describe(termination, detail))


def classify_waiting(reason: str | None, message: str | None = None) -> Classification | None:
    """A container's `state.waiting` reason: image and configuration errors, crash loops."""
    if reason is None:
        return None
    text = sanitize_message(message, MAX_EVIDENCE_LINE)
    described = _clip(f"{reason}: {text}" if text else reason, 1024)
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
            label = _label(condition.reason) or "DisruptionTarget"
            return Classification(reason, None, _clip(f"{label}: {text}" if text else label))
    if pod_reason in POD_STATUS_REASONS:
        text = sanitize_message(pod_message, MAX_EVIDENCE_LINE)
        return Classification(
            POD_STATUS_REASONS[pod_reason],
            None,
            _clip(f"{pod_reason}: {text}" if text else pod_reason),
        )
    return None


def classify_node(node: str | None, ready_status: str | None) -> Classification | None:
    """NodeLost when the pod's node stopped reporting (Ready Unknown) or is gone."""
    if ready_status == "Unknown":
        return Classification(
            FailureReason.NODE_LOST,
            None,
            f"node {_label(node) or '?'} stopped reporting (Ready Unknown)",
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


_SPECIFICITY = {
    FailureReason.NCCL_TIMEOUT: 0,
    FailureReason.OOM_KILLED: 1,
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
        return min(failures, key=lambda c: _SPECIFICITY.get(c.reason, len(_SPECIFICITY)))
    return next((c for c in waiting if c is not None), None)


class CrashRepeatTracker:
    """Deployment pods restart in place: this turns restartCount increases into OOMKilled or
    CrashLoop findings once a container restarted `repeats` times within `window`.

    Two within ten minutes by default: one OOM kill on an adversarial prompt is the kubelet's to
    absorb, a second one soon after means the pod keeps failing and a fresh pod is due. The first
    count seen for a container is its baseline (restarts before it have unknown times).
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
    ) -> Evaluation:
        key = (pod, container)
        previous = self._counts.get(key)
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
