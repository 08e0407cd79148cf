"""The series the diagnosis reads (docs/architecture.md section 7; docs/sdk-metrics.md): the SDK's
trainer phase seconds, its RL correctness gauges and generated-token counter, and the verifier
helper's queue depth. None of them gates a detector that repairs: a pod that exports none (a trainer
without the SDK, a verifier without the helper) leaves the bottleneck Unknown and the canaries
without data, and its other signals are read as before.

Names as rljob.sdk exports them (prometheus_client adds `_total` to counters):
`rljob_trainer_phase_seconds_total{phase}` (rljob.sdk.phase_time), `rljob_rl_reward_train`,
`rljob_rl_reward_eval`, `rljob_rl_generated_tokens_total` (rljob.sdk.metrics) and
`rljob_verifier_queue_depth` (rljob.sdk.verifier).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rljob.health.profiles.lookup import SeriesLookup
from rljob.health.profiles.sampling import sample_times
from rljob.health.profiles.signals import POLICY_GENERATION, TRAINER_STEP, Series, Signal

PHASE_SECONDS = "phase_seconds"
REWARD_TRAIN = "reward_train"
REWARD_EVAL = "reward_eval"
GENERATED_TOKENS = "rl_generated_tokens"
VERIFIER_QUEUE = "verifier_queue"


@dataclass(frozen=True, slots=True)
class DiagnosisMetrics:
    phase_seconds: str = "rljob_trainer_phase_seconds_total"
    phase_label: str = "phase"
    reward_train: str = "rljob_rl_reward_train"
    reward_eval: str = "rljob_rl_reward_eval"
    generated_tokens: str = "rljob_rl_generated_tokens_total"
    verifier_queue: str = "rljob_verifier_queue_depth"
    # Read with the phase seconds so a sample says its step and the sync it follows.
    step: str = "rljob_trainer_step"
    policy_generation: str = "rljob_policy_generation"

    def trainer_signals(self) -> dict[str, Signal]:
        return {
            PHASE_SECONDS: Signal(PHASE_SECONDS, self.phase_seconds),
            REWARD_TRAIN: Signal(REWARD_TRAIN, self.reward_train),
            REWARD_EVAL: Signal(REWARD_EVAL, self.reward_eval),
            GENERATED_TOKENS: Signal(GENERATED_TOKENS, self.generated_tokens),
            TRAINER_STEP: Signal(TRAINER_STEP, self.step),
            POLICY_GENERATION: Signal(POLICY_GENERATION, self.policy_generation),
        }

    def verifier_signals(self) -> dict[str, Signal]:
        return {VERIFIER_QUEUE: Signal(VERIFIER_QUEUE, self.verifier_queue)}


DIAGNOSIS = DiagnosisMetrics()


@dataclass(frozen=True, slots=True)
class TrainerSample:
    """One scrape of one trainer pod's diagnosis series; `None`: not exported then."""

    t: float
    phase_seconds: Mapping[str, float]
    step: float | None = None
    policy_generation: float | None = None
    reward_train: float | None = None
    reward_eval: float | None = None
    generated_tokens_total: float | None = None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def trainer_samples(
    profile: DiagnosisMetrics,
    series: Mapping[str, Sequence[Series]],
    staleness: float,
    *,
    after: float = -math.inf,
    min_spacing: float = 0.0,
) -> list[TrainerSample]:
    """One pod's samples, one per timestamp of any of its diagnosis series after `after`."""
    by_phase: dict[str, list[Series]] = {}
    for one in series.get(PHASE_SECONDS, ()):
        phase = one.label(profile.phase_label)
        if phase:
            by_phase.setdefault(phase, []).append(one)
    phases = {phase: SeriesLookup(found, None, staleness) for phase, found in by_phase.items()}
    others = {
        name: SeriesLookup(series.get(name, ()), None, staleness)
        for name in (TRAINER_STEP, POLICY_GENERATION, REWARD_TRAIN, REWARD_EVAL, GENERATED_TOKENS)
    }
    timed = [*series.get(PHASE_SECONDS, ()), *series.get(REWARD_TRAIN, ())]
    timed += series.get(GENERATED_TOKENS, ())
    samples = []
    for t in sample_times(timed, after=after, min_spacing=min_spacing):
        seconds = {
            phase: value
            for phase, lookup in phases.items()
            if (value := _finite(lookup.reduce(t, max))) is not None and value >= 0
        }
        values = {name: _finite(lookup.reduce(t, max)) for name, lookup in others.items()}
        samples.append(
            TrainerSample(
                t=t,
                phase_seconds=seconds,
                step=values[TRAINER_STEP],
                policy_generation=values[POLICY_GENERATION],
                reward_train=values[REWARD_TRAIN],
                reward_eval=values[REWARD_EVAL],
                generated_tokens_total=values[GENERATED_TOKENS],
            )
        )
    return samples


def queue_depths(
    series: Sequence[Series], *, after: float = -math.inf, min_spacing: float = 0.0
) -> list[tuple[float, float]]:
    """One verifier pod's (t, queue depth) points after `after` (garbage dropped)."""
    lookup = SeriesLookup(series, None, math.inf)
    points = []
    for t in sample_times(series, after=after, min_spacing=min_spacing):
        depth = _finite(lookup.reduce(t, sum))
        if depth is not None and depth >= 0:
            points.append((t, depth))
    return points
