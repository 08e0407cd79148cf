"""ThroughputRegression: a weight sync left generation slower per token (the SDK's
rljob_rl_generated_tokens_total over rljob_trainer_phase_seconds_total{phase="generating"}, and
the trainer's rljob_policy_generation).

The shipped alert (ThroughputRegressionAfterSync, docs/runbooks.md) compares fixed windows because
PromQL cannot anchor one at a sync; here the windows are anchored at the latest policy generation
change whose `after` window has passed: tokens per second of generating phase over the `after`
window from the first sample of the new generation, against the `before` window ending at the
last sample of the old one; a finding when the ratio is below 1 - `threshold`. Per generated
token, so longer responses do not read as slower; the `after` window averages the sync's warm-up.

Both windows are measured between samples where the token counter moved: the SDK adds a step's
tokens when the step is reported, while the phase clock runs as the step generates, so between
two such samples the tokens and the generating seconds belong to the same steps. Each window
needs two of them spanning at least half of it. Counters are summed across resets. Each sync is
reported once: a finding for a generation already reported reads as healthy (keyed by the
generation synced to; a new attempt forgets them)."""

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
    plausible_count,
    plausible_level,
)
from rljob.health.evaluation import (
    FINDING,
    Evaluation,
    Evidence,
    finding,
    format_duration,
    format_percent_change,
    healthy,
    insufficient,
)
from rljob.health.samples import counter_delta, ring_capacity
from rljob.vocabulary.enums import FailureReason

THROUGHPUT_REGRESSION = "throughput_regression"
# The evidence key of the detector's value (rljob_detector_value): the lowest over the pods.
THROUGHPUT_REGRESSION_VALUE = "throughput_ratio"
GENERATION_EVIDENCE = "policy_generation"
CHANGED_AT_EVIDENCE = "generation_changed_at"
# A window is measured between token reports spanning at least this share of it.
MIN_SPAN_SHARE = 0.5
REPORTED_GENERATIONS = 16


@dataclass(frozen=True, slots=True)
class ThroughputSample:
    """One scrape of one trainer pod (unix seconds; counters cumulative)."""

    t: float
    generated_tokens_total: float
    generating_seconds_total: float
    policy_generation: float


@dataclass(frozen=True, slots=True)
class ThroughputRegressionConfig:
    before: float = 3600.0
    after: float = 900.0
    threshold: float = 0.3
    interval: float = 30.0

    @classmethod
    def from_health(cls, health: Health) -> ThroughputRegressionConfig:
        spec = health.canaries.throughput_regression
        return cls(
            before=parse_duration(spec.before),
            after=parse_duration(spec.after),
            threshold=spec.threshold,
            interval=parse_duration(health.interval),
        )


@dataclass(frozen=True, slots=True)
class _Point:
    t: float
    tokens: float  # summed across counter resets since the pod's first sample
    seconds: float
    generation: float
    reported: bool  # the token counter moved since the previous point


@dataclass(frozen=True, slots=True)
class _Rate:
    tokens_per_second: float
    span: float


class _Counters:
    __slots__ = ("judged", "last_raw", "not_before", "points")

    def __init__(self, capacity: int, not_before: float) -> None:
        self.points: deque[_Point] = deque(maxlen=capacity)
        self.last_raw: tuple[float, float] | None = None
        self.not_before = not_before
        # The latest judged sync's verdict, kept once its samples leave the ring.
        self.judged: tuple[float, Evaluation] | None = None

    def add(self, sample: ThroughputSample, spacing: float) -> None:
        last = self.points[-1] if self.points else None
        if not admits(sample.t, last.t if last else None, self.not_before, spacing):
            return
        raw = (sample.generated_tokens_total, sample.generating_seconds_total)
        if not all(plausible_count(v) for v in raw) or not plausible_level(
            sample.policy_generation
        ):
            return
        if last is None or self.last_raw is None:
            point = _Point(sample.t, 0.0, 0.0, sample.policy_generation, False)
        else:
            tokens = counter_delta(self.last_raw[0], raw[0])
            seconds = counter_delta(self.last_raw[1], raw[1])
            point = _Point(
                sample.t,
                last.tokens + tokens,
                last.seconds + seconds,
                sample.policy_generation,
                tokens > 0,
            )
        self.points.append(point)
        self.last_raw = raw

    def forget_before(self, at: float) -> None:
        self.not_before = max(self.not_before, at)
        while self.points and self.points[0].t < at:
            self.points.popleft()
        if not self.points:
            self.last_raw = None
        if self.judged is not None and self.judged[0] < at:
            self.judged = None

    def __len__(self) -> int:
        return len(self.points)


def _rate(points: Sequence[_Point], start: float, end: float, window: float) -> _Rate | None:
    """Tokens per generating second between the first and last token reports in [start, end],
    or None with fewer than two spanning less than MIN_SPAN_SHARE of `window`, or no
    generating time between them."""
    reports = [p for p in points if p.reported and start <= p.t <= end]
    if len(reports) < 2 or reports[-1].t - reports[0].t < MIN_SPAN_SHARE * window:
        return None
    seconds = reports[-1].seconds - reports[0].seconds
    if not seconds > 0:
        return None
    return _Rate((reports[-1].tokens - reports[0].tokens) / seconds, reports[-1].t - reports[0].t)


class ThroughputRegressionDetector:
    """Throughput-regression detection for one job's trainer pods; one job-wide evaluation
    naming the pod it comes from (`target` is the trainer's target name)."""

    def __init__(self, config: ThroughputRegressionConfig, target: str = "trainer") -> None:
        self.config = config
        self.target = target
        span = config.before + config.after + 2 * STALE_INTERVALS * config.interval
        self._capacity = ring_capacity(span, config.interval)
        self._spacing = min_spacing(config.interval)
        self._pods = PodStates(lambda not_before: _Counters(self._capacity, not_before))
        self._reported: deque[float] = deque(maxlen=REPORTED_GENERATIONS)

    def observe(self, pod: str, sample: ThroughputSample) -> None:
        self._pods.of(pod).add(sample, self._spacing)

    def note_restart(self, at: float) -> None:
        """A new trainer attempt from `at`: earlier samples belong to the old one, and its
        syncs (even to the same generation numbers) are new ones."""
        self._pods.note_restart(at)
        self._reported.clear()

    def retain(self, pods: Collection[str]) -> None:
        self._pods.retain(pods)

    def retained_values(self) -> int:
        return self._pods.retained_values()

    def evaluate(self, now: float) -> Evaluation:
        per_pod = {
            pod: self._once_per_sync(self._evaluate_pod(state, now))
            for pod, state in self._pods.with_samples()
        }
        evaluation = combine(
            THROUGHPUT_REGRESSION,
            self.target,
            per_pod,
            _drop,
            "no trainer pod exports rljob_rl_generated_tokens_total with rljob_policy_generation",
        )
        generation = evaluation.evidence.get(GENERATION_EVIDENCE)
        if evaluation.is_finding and isinstance(generation, float):
            self._reported.append(generation)
        return evaluation

    def _once_per_sync(self, verdict: Evaluation) -> Evaluation:
        if verdict.outcome != FINDING:
            return verdict
        if verdict.evidence.get(GENERATION_EVIDENCE) not in self._reported:
            return verdict
        message = f"{verdict.message} (reported already: once per sync)"
        return healthy(THROUGHPUT_REGRESSION, self.target, message, dict(verdict.evidence))

    def _evaluate_pod(self, state: _Counters, now: float) -> Evaluation:
        points = [p for p in state.points if p.t <= now]
        if not points or now - points[-1].t > STALE_INTERVALS * self.config.interval:
            return insufficient(THROUGHPUT_REGRESSION, self.target, "no recent samples")
        change = self._latest_judgeable_change(points)
        if change is None:
            return self._without_change(state, points, now)
        if state.judged is not None and state.judged[0] == points[change].t:
            return state.judged[1]  # its windows are complete: the verdict cannot change
        verdict = self._judge(points, change)
        state.judged = (points[change].t, verdict)
        return verdict

    def _latest_judgeable_change(self, points: Sequence[_Point]) -> int | None:
        """The index of the first point of the latest generation whose after window the
        samples have passed."""
        newest = points[-1].t
        for i in range(len(points) - 1, 0, -1):
            changed = points[i].generation != points[i - 1].generation
            if changed and points[i].t + self.config.after <= newest:
                return i
        return None

    def _without_change(self, state: _Counters, points: Sequence[_Point], now: float) -> Evaluation:
        """The last judged sync's verdict once its samples are gone, else why none is judged."""
        if state.judged is not None:
            return state.judged[1]
        changes = [q for p, q in itertools.pairwise(points) if q.generation != p.generation]
        if changes:
            pending = changes[-1]
            wait = format_duration(pending.t + self.config.after - points[-1].t)
            why = f"the sync to policy generation {pending.generation:g} is judged in {wait}"
            return insufficient(THROUGHPUT_REGRESSION, self.target, why)
        since = format_duration(now - points[0].t)
        why = f"no policy generation change in the last {since} of samples"
        return insufficient(THROUGHPUT_REGRESSION, self.target, why)

    def _judge(self, points: Sequence[_Point], change: int) -> Evaluation:
        config = self.config
        synced, last_old = points[change], points[change - 1]
        evidence: Evidence = {
            GENERATION_EVIDENCE: synced.generation,
            CHANGED_AT_EVIDENCE: synced.t,
        }
        if points[0].t > last_old.t - config.before + config.interval:
            covered = format_duration(last_old.t - points[0].t)
            why = (
                f"samples cover {covered} of the {format_duration(config.before)} before the "
                f"sync to policy generation {synced.generation:g}"
            )
            return insufficient(THROUGHPUT_REGRESSION, self.target, why, evidence)
        before = _rate(points, last_old.t - config.before, last_old.t, config.before)
        after = _rate(points, synced.t, synced.t + config.after, config.after)
        if before is None or after is None:
            window = "before" if before is None else "after"
            why = (
                f"too few generated-token reports (or no generating time) in the "
                f"{window} window of the sync to policy generation {synced.generation:g}"
            )
            return insufficient(THROUGHPUT_REGRESSION, self.target, why, evidence)
        if not before.tokens_per_second > 0:
            why = f"no tokens generated in the {format_duration(config.before)} before the sync"
            return insufficient(THROUGHPUT_REGRESSION, self.target, why, evidence)
        ratio = after.tokens_per_second / before.tokens_per_second
        evidence.update(
            before_tokens_per_second=before.tokens_per_second,
            after_tokens_per_second=after.tokens_per_second,
            before_seconds=before.span,
            after_seconds=after.span,
            throughput_ratio=ratio,
            drop=1 - ratio,
        )
        rates = (
            f"{after.tokens_per_second:.0f} tokens per second of generation in the "
            f"{format_duration(config.after)} after the sync to policy generation "
            f"{synced.generation:g}, {format_percent_change(ratio)} against "
            f"{before.tokens_per_second:.0f} in the {format_duration(config.before)} before"
        )
        if ratio >= 1 - config.threshold:
            return healthy(THROUGHPUT_REGRESSION, self.target, rates, evidence)
        message = f"{rates} (a drop over {config.threshold:.0%}): the sync left the engines slower"
        return finding(
            THROUGHPUT_REGRESSION,
            self.target,
            FailureReason.THROUGHPUT_REGRESSION,
            message,
            evidence,
        )


def _drop(evaluation: Evaluation) -> float:
    value = evaluation.evidence.get("drop")
    return float(value) if isinstance(value, int | float) else -math.inf
