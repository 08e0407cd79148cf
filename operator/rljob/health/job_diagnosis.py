"""One job's diagnosis (docs/architecture.md section 7): the bottleneck monitor and the RL
correctness canaries, fed from the diagnosis series (rljob.health.profiles.diagnosis) and the engine
samples the repairing detectors already read. Pure; the job's monitor owns one and the health loop
reads `bottleneck` and `step_phase_seconds` after each round.

The diagnosis series are asked as a role of their own (DIAGNOSIS_ROLE): a source that fails them
leaves the bottleneck and canaries without data for the round and never blinds the stall,
drift or latency detectors.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from rljob.api.diagnosis import Bottleneck
from rljob.api.spec import Health
from rljob.health.bottleneck import BottleneckConfig, BottleneckMonitor
from rljob.health.canaries import (
    RewardHackingConfig,
    RewardHackingDetector,
    RewardSample,
    ThroughputRegressionConfig,
    ThroughputRegressionDetector,
    ThroughputSample,
)
from rljob.health.evaluation import VERIFIER_LATENCY, Evaluation
from rljob.health.profiles.diagnosis import (
    DIAGNOSIS,
    VERIFIER_QUEUE,
    TrainerSample,
    queue_depths,
    trainer_samples,
)
from rljob.health.profiles.signals import Series, Signal
from rljob.health.samples import EngineSample
from rljob.health.verifier import P99_EVIDENCE
from rljob.vocabulary.enums import BottleneckRole, RoleName
from rljob.vocabulary.phases import GENERATING

DIAGNOSIS_ROLE = "diagnosis"


def diagnosis_queries(trainer: Sequence[str], verifier: Sequence[str]) -> dict[Signal, set[str]]:
    """The diagnosis signals and, for each, the pods asked: trainer series of the trainer's
    pods, the queue depth of the verifiers'."""
    wanted: dict[Signal, set[str]] = {}
    if trainer:
        wanted.update({s: set(trainer) for s in DIAGNOSIS.trainer_signals().values()})
    if verifier:
        wanted.update({s: set(verifier) for s in DIAGNOSIS.verifier_signals().values()})
    return wanted


def diagnosis_span(health: Health, interval: float) -> float:
    """How far back the diagnosis needs history: the longest of its windows."""
    rewards = RewardHackingConfig.from_health(health).window
    throughput = ThroughputRegressionConfig.from_health(health)
    bottleneck = BottleneckConfig.from_health(health).window
    return max(rewards, throughput.before + throughput.after, bottleneck) + interval


class JobDiagnosis:
    """See the module docstring. `staleness` and `min_spacing` are the job monitor's."""

    def __init__(self, health: Health, *, colocated: bool = False) -> None:
        config = BottleneckConfig.from_health(health)
        if colocated:  # the engines read are the trainer gang's own
            config = replace(config, engine_role=RoleName.TRAINER)
        self.bottleneck_monitor = BottleneckMonitor(config)
        self.reward_hacking = RewardHackingDetector(RewardHackingConfig.from_health(health))
        self.throughput = ThroughputRegressionDetector(
            ThroughputRegressionConfig.from_health(health)
        )
        self.bottleneck: Bottleneck | None = None

    def feed_trainer(
        self,
        pod: str,
        series: Mapping[str, Sequence[Series]],
        staleness: float,
        *,
        after: float,
        min_spacing: float,
    ) -> float | None:
        """Feeds one trainer pod's diagnosis series; the newest sample's time, if any."""
        samples = trainer_samples(
            DIAGNOSIS, series, staleness, after=after, min_spacing=min_spacing
        )
        for sample in samples:
            self._observe_trainer(pod, sample)
        return samples[-1].t if samples else None

    def _observe_trainer(self, pod: str, sample: TrainerSample) -> None:
        if sample.phase_seconds:
            self.bottleneck_monitor.observe_trainer(
                pod, sample.t, sample.phase_seconds, sample.step
            )
        if sample.reward_train is not None:
            self.reward_hacking.observe(
                pod, RewardSample(sample.t, sample.reward_train, sample.reward_eval)
            )
        generating = sample.phase_seconds.get(GENERATING)
        tokens, generation = sample.generated_tokens_total, sample.policy_generation
        if generating is not None and tokens is not None and generation is not None:
            self.throughput.observe(pod, ThroughputSample(sample.t, tokens, generating, generation))

    def feed_verifier(
        self, pod: str, series: Mapping[str, Sequence[Series]], *, after: float, min_spacing: float
    ) -> float | None:
        """Feeds one verifier pod's queue depth; the newest point's time, if any."""
        points = queue_depths(series.get(VERIFIER_QUEUE, ()), after=after, min_spacing=min_spacing)
        for t, depth in points:
            self.bottleneck_monitor.observe_verifier(pod, t, depth)
        return points[-1][0] if points else None

    def observe_engine(self, pod: str, sample: EngineSample) -> None:
        self.bottleneck_monitor.observe_engine(pod, sample)

    def note_verifier_evaluations(self, evaluations: Iterable[Evaluation]) -> None:
        """The VerifierSlow detector's round: the highest p99 and whether any verifier was slow."""
        p99s = [
            float(value)
            for e in evaluations
            if e.detector == VERIFIER_LATENCY
            and isinstance(value := e.evidence.get(P99_EVIDENCE), int | float)
            and math.isfinite(value)
        ]
        slow = any(e.detector == VERIFIER_LATENCY and e.is_finding for e in evaluations)
        # A round without a p99 clears the last one: an old "slow" must not stick.
        self.bottleneck_monitor.note_verifier_latency(None, max(p99s, default=None), slow)

    def note_restart(self, at: float) -> None:
        """A new trainer attempt: the canaries forget the old one's samples."""
        self.reward_hacking.note_restart(at)
        self.throughput.note_restart(at)

    def retain(self, pods: Collection[str]) -> None:
        self.bottleneck_monitor.retain(pods)
        self.reward_hacking.retain(pods)
        self.throughput.retain(pods)

    def evaluate(self, now: float, *, trainer_watched: bool) -> list[Evaluation]:
        """Diagnoses the bottleneck (kept in `bottleneck`) and, while the trainer is watched,
        evaluates the canaries."""
        self.bottleneck = self.bottleneck_monitor.evaluate(now)
        if not trainer_watched:
            return []
        return [self.reward_hacking.evaluate(now), self.throughput.evaluate(now)]

    @property
    def role(self) -> BottleneckRole | None:
        return self.bottleneck_monitor.role

    def step_phase_seconds(self) -> dict[str, float]:
        return self.bottleneck_monitor.step_phase_seconds()
