"""The verdict: which role bounds the trainer's step, on what evidence, and what to change.

The trainer's phase shares over the window split its time into the rollout side (waiting for
rollouts, or generating them itself), training and syncing weights; evaluating and
checkpointing are reported but never the bottleneck (they are the job's choice). The largest of
the three is the bound. When it is the rollout side, the load says which part of it:

- verifiers queueing (mean depth over AttributionRule.queue_per_pod per pod, or growing by that
  much over the window) or slow by their own detector, while the engines are not saturated:
  Verifier;
- most engines queueing most of the window, or their KV caches nearly full, or the driver
  already at or past the recommended concurrency of a knee the curve placed with confidence
  (not too few bins, not extrapolated): Rollout (more engines);
- otherwise the engines idle with room to spare: RolloutConcurrency (more requests in flight).

Without phase counters covering `min_coverage` of the window the role is Unknown, and the
evidence names what is missing (the engines' load is still described).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rljob.health.bottleneck.extrapolate import CurveVerdict
from rljob.health.bottleneck.load import EngineWindow, VerifierWindow
from rljob.health.bottleneck.phases import PhaseBreakdown
from rljob.health.evaluation import format_duration
from rljob.vocabulary.attribution import DEFAULT_ATTRIBUTION, ROLLOUT_SIDE, AttributionRule
from rljob.vocabulary.enums import BottleneckRole
from rljob.vocabulary.phases import (
    CHECKPOINTING,
    EVALUATING,
    GENERATING,
    SYNCING_WEIGHTS,
    TRAINING,
    WAITING_FOR_ROLLOUTS,
)

# Engines queueing less than this share of the time read as unsaturated.
UNSATURATED_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Verdict:
    role: BottleneckRole
    evidence: str
    advice: str
    recommended_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class Observations:
    """What one evaluation knows."""

    window: float
    phases: PhaseBreakdown | None
    phase_coverage: float  # the best trainer pod's share of the window (for Unknown's evidence)
    engines: Sequence[EngineWindow]
    verifier: VerifierWindow | None
    curve: CurveVerdict | None
    in_flight: float | None  # the rollout driver's requests in flight (highest in the window)


def attribute(seen: Observations, rule: AttributionRule = DEFAULT_ATTRIBUTION) -> Verdict:
    phases = seen.phases
    if phases is None or phases.coverage < rule.min_coverage:
        return _unknown(seen, rule)
    sides = {
        BottleneckRole.ROLLOUT: phases.share(*ROLLOUT_SIDE),
        BottleneckRole.TRAINER: phases.share(TRAINING),
        BottleneckRole.WEIGHT_SYNC: phases.share(SYNCING_WEIGHTS),
    }
    if not any(share > 0 for share in sides.values()):
        only = "the trainer only evaluated or checkpointed in the window"
        return _unknown(seen, rule, f"{only}; {_phase_text(phases)}")
    bound = max(sides, key=lambda role: sides[role])
    head = _phase_text(phases)
    if bound is BottleneckRole.TRAINER:
        return Verdict(
            BottleneckRole.TRAINER,
            f"trainer trained {sides[bound]:.0%} of {_window(phases)}; {head}",
            "training takes the largest share of the step: speed it up (more trainer GPUs, "
            "a larger micro-batch, activation checkpointing off); move GPUs from rollout only "
            "while its engines have room",
        )
    if bound is BottleneckRole.WEIGHT_SYNC:
        per_step = phases.seconds_per_step.get(SYNCING_WEIGHTS)
        each = f", {per_step:.0f}s per step" if per_step is not None else ""
        return Verdict(
            BottleneckRole.WEIGHT_SYNC,
            f"trainer synced weights {sides[bound]:.0%} of {_window(phases)}{each}; {head}",
            "weight sync bounds the step: broadcast over NCCL instead of through storage, "
            "sync in buckets, or sync every few steps",
        )
    return _rollout_side(seen, phases, sides[bound], head, rule)


def _rollout_side(
    seen: Observations, phases: PhaseBreakdown, share: float, head: str, rule: AttributionRule
) -> Verdict:
    waited = f"trainer waited for rollouts {share:.0%} of {_window(phases)}"
    saturated = _saturated(seen.engines, rule)
    engines = describe_engines(seen.engines, rule)
    verifier = seen.verifier
    if not saturated and verifier is not None and _verifier_backlog(verifier, rule):
        return Verdict(
            BottleneckRole.VERIFIER,
            f"{waited}; {describe_verifier(verifier)}; {engines}; {head}",
            "the verifiers hold rollouts back: add verifier replicas (or workers per replica) "
            "until their queue stays below one request per pod",
        )
    operating = _at_operating_point(seen)
    if saturated or operating:
        why = engines if saturated else f"{engines}; {operating}"
        advice = _add_engines(seen, share)
        return Verdict(BottleneckRole.ROLLOUT, f"{waited}; {why}; {head}", advice)
    return _concurrency(seen, f"{waited}; {engines}; {head}")


def _concurrency(seen: Observations, evidence: str) -> Verdict:
    curve = seen.curve
    recommended = curve.recommended if curve is not None else None
    current = seen.in_flight
    why = f" ({curve.summary})" if curve is not None and curve.summary else ""
    unusable = recommended is None or not math.isfinite(recommended) or recommended < 1
    # Only an untrusted curve reaches here with the driver past its recommendation (see
    # _at_operating_point): it cannot say how far to raise, so double.
    if not unusable and recommended is not None and current is not None and current >= recommended:
        unusable = True
        why = f" (the curve's {recommended:.0f}{why} is below what already runs: not trusted)"
    if unusable and current is not None and current > 0:
        recommended = 2 * current
    target = max(1, round(recommended)) if recommended is not None else None
    now = f"from about {current:.0f} requests in flight " if current else ""
    to = f"to {target}" if target is not None else "and watch the curve"
    advice = (
        f"the engines have room: raise the rollout driver's concurrency (e.g. "
        f"num_samples_in_parallel) {now}{to}{why}"
    )
    return Verdict(BottleneckRole.ROLLOUT_CONCURRENCY, evidence, advice, target)


def _add_engines(seen: Observations, share: float) -> str:
    count = len(seen.engines)
    if count == 0 or share >= 1:
        return "the engines are the limit: add rollout engines"
    # If rollouts overlap training, generation takes the whole step and the trainer's own
    # work 1 - share of it: scaling the engines by 1/(1 - share) stops the waiting.
    more = math.ceil(count * share / (1 - share))
    return (
        f"the engines are the limit: add rollout engines, about {more} more than the {count} "
        f"running (x{1 / (1 - share):.1f}) to stop the trainer waiting when rollouts overlap "
        "training; fewer shorten a synchronous step in proportion"
    )


def _saturated(engines: Sequence[EngineWindow], rule: AttributionRule) -> bool:
    if not engines:
        return False
    queueing = sum(1 for e in engines if e.saturated >= rule.saturated_time)
    kv = [e.kv_usage for e in engines if e.kv_usage is not None]
    kv_full = bool(kv) and sum(kv) / len(kv) >= rule.kv_full
    return queueing > rule.saturated_engines * len(engines) or kv_full


def _verifier_backlog(verifier: VerifierWindow, rule: AttributionRule) -> bool:
    pods = max(verifier.pods, 1)
    deep = verifier.queue_depth is not None and verifier.queue_depth > rule.queue_per_pod * pods
    growing = verifier.growth is not None and verifier.growth >= rule.queue_per_pod * pods
    return deep or growing or verifier.slow


def _at_operating_point(seen: Observations) -> str | None:
    """The driver already runs at or past the curve's recommendation: more requests in flight
    would only queue, so the engines are the limit although they do not queue yet."""
    curve, current = seen.curve, seen.in_flight
    if curve is None or current is None or not _placed_knee(curve):
        return None
    if curve.recommended is None or current < curve.recommended:
        return None
    where = f", the knee at {curve.knee.knee:.0f}"
    return (
        f"running at the curve's operating point: {current:.0f} in flight, at or past the "
        f"recommended {curve.recommended:.0f}{where}"
    )


def _placed_knee(curve: CurveVerdict) -> bool:
    """The curve bent where it was observed, on the knee rule's bins, coverage and doubling.
    Too few bins, or a recommendation extrapolated or doubled past what ran, says nothing about
    the engines being the limit: the driver's in-flight count may be under it."""
    return curve.knee.knee is not None and not curve.extrapolated


def describe_engines(engines: Sequence[EngineWindow], rule: AttributionRule) -> str:
    """'4 engines unsaturated: 9 requests in flight each, KV 31%, queue 0'."""
    if not engines:
        return "no rollout engine load observed"
    count = len(engines)
    queueing = sum(1 for e in engines if e.saturated >= rule.saturated_time)
    running = sum(e.running for e in engines) / count
    waiting = sum(e.waiting for e in engines) / count
    kv = [e.kv_usage for e in engines if e.kv_usage is not None]
    kv_text = f", KV {sum(kv) / len(kv):.0%}" if kv else ""
    tokens = sum(e.tokens_per_second for e in engines)
    noun = "engine" if count == 1 else "engines"
    queued = sum(e.saturated for e in engines) / count
    if queueing > rule.saturated_engines * count:
        state = f"{queueing} of {count} {noun} saturated"
    elif queued >= UNSATURATED_SHARE:
        state = f"{count} {noun} queueing {queued:.0%} of the time"
    else:
        state = f"{count} {noun} unsaturated"
    return (
        f"{state}: {running + waiting:.0f} requests in flight each{kv_text}, queue "
        f"{waiting:.0f}, {tokens:.0f} tokens/s in all"
    )


def describe_verifier(verifier: VerifierWindow) -> str:
    parts = []
    if verifier.queue_depth is not None:
        growth = f", growing by {verifier.growth:.0f}" if (verifier.growth or 0) >= 1 else ""
        pods = f"{verifier.pods} pod{'s' if verifier.pods != 1 else ''}"
        parts.append(f"verifier queue {verifier.queue_depth:.1f} requests over {pods}{growth}")
    if verifier.p99 is not None:
        p50 = f"p50 {verifier.p50:.2g}s, " if verifier.p50 is not None else ""
        slow = " (over its bound)" if verifier.slow else ""
        parts.append(f"verifier latency {p50}p99 {verifier.p99:.2g}s{slow}")
    elif verifier.slow:
        parts.append("verifier p99 over its bound")
    return "; ".join(parts) if parts else "no verifier queue or latency observed"


def _phase_text(phases: PhaseBreakdown) -> str:
    named = [
        (WAITING_FOR_ROLLOUTS, "waiting"),
        (GENERATING, "generating"),
        (TRAINING, "training"),
        (SYNCING_WEIGHTS, "syncing"),
        (EVALUATING, "evaluating"),
        (CHECKPOINTING, "checkpointing"),
    ]
    shares = ", ".join(f"{label} {phases.shares[p]:.0%}" for p, label in named if phases.shares[p])
    step = f", {phases.step_seconds:.0f}s per step" if phases.step_seconds else ""
    return f"phases ({phases.describe_pods()}): {shares}{step}"


def _window(phases: PhaseBreakdown) -> str:
    return format_duration(phases.window)


def _unknown(seen: Observations, rule: AttributionRule, missing: str | None = None) -> Verdict:
    covered = seen.phase_coverage
    if missing is None and covered <= 0:
        missing = (
            "no trainer phase counter (rljob_trainer_phase_seconds_total: the trainer does "
            "not report its phases through the rljob SDK)"
        )
    elif missing is None:
        missing = (
            f"the trainer's phase counters span {covered:.0%} of "
            f"{format_duration(seen.window)}, under the {rule.min_coverage:.0%} needed"
        )
    advice = "report the trainer's phases (rljob.sdk progress.phase) to tell what bounds the step"
    if _saturated(seen.engines, rule):
        advice += "; meanwhile the engines are saturated: more engines help if rollouts bound it"
    return Verdict(
        BottleneckRole.UNKNOWN, f"{missing}; {describe_engines(seen.engines, rule)}", advice
    )
