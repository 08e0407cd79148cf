"""The diagnosis as status.bottleneck (rljob.api.diagnosis), bounded: the busiest engines first,
at most MAX_ENGINE_LOADS; the curve's bins with the most time, at most MAX_CURVE_POINTS."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from rljob.api.diagnosis import (
    MAX_CURVE_POINTS,
    MAX_ENGINE_LOADS,
    Bottleneck,
    ConcurrencyCurveStatus,
    CurvePoint,
    EngineLoad,
    PhaseShare,
    VerifierLoad,
)
from rljob.health.bottleneck.attribution import Observations
from rljob.health.bottleneck.extrapolate import CurveVerdict
from rljob.health.bottleneck.load import EngineWindow, VerifierWindow
from rljob.health.bottleneck.phases import PhaseBreakdown
from rljob.health.bottleneck.tracker import Tracked
from rljob.vocabulary.enums import RoleName
from rljob.vocabulary.phases import PHASES


def to_status(
    tracked: Tracked, now: float, seen: Observations, curve: ConcurrencyCurveStatus | None
) -> Bottleneck:
    verdict, phases, verifier = tracked.verdict, seen.phases, seen.verifier
    return Bottleneck(
        role=verdict.role,
        since=_time(tracked.since),
        updated_at=_time(now),
        window_seconds=seen.window,
        step_seconds=_amount(phases.step_seconds) if phases is not None else None,
        phases=phase_shares(phases) if phases is not None else [],
        evidence=verdict.evidence,
        advice=verdict.advice,
        recommended_concurrency=verdict.recommended_concurrency,
        curve=curve,
        engines=[engine_load(e) for e in seen.engines[:MAX_ENGINE_LOADS]],
        verifier=verifier_load(verifier) if verifier is not None else None,
    )


def phase_shares(phases: PhaseBreakdown) -> list[PhaseShare]:
    per_step = phases.seconds_per_step
    return [
        PhaseShare(
            phase=phase,
            share=_share(phases.shares.get(phase, 0.0)),
            seconds_per_step=_amount(per_step.get(phase)),
        )
        for phase in PHASES
    ]


def engine_load(engine: EngineWindow) -> EngineLoad:
    return EngineLoad(
        pod=engine.pod,
        running=_amount(engine.running) or 0.0,
        waiting=_amount(engine.waiting) or 0.0,
        kv_usage=_share(engine.kv_usage) if engine.kv_usage is not None else None,
        tokens_per_second=_amount(engine.tokens_per_second) or 0.0,
        saturated=_share(engine.saturated),
    )


def verifier_load(verifier: VerifierWindow) -> VerifierLoad:
    return VerifierLoad(
        p50_seconds=_amount(verifier.p50),
        p99_seconds=_amount(verifier.p99),
        queue_depth=_amount(verifier.queue_depth),
    )


def curve_status(
    verdict: CurveVerdict,
    bins: Sequence[tuple[float, float, float]],
    current: float | None,
    role: RoleName = RoleName.ROLLOUT,
) -> ConcurrencyCurveStatus:
    knee = verdict.knee
    kept = sorted(bins, key=lambda b: -b[2])[:MAX_CURVE_POINTS]
    points = [
        CurvePoint(concurrency=c, throughput=t, seconds=s)
        for c, t, s in sorted(kept)
        if all(math.isfinite(v) and v >= 0 for v in (c, t, s))
    ]
    return ConcurrencyCurveStatus(
        role=role,
        points=points,
        current=_amount(current),
        knee=_amount(knee.knee),
        peak=_amount(verdict.peak),
        degrading_from=_amount(knee.degrading_from),
        recommended=_amount(verdict.recommended),
        beyond=knee.beyond,
        observed_from=_amount(knee.confidence.lowest) or None,
        observed_to=_amount(knee.confidence.highest) or None,
        coverage=_share(knee.confidence.coverage),
        message=verdict.message,
    )


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _amount(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def _share(value: float | None) -> float:
    return min(1.0, max(0.0, value)) if value is not None and math.isfinite(value) else 0.0
