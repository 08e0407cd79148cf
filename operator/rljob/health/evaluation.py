"""What every detector returns per target and evaluation, and the formatting its messages share."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from rljob.vocabulary.enums import FailureReason

Outcome = Literal["healthy", "insufficient_data", "finding"]
HEALTHY: Outcome = "healthy"
INSUFFICIENT_DATA: Outcome = "insufficient_data"
FINDING: Outcome = "finding"

# Detector names, the `detector` label of rljob_detector_evaluations_total: the spec field names.
KV_DRIFT = "kv_drift"
# KV drift judged at each engine's operating point (configured by spec.health.kvDrift too).
KV_FRAGMENTATION = "kv_fragmentation"
ENGINE_STALL = "engine_stall"
# Causes named from an engine's own page (docs/architecture.md section 7, issue 32).
KV_LEAK = "kv_leak"
PREFIX_COLLAPSE = "prefix_collapse"
# Host memory growing steadily while the engine serves (health/causes/memory.py).
MEMORY_GROWTH = "memory_growth"
TRAINER_STALL = "trainer_stall"
VERIFIER_LATENCY = "verifier_latency"
CONTAINER_RESTARTS = "container_restarts"

Evidence = dict[str, float | str]

# Evidence keys the scheduler adds to the trainer's evaluation for status and checkpoints.
CHECKPOINT_STEP_EVIDENCE = "checkpoint_step"
TRAINER_STEP_EVIDENCE = "trainer_step"
POLICY_GENERATION_EVIDENCE = "policy_generation"
# A finding on several engines of a role at once: their pod names, space-separated, in the order
# to repair them (the fleet finding); its remedy takes these and no others.
ENGINES_EVIDENCE = "engines"
# A slow pod whose peers the same round judged mostly within the bound (1.0; else 0.0): the fault
# is the pod's (a noisy node, a leaking sandbox), which a restart fixes, not the load's or the
# code's, which it does not. The failure policy's built-in rule restarts only such a pod.
AMONG_FAST_PEERS_EVIDENCE = "among_fast_peers"


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One detector's verdict on one target (a pod, or a role for role-wide signals)."""

    detector: str
    target: str
    outcome: Outcome
    reason: FailureReason | None
    evidence: Evidence = field(default_factory=dict)
    message: str = ""

    @property
    def is_finding(self) -> bool:
        return self.outcome == FINDING


def healthy(
    detector: str, target: str, message: str, evidence: Evidence | None = None
) -> Evaluation:
    return Evaluation(detector, target, HEALTHY, None, evidence or {}, message)


def insufficient(
    detector: str, target: str, message: str, evidence: Evidence | None = None
) -> Evaluation:
    return Evaluation(detector, target, INSUFFICIENT_DATA, None, evidence or {}, message)


def judging(evaluations: Iterable[Evaluation]) -> tuple[str, ...]:
    """The detectors, sorted, that had data for at least one target."""
    return tuple(sorted({e.detector for e in evaluations if e.outcome != INSUFFICIENT_DATA}))


def finding(
    detector: str, target: str, reason: FailureReason, message: str, evidence: Evidence
) -> Evaluation:
    return Evaluation(detector, target, FINDING, reason, evidence, message)


def format_duration(seconds: float) -> str:
    """30m, 1h30m, 45s, 2h: the largest units, as an operator reads them in an Event."""
    if not math.isfinite(seconds):
        return "?"
    total = round(abs(seconds))
    if total < 60:
        return f"{total}s"
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    if secs and not hours:
        parts.append(f"{secs}s")
    return "".join(parts)


def format_percent_change(ratio: float) -> str:
    """-27% for a ratio of 0.73."""
    return f"{ratio - 1:+.0%}"
