"""RewardHackingSuspected: a trainer's training reward rises while its held-out eval reward does
not (the SDK's rljob_rl_reward_train and rljob_rl_reward_eval gauges).

The same judgement as the shipped alert (charts/rljob-operator/files/rljob-rules.yaml,
docs/runbooks.md#rewardhackingsuspected): over `window`, the least-squares slope of the training
reward above `minSlopePerHour`, and the eval reward's slope at most `maxEvalRatio` times it. Only
a full window is judged: the pod's oldest sample at least `window` old, the eval reward present
in at least 90 % of the window's samples (both slopes then cover the same span), and at least
`minEvalPoints` evaluations. The SDK holds the eval gauge between eval steps, so its samples are
not its points: an evaluation is a change of value (as PromQL's changes() counts them). A
training reward that does not rise is healthy whether or not evals run.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.health.canaries.pods import (
    STALE_INTERVALS,
    PodStates,
    admits,
    combine,
    min_spacing,
    plausible_level,
)
from rljob.health.evaluation import (
    Evaluation,
    Evidence,
    finding,
    format_duration,
    healthy,
    insufficient,
)
from rljob.health.line import least_squares
from rljob.health.samples import ring_capacity
from rljob.vocabulary.enums import FailureReason

REWARD_HACKING = "reward_hacking"
# The evidence key of the detector's value (rljob_detector_value): the highest over the pods.
REWARD_HACKING_VALUE = "train_slope_per_hour"
# Share of the window's training samples that must carry an eval reward (the alert's 0.9).
EVAL_COVERAGE = 0.9
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class RewardSample:
    """One scrape of one trainer pod: its rewards at `t` (unix seconds); the eval reward None
    when the pod does not export it (yet)."""

    t: float
    reward_train: float
    reward_eval: float | None = None


@dataclass(frozen=True, slots=True)
class RewardHackingConfig:
    window: float = 2 * HOUR
    min_slope_per_hour: float = 0.05
    max_eval_ratio: float = 0.1
    min_eval_points: int = 4
    interval: float = 30.0

    @classmethod
    def from_health(cls, health: Health) -> RewardHackingConfig:
        spec = health.canaries.reward_hacking
        return cls(
            window=parse_duration(spec.window),
            min_slope_per_hour=spec.min_slope_per_hour,
            max_eval_ratio=spec.max_eval_ratio,
            min_eval_points=spec.min_eval_points,
            interval=parse_duration(health.interval),
        )


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of value over time (PromQL's deriv), per second; None without
    two distinct times."""
    line = least_squares(points)
    return line[1] if line is not None else None


def evaluations(values: Sequence[float]) -> int:
    """Distinct evaluations in a held gauge's samples: 1 plus its changes of value."""
    if not values:
        return 0
    return 1 + sum(1 for a, b in itertools.pairwise(values) if a != b)


class _Rewards:
    __slots__ = ("not_before", "samples")

    def __init__(self, capacity: int, not_before: float) -> None:
        self.samples: deque[RewardSample] = deque(maxlen=capacity)
        self.not_before = not_before

    def add(self, sample: RewardSample, spacing: float) -> None:
        last = self.samples[-1].t if self.samples else None
        if not admits(sample.t, last, self.not_before, spacing):
            return
        if not plausible_level(sample.reward_train):
            return
        eval_reward = sample.reward_eval
        if eval_reward is not None and not plausible_level(eval_reward):
            eval_reward = None
        self.samples.append(RewardSample(sample.t, sample.reward_train, eval_reward))

    def forget_before(self, at: float) -> None:
        self.not_before = max(self.not_before, at)
        while self.samples and self.samples[0].t < at:
            self.samples.popleft()

    def __len__(self) -> int:
        return len(self.samples)


class RewardHackingDetector:
    """Reward-hacking detection for one job's trainer pods; one job-wide evaluation naming the
    pod it comes from (`target` is the trainer's target name)."""

    def __init__(self, config: RewardHackingConfig, target: str = "trainer") -> None:
        self.config = config
        self.target = target
        self._capacity = ring_capacity(config.window, config.interval)
        self._spacing = min_spacing(config.interval)
        self._pods = PodStates(lambda not_before: _Rewards(self._capacity, not_before))

    def observe(self, pod: str, sample: RewardSample) -> None:
        self._pods.of(pod).add(sample, self._spacing)

    def note_restart(self, at: float) -> None:
        """A new trainer attempt from `at`: earlier samples belong to the old one."""
        self._pods.note_restart(at)

    def retain(self, pods: Collection[str]) -> None:
        self._pods.retain(pods)

    def retained_values(self) -> int:
        return self._pods.retained_values()

    def evaluate(self, now: float) -> Evaluation:
        per_pod = {
            pod: self._evaluate_pod(state.samples, now) for pod, state in self._pods.with_samples()
        }
        return combine(
            REWARD_HACKING,
            self.target,
            per_pod,
            _train_slope,
            "no trainer pod exports rljob_rl_reward_train",
        )

    def _evaluate_pod(self, samples: Sequence[RewardSample], now: float) -> Evaluation:
        config = self.config
        window = format_duration(config.window)
        current = [s for s in samples if now - config.window <= s.t <= now]
        newest = current[-1].t if current else None
        if newest is None or now - newest > STALE_INTERVALS * config.interval:
            return insufficient(REWARD_HACKING, self.target, "no recent training reward")
        reported_for = now - samples[0].t
        if reported_for < config.window:
            return insufficient(
                REWARD_HACKING,
                self.target,
                f"training reward reported for {format_duration(reported_for)} of the "
                f"{window} window",
            )
        train = slope([(s.t, s.reward_train) for s in current])
        if train is None:
            return insufficient(
                REWARD_HACKING, self.target, f"too few training rewards in the last {window}"
            )
        evidence: Evidence = {
            REWARD_HACKING_VALUE: train * HOUR,
            "window_seconds": config.window,
            "train_samples": float(len(current)),
        }
        if not train * HOUR > config.min_slope_per_hour:
            return healthy(
                REWARD_HACKING,
                self.target,
                f"training reward {train * HOUR:+.3f}/h over {window} (rising counts above "
                f"{config.min_slope_per_hour:g}/h)",
                evidence,
            )
        return self._judge_eval(current, train, evidence)

    def _judge_eval(
        self, current: Sequence[RewardSample], train: float, evidence: Evidence
    ) -> Evaluation:
        config = self.config
        window = format_duration(config.window)
        evals = [(s.t, s.reward_eval) for s in current if s.reward_eval is not None]
        if len(evals) < EVAL_COVERAGE * len(current):
            return insufficient(
                REWARD_HACKING,
                self.target,
                f"training reward rising {train * HOUR:+.3f}/h; eval reward present in "
                f"{len(evals)} of {len(current)} samples over {window} (needs "
                f"{EVAL_COVERAGE:.0%})",
                evidence,
            )
        points = evaluations([value for _, value in evals])
        evidence["eval_points"] = float(points)
        eval_slope = slope(evals)
        if points < config.min_eval_points or eval_slope is None:
            return insufficient(
                REWARD_HACKING,
                self.target,
                f"training reward rising {train * HOUR:+.3f}/h; {points} evaluations in the "
                f"last {window} (needs {config.min_eval_points})",
                evidence,
            )
        evidence["eval_slope_per_hour"] = eval_slope * HOUR
        rates = (
            f"training reward {train * HOUR:+.3f}/h, held-out eval reward "
            f"{eval_slope * HOUR:+.3f}/h over {window} ({points} evaluations)"
        )
        if eval_slope > config.max_eval_ratio * train:
            return healthy(REWARD_HACKING, self.target, f"{rates}: eval follows", evidence)
        message = (
            f"{rates}: the eval reward gains less than {config.max_eval_ratio:g}x the training "
            "reward's rise; the policy may be exploiting the reward"
        )
        return finding(
            REWARD_HACKING,
            self.target,
            FailureReason.REWARD_HACKING_SUSPECTED,
            message,
            evidence,
        )


def _train_slope(evaluation: Evaluation) -> float:
    value = evaluation.evidence.get(REWARD_HACKING_VALUE)
    return float(value) if isinstance(value, int | float) else -math.inf
