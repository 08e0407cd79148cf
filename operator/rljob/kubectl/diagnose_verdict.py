"""The diagnose screen's verdict in words, and what its own figures say against it.

The operator (rljob.health.bottleneck.attribution) names the role from the trainer's phase
shares, split into three sides: the rollout side (waiting for or generating rollouts), training
and weight sync. The largest side bounds the step; when it is the rollout side, the engines' and
verifiers' load picks Rollout, RolloutConcurrency or Verifier. Each meaning below restates that
rule, so it is true whenever the verdict is freshly given.

The screen can still print figures that cut against it: a new role replaces the held one only once
it is confirmed (rljob.health.bottleneck.tracker), so the window may point elsewhere already, and a
trainer verdict says nothing about how close the rollout side is to its limit. `caveat` reads the
figures the screen prints, with the operator's thresholds, and says in one line what cuts against
the verdict."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rljob.vocabulary.attribution import DEFAULT_ATTRIBUTION, ROLLOUT_SIDE, AttributionRule
from rljob.vocabulary.enums import BottleneckRole
from rljob.vocabulary.phases import GENERATING, SYNCING_WEIGHTS, TRAINING

ROLLOUT_SIDE_WORDS = "the rollout side (waiting for or generating rollouts)"

ROLE_MEANINGS: dict[str, str] = {
    BottleneckRole.ROLLOUT: (
        f"{ROLLOUT_SIDE_WORDS} takes the largest share of the step, and the engines are at "
        "their limit: queueing, KV caches full, or the driver at the curve's run-at (R)"
    ),
    BottleneckRole.ROLLOUT_CONCURRENCY: (
        f"{ROLLOUT_SIDE_WORDS} takes the largest share of the step while the engines are not "
        "saturated and the verifiers keep up: room for more requests in flight"
    ),
    BottleneckRole.VERIFIER: (
        f"{ROLLOUT_SIDE_WORDS} takes the largest share of the step while the verifiers queue or "
        "run slow and the engines are not saturated"
    ),
    BottleneckRole.TRAINER: (
        "training takes the largest share of the step, more than the rollout side or weight sync"
    ),
    BottleneckRole.WEIGHT_SYNC: (
        "weight sync takes the largest share of the step, more than training or the rollout side"
    ),
    BottleneckRole.UNKNOWN: (
        "too little to tell: the trainer's phase counters spanned too little of the window, or "
        "showed only evaluating and checkpointing"
    ),
}

# The three sides the operator weighs, and the phases each one sums.
SIDE_PHASES: dict[BottleneckRole, tuple[str, ...]] = {
    BottleneckRole.ROLLOUT: ROLLOUT_SIDE,
    BottleneckRole.TRAINER: (TRAINING,),
    BottleneckRole.WEIGHT_SYNC: (SYNCING_WEIGHTS,),
}
SIDE_NAMES: dict[BottleneckRole, str] = {
    BottleneckRole.ROLLOUT: "the rollout side",
    BottleneckRole.TRAINER: "training",
    BottleneckRole.WEIGHT_SYNC: "weight sync",
}
# A side ahead by less than this reads as a tie: the printed percentages would barely differ.
SHARE_MARGIN = 0.01
# A quarter of the step spent on rollouts beside a trainer verdict is a cost worth naming.
LARGE_ROLLOUT_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class ScreenFigures:
    """The figures the diagnose screen prints, as numbers (garbled fields left out)."""

    phase_shares: Mapping[str, float]  # by the SDK's phase name; empty: no phase table
    engine_saturation: Sequence[float]  # each engine's share of the window with requests queued
    kv_usage: Sequence[float]  # the engines that report their KV-cache usage
    in_flight: float | None = None  # the curve's requests in flight now
    knee: float | None = None
    run_at: float | None = None  # the curve's recommended concurrency (R)
    verifier_queue: float | None = None
    verifier_p99: float | None = None

    def side_shares(self) -> dict[BottleneckRole, float]:
        """Each side's share of the step; empty without a phase table."""
        if not self.phase_shares:
            return {}
        return {
            side: sum(self.phase_shares.get(phase, 0.0) for phase in phases)
            for side, phases in SIDE_PHASES.items()
        }


def caveat(role: str, figures: ScreenFigures, rule: AttributionRule = DEFAULT_ATTRIBUTION) -> str:
    """What the figures say against the verdict, in one line; empty when nothing does."""
    check = AGAINST.get(role)
    return "; ".join(check(figures, rule)) if check is not None else ""


# ------------------------------------------------------------------------------ per verdict


def _against_trainer(figures: ScreenFigures, rule: AttributionRule) -> list[str]:
    outranked = _outranked(figures, BottleneckRole.TRAINER)
    engines = _engines_at_limit(figures, rule)
    if outranked:
        return [*outranked, *([engines] if engines else [])]
    rollout_share = figures.side_shares().get(BottleneckRole.ROLLOUT, 0.0)
    waiting = (
        f"{rollout_share:.0%} of the step {_rollout_verb(figures)}"
        if rollout_share >= LARGE_ROLLOUT_SHARE
        else ""
    )
    if engines and waiting:
        return [f"{engines} and {waiting}", "both sides are near their limit"]
    if engines:
        return [engines, "a faster trainer would soon wait for rollouts"]
    return [waiting] if waiting else []


def _against_rollout(figures: ScreenFigures, rule: AttributionRule) -> list[str]:
    clauses = _outranked(figures, BottleneckRole.ROLLOUT)
    if _engines_at_limit(figures, rule) or _at_run_at(figures):
        return clauses
    if not figures.engine_saturation:
        return [*clauses, "no engine load in the window shows the engines at their limit"]
    return [*clauses, f"{_engines_with_room(figures, rule)}: the engines have room"]


def _against_concurrency(figures: ScreenFigures, rule: AttributionRule) -> list[str]:
    clauses = _outranked(figures, BottleneckRole.ROLLOUT)
    if engines := _engines_at_limit(figures, rule):
        clauses.append(f"{engines}: more requests in flight would queue")
    return clauses


def _against_verifier(figures: ScreenFigures, rule: AttributionRule) -> list[str]:
    clauses = _outranked(figures, BottleneckRole.ROLLOUT)
    if not (figures.verifier_queue or figures.verifier_p99 is not None):
        clauses.append("the window shows no verifier queue or latency")
    if engines := _engines_at_limit(figures, rule):
        clauses.append(f"{engines} as well")
    return clauses


def _against_weight_sync(figures: ScreenFigures, _: AttributionRule) -> list[str]:
    return _outranked(figures, BottleneckRole.WEIGHT_SYNC)


def _against_unknown(figures: ScreenFigures, _: AttributionRule) -> list[str]:
    shares = figures.side_shares()
    if not shares or max(shares.values()) <= 0:
        return []
    leader = max(shares, key=lambda side: shares[side])
    return [f"the step table has {SIDE_NAMES[leader]} largest, at {shares[leader]:.0%}"]


AGAINST: dict[str, Callable[[ScreenFigures, AttributionRule], list[str]]] = {
    BottleneckRole.ROLLOUT: _against_rollout,
    BottleneckRole.ROLLOUT_CONCURRENCY: _against_concurrency,
    BottleneckRole.VERIFIER: _against_verifier,
    BottleneckRole.TRAINER: _against_trainer,
    BottleneckRole.WEIGHT_SYNC: _against_weight_sync,
    BottleneckRole.UNKNOWN: _against_unknown,
}


# ------------------------------------------------------------------------------ readings


def _outranked(figures: ScreenFigures, claimed: BottleneckRole) -> list[str]:
    """The side the phase table puts above the one the verdict claims (a held verdict)."""
    shares = figures.side_shares()
    if not shares:
        return ["the window has no trainer phase table to show it"]
    leader = max(shares, key=lambda side: shares[side])
    if shares[leader] - shares[claimed] < SHARE_MARGIN:
        return []
    return [
        f"the step table has {SIDE_NAMES[leader]} at {shares[leader]:.0%}, above "
        f"{SIDE_NAMES[claimed]} at {shares[claimed]:.0%}"
    ]


def _saturated_count(figures: ScreenFigures, rule: AttributionRule) -> int:
    return sum(1 for share in figures.engine_saturation if share >= rule.saturated_time)


def _mean_kv(figures: ScreenFigures) -> float | None:
    kv = figures.kv_usage
    return sum(kv) / len(kv) if kv else None


def _engines_at_limit(figures: ScreenFigures, rule: AttributionRule) -> str:
    """The engines saturated by the operator's rule, in words; empty when they are not."""
    count, saturated = len(figures.engine_saturation), _saturated_count(figures, rule)
    if count and saturated > rule.saturated_engines * count:
        verb = "is" if saturated == 1 else "are"
        return f"{saturated} of {_engines(count)} {verb} saturated with queued requests"
    kv = _mean_kv(figures)
    if kv is not None and kv >= rule.kv_full:
        return f"the engines' KV caches are {kv:.0%} full"
    return ""


def _engines_with_room(figures: ScreenFigures, rule: AttributionRule) -> str:
    kv = _mean_kv(figures)
    parts = [_saturated_share(figures, rule), *([f"KV {kv:.0%}"] if kv is not None else [])]
    in_flight, run_at = figures.in_flight, figures.run_at
    if in_flight is not None and run_at is not None and in_flight < run_at:
        parts.append(f"{in_flight:.0f} in flight under the curve's R of {run_at:.0f}")
    return ", ".join(parts)


def _saturated_share(figures: ScreenFigures, rule: AttributionRule) -> str:
    """'none of the 4 engines is saturated', 'only 1 of 4 engines is saturated'."""
    count, saturated = len(figures.engine_saturation), _saturated_count(figures, rule)
    if count == 1:
        return "the engine is not saturated"
    if saturated == 0:
        return f"none of the {count} engines is saturated"
    verb = "is" if saturated == 1 else "are"
    return f"only {saturated} of {count} engines {verb} saturated"


def _at_run_at(figures: ScreenFigures) -> bool:
    """The driver at or past a knee's recommendation: more in flight would only queue."""
    in_flight, run_at = figures.in_flight, figures.run_at
    if figures.knee is None or in_flight is None or run_at is None:
        return False
    return in_flight >= run_at


def _rollout_verb(figures: ScreenFigures) -> str:
    generates = figures.phase_shares.get(GENERATING, 0.0) > 0
    return "waits for or generates rollouts" if generates else "waits for rollouts"


def _engines(count: int) -> str:
    return f"{count} engine" if count == 1 else f"{count} engines"
