"""KVCacheDrift: a rollout engine whose saturated throughput decays (DESIGN section 6).

Throughput counts only intervals where the engine is serving (awake, not paused for a weight
sync) and saturated (requests running and waiting at both ends), so load swings, drain tails and
sleep phases of generate/train cycles never look like drift. A finding needs the drop against the
engine's own post-warm-up baseline in every slice of the window, and either against the median
of at least three warmed-up peers of the same role or, with fewer peers, a confirming KV-cache
symptom (prefix-cache hit rate down, preemption rate up).

Coverage is judged against the serving part of the window: sleep and weight-sync time say
nothing about throughput, and an RL engine sleeps through every training phase, so counting it
would leave a generate/train job "insufficient data" forever. A window also needs saturated
time of at least a quarter of its wall time, so a window spent mostly asleep is not judged on a
few minutes.

A warmed-up engine's baseline and cooldown are summarized into status.health.engines[] and
restored by a restarted operator: re-taken after a restart, a baseline would be measured on
throughput that may already have drifted, and the drifting engine would become its own baseline.
"""

from __future__ import annotations

import itertools
import math
import statistics
from array import array
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from rljob.api.durations import parse_duration
from rljob.api.enums import FailureReason, RoleName
from rljob.api.spec import Health
from rljob.api.status import ENGINE_HEALTH_MAX_AGE, MAX_ENGINE_HEALTH, EngineHealth
from rljob.health.evaluation import (
    KV_DRIFT,
    Evaluation,
    Evidence,
    finding,
    format_duration,
    format_percent_change,
    healthy,
    insufficient,
)
from rljob.health.samples import (
    CumulativeRing,
    EngineSample,
    EngineSeries,
    Interval,
    ring_capacity,
)

MIN_COVERAGE = 0.6
MIN_SATURATED_SHARE_OF_WINDOW = 0.25
MIN_PEERS = 3
MAX_SLICES = 6
# A slice is judged only with this share of it saturated; quieter slices are skipped.
MIN_SLICE_SATURATED_SHARE = 0.25
# A preemption-rate rise confirms drift only when it adds at least one preemption a minute.
MIN_PREEMPTION_RISE_PER_SECOND = 1 / 60
# status.health.engines[].detector of drift summaries: the spec.health field configuring it.
KV_DRIFT_SUMMARY = "kvDrift"
_PREFIX_HIT_RATE = "prefixHitRate"
_PREEMPTIONS_PER_SECOND = "preemptionsPerSecond"


@dataclass(frozen=True, slots=True)
class DriftConfig:
    """kvDrift bounds in seconds, plus the job's evaluation interval."""

    threshold: float = 0.2
    window: float = 1800.0
    warmup: float = 900.0
    cooldown: float = 3600.0
    interval: float = 30.0

    @classmethod
    def from_health(cls, health: Health) -> DriftConfig:
        drift = health.kv_drift
        return cls(
            threshold=drift.threshold,
            window=parse_duration(drift.window),
            warmup=parse_duration(drift.warmup),
            cooldown=parse_duration(drift.cooldown),
            interval=parse_duration(health.interval),
        )

    @property
    def slices(self) -> int:
        if not self.interval > 0:
            return MAX_SLICES
        return max(1, min(MAX_SLICES, int(self.window // (4 * self.interval))))


@dataclass(frozen=True, slots=True)
class Baseline:
    """An engine's own saturated behaviour over its first `warmup` of saturated time."""

    throughput: float
    prefix_hit_rate: float | None
    preemptions_per_second: float | None


def _judgeable(interval: Interval) -> bool:
    return (
        interval.saturated
        and not interval.excluded
        and not interval.gap
        and not interval.counter_reset
        and interval.duration > 0
    )


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


class _Warmup:
    """Saturated intervals collected until the baseline can be taken; bounded by `capacity`."""

    __slots__ = (
        "capacity",
        "hits",
        "preemption_seconds",
        "preemptions",
        "queries",
        "rates",
        "saturated_seconds",
    )

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.rates = array("d")
        self.saturated_seconds = 0.0
        self.hits = 0.0
        self.queries = 0.0
        self.preemptions = 0.0
        self.preemption_seconds = 0.0

    def add(self, interval: Interval) -> None:
        if not _judgeable(interval):
            return
        if len(self.rates) < self.capacity:
            self.rates.append(interval.throughput)
        self.saturated_seconds += interval.duration
        if interval.prefix_hits is not None and interval.prefix_queries is not None:
            self.hits += interval.prefix_hits
            self.queries += interval.prefix_queries
        if interval.preemptions is not None:
            self.preemptions += interval.preemptions
            self.preemption_seconds += interval.duration

    def done(self, warmup: float) -> bool:
        return len(self.rates) > 0 and self.saturated_seconds >= warmup

    def baseline(self) -> Baseline:
        return Baseline(
            throughput=statistics.median(self.rates),
            prefix_hit_rate=_ratio(self.hits, self.queries),
            preemptions_per_second=_ratio(self.preemptions, self.preemption_seconds),
        )


# Running totals kept per engine, in CumulativeRing column order.
_SATURATED_SECONDS, _TOKENS, _EXCLUDED_SECONDS, _HITS, _QUERIES = range(5)
_PREEMPTIONS, _PREEMPTION_SECONDS = 5, 6
_WIDTH = 7
_SLICE_WIDTH = 2


def _amounts(interval: Interval) -> tuple[float, ...]:
    duration = interval.duration
    if interval.excluded:
        return (0.0, 0.0, duration, 0.0, 0.0, 0.0, 0.0)
    if not _judgeable(interval):
        return (0.0,) * _WIDTH
    hits, queries = interval.prefix_hits, interval.prefix_queries
    prefix = (hits, queries) if hits is not None and queries is not None else (0.0, 0.0)
    preemptions = interval.preemptions
    preempted = (preemptions, duration) if preemptions is not None else (0.0, 0.0)
    return (duration, interval.tokens, 0.0, *prefix, *preempted)


def _difference(later: tuple[float, ...], earlier: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(max(0.0, b - a) for a, b in zip(earlier, later, strict=True))


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Saturated throughput and KV-cache symptoms of one engine over one window, with the
    saturated seconds and tokens of each slice of it."""

    start: float
    end: float
    totals: tuple[float, ...]
    slices: tuple[tuple[float, float], ...]

    @classmethod
    def of(cls, ring: CumulativeRing, start: float, end: float, slice_count: int) -> WindowStats:
        step = (end - start) / slice_count
        first, last = ring.at(start), ring.at(end)
        inner = [ring.at(start + index * step, _SLICE_WIDTH) for index in range(1, slice_count)]
        edges = [first[:_SLICE_WIDTH], *inner, last[:_SLICE_WIDTH]]
        return cls(
            start=start,
            end=end,
            totals=_difference(last, first),
            slices=tuple(
                (b[_SATURATED_SECONDS] - a[_SATURATED_SECONDS], b[_TOKENS] - a[_TOKENS])
                for a, b in itertools.pairwise(edges)
            ),
        )

    @property
    def length(self) -> float:
        return self.end - self.start

    @property
    def saturated_seconds(self) -> float:
        return self.totals[_SATURATED_SECONDS]

    @property
    def serving_seconds(self) -> float:
        return self.length - self.totals[_EXCLUDED_SECONDS]

    @property
    def throughput(self) -> float | None:
        return _ratio(self.totals[_TOKENS], self.saturated_seconds)

    @property
    def prefix_hit_rate(self) -> float | None:
        return _ratio(self.totals[_HITS], self.totals[_QUERIES])

    @property
    def preemptions_per_second(self) -> float | None:
        return _ratio(self.totals[_PREEMPTIONS], self.totals[_PREEMPTION_SECONDS])

    def covered(self) -> bool:
        return (
            self.saturated_seconds >= MIN_SATURATED_SHARE_OF_WINDOW * self.length
            and self.saturated_seconds >= MIN_COVERAGE * self.serving_seconds
        )

    def coverage(self) -> float:
        return _ratio(self.saturated_seconds, self.serving_seconds) or 0.0

    def slice_rates(self, min_seconds: float) -> list[float]:
        return [
            tokens / seconds
            for seconds, tokens in self.slices
            if seconds >= min_seconds and seconds > 0
        ]


@dataclass(frozen=True, slots=True)
class _Seed:
    """A saved summary waiting for its engine's first sample; times in unix seconds."""

    baseline: Baseline
    warmed_up_at: float
    cooldown_until: float
    saved_at: float


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _summary(pod: str, role: RoleName, seed: _Seed, updated_at: float, now: float) -> EngineHealth:
    baseline = seed.baseline
    values = {
        _PREFIX_HIT_RATE: baseline.prefix_hit_rate,
        _PREEMPTIONS_PER_SECOND: baseline.preemptions_per_second,
    }
    return EngineHealth(
        pod=pod,
        role=role,
        detector=KV_DRIFT_SUMMARY,
        baseline_tokens_per_second=baseline.throughput,
        warmed_up_at=_moment(seed.warmed_up_at),
        cooldown_until=_moment(seed.cooldown_until) if seed.cooldown_until > now else None,
        updated_at=_moment(updated_at),
        values={key: value for key, value in values.items() if value is not None},
    )


def _seed(summary: EngineHealth, role: RoleName, now: float) -> _Seed | None:
    """The summary as a seed, or None when it is not this detector's, stale or incomplete."""
    saved_at = summary.updated_at.timestamp()
    throughput = summary.baseline_tokens_per_second
    if (
        summary.detector != KV_DRIFT_SUMMARY
        or summary.role != role
        or not now - saved_at <= ENGINE_HEALTH_MAX_AGE.total_seconds()
        or throughput is None
        or not throughput > 0
        or summary.warmed_up_at is None
    ):
        return None
    cooldown = summary.cooldown_until
    return _Seed(
        baseline=Baseline(
            throughput=throughput,
            prefix_hit_rate=summary.values.get(_PREFIX_HIT_RATE),
            preemptions_per_second=summary.values.get(_PREEMPTIONS_PER_SECOND),
        ),
        warmed_up_at=summary.warmed_up_at.timestamp(),
        cooldown_until=cooldown.timestamp() if cooldown is not None else -math.inf,
        saved_at=saved_at,
    )


class _EngineState:
    __slots__ = (
        "baseline",
        "cooldown_until",
        "not_before",
        "ring",
        "series",
        "warmed_up_at",
        "warmup",
    )

    def __init__(self, config: DriftConfig) -> None:
        self.series = EngineSeries(config.interval)
        self.ring = CumulativeRing(ring_capacity(config.window, config.interval), _WIDTH)
        self.warmup: _Warmup | None = _Warmup(ring_capacity(config.warmup, config.interval))
        self.baseline: Baseline | None = None
        self.warmed_up_at: float | None = None
        self.cooldown_until = -math.inf
        self.not_before = -math.inf

    def add(self, sample: EngineSample, config: DriftConfig) -> None:
        if not sample.t >= self.not_before:
            return
        interval = self.series.add(sample)
        if interval is None:
            return
        if interval.counter_reset:
            # The token counter only goes down when the engine process restarted.
            self.restart(config, interval.end)
            return
        self.ring.append(interval.start, interval.end, _amounts(interval))
        if self.warmup is not None:
            self.warmup.add(interval)
            if self.warmup.done(config.warmup):
                self._take_baseline(config, interval.end)

    def _take_baseline(self, config: DriftConfig, at: float) -> None:
        baseline = self.warmup.baseline() if self.warmup is not None else None
        if baseline is not None and baseline.throughput > 0:
            self.baseline, self.warmup, self.warmed_up_at = baseline, None, at
        else:
            # A warm-up spent stalled gives no baseline to compare against: start it over.
            self.warmup = _Warmup(ring_capacity(config.warmup, config.interval))

    def restart(self, config: DriftConfig, at: float) -> None:
        self.ring.clear()
        # Samples arrive in time order anyway; this keeps older saved summaries off the new process.
        self.not_before = max(self.not_before, at)
        self.warmup = _Warmup(ring_capacity(config.warmup, config.interval))
        self.baseline = self.warmed_up_at = None

    def seed(self, seed: _Seed) -> None:
        if seed.saved_at < self.not_before:
            return  # restarted after the summary was saved: its baseline is the old process's
        # The saved baseline wins over one taken since the restart, possibly on drifted throughput.
        self.baseline, self.warmup, self.warmed_up_at = seed.baseline, None, seed.warmed_up_at
        self.cooldown_until = max(self.cooldown_until, seed.cooldown_until)

    def as_seed(self) -> _Seed | None:
        if self.baseline is None or self.warmed_up_at is None:
            return None
        return _Seed(self.baseline, self.warmed_up_at, self.cooldown_until, -math.inf)

    def window_stats(self, config: DriftConfig, now: float) -> WindowStats:
        return WindowStats.of(self.ring, now - config.window, now, config.slices)

    def retained_values(self) -> int:
        return len(self.ring) + (len(self.warmup.rates) if self.warmup is not None else 0)


class KVDriftDetector:
    """Drift detection for the engines of one role of one job (the peer group)."""

    def __init__(self, config: DriftConfig, role: RoleName = RoleName.ROLLOUT) -> None:
        self.config = config
        self.role = role
        self._engines: dict[str, _EngineState] = {}
        # Restored summaries of engines not observed yet; applied at their first sample.
        self._seeds: dict[str, _Seed] = {}

    @property
    def targets(self) -> list[str]:
        return sorted(self._engines)

    def observe(self, target: str, sample: EngineSample) -> None:
        state = self._engines.get(target)
        if state is None:
            state = self._engines[target] = _EngineState(self.config)
            if (seed := self._seeds.pop(target, None)) is not None:
                state.seed(seed)
        state.add(sample, self.config)

    def note_restart(self, target: str, at: float) -> None:
        """The engine was restarted at `at`: a new baseline after warm-up, no finding within
        `cooldown`, and samples from before the restart are ignored."""
        state = _EngineState(self.config)
        state.cooldown_until = at + self.config.cooldown
        state.not_before = at
        self._engines[target] = state
        self._seeds.pop(target, None)

    def forget(self, target: str) -> None:
        self._engines.pop(target, None)
        self._seeds.pop(target, None)

    def retain(self, targets: Collection[str]) -> None:
        for target in [name for name in self._engines if name not in targets]:
            del self._engines[target]
        self._seeds = {name: seed for name, seed in self._seeds.items() if name in targets}

    def summaries(self, now: float) -> list[EngineHealth]:
        """Warmed-up engines' baselines and cooldowns for status.health.engines[], by pod name;
        restored engines not observed since keep the time their summary was saved."""
        seeds = {
            target: (seed, now)
            for target, state in self._engines.items()
            if (seed := state.as_seed()) is not None
        }
        for target, seed in self._seeds.items():
            if now - seed.saved_at <= ENGINE_HEALTH_MAX_AGE.total_seconds():
                seeds.setdefault(target, (seed, seed.saved_at))
        return [
            _summary(target, self.role, seed, updated_at, now)
            for target, (seed, updated_at) in sorted(seeds.items())[:MAX_ENGINE_HEALTH]
        ]

    def restore(self, summaries: Iterable[EngineHealth], now: float) -> None:
        """Seeds engines from summaries a previous operator saved: a restored engine is judged
        against its saved baseline from its first sample on, cooldown kept. Summaries of other
        detectors or roles, stale ones and those of pods never observed (gone) have no effect;
        engines without one warm up as usual."""
        for summary in summaries:
            seed = _seed(summary, self.role, now)
            if seed is None:
                continue
            state = self._engines.get(summary.pod)
            if state is None:
                self._seeds[summary.pod] = seed
            else:
                state.seed(seed)

    def baseline(self, target: str) -> Baseline | None:
        state = self._engines.get(target)
        return state.baseline if state is not None else None

    def retained_values(self) -> int:
        """Numbers held across all engines (intervals and warm-up rates): bounded per engine."""
        return sum(state.retained_values() for state in self._engines.values())

    def evaluate(self, now: float) -> list[Evaluation]:
        stats = {
            target: state.window_stats(self.config, now) for target, state in self._engines.items()
        }
        comparable = {
            target: throughput
            for target, state in self._engines.items()
            if state.baseline is not None
            and stats[target].covered()
            and (throughput := stats[target].throughput) is not None
        }
        return [
            self._evaluate_engine(target, stats[target], comparable, now)
            for target in sorted(self._engines)
        ]

    def _evaluate_engine(
        self, target: str, stats: WindowStats, comparable: dict[str, float], now: float
    ) -> Evaluation:
        state = self._engines[target]
        peers = [throughput for name, throughput in comparable.items() if name != target]
        evaluation = _judge(target, state, stats, peers, self.config)
        if evaluation.is_finding and now < state.cooldown_until:
            remaining = format_duration(state.cooldown_until - now)
            return healthy(
                KV_DRIFT,
                target,
                f"{evaluation.message}; not acted on: cooldown for another {remaining}",
                {**evaluation.evidence, "suppressed": "cooldown"},
            )
        return evaluation


@dataclass(frozen=True, slots=True)
class _Case:
    """One warmed-up, covered engine whose throughput is being judged."""

    target: str
    stats: WindowStats
    baseline: Baseline
    throughput: float
    config: DriftConfig

    @property
    def summary(self) -> str:
        change = format_percent_change(self.throughput / self.baseline.throughput)
        return (
            f"{self.target} {self.throughput:.0f} tok/s vs baseline "
            f"{self.baseline.throughput:.0f} ({change})"
        )

    @property
    def over(self) -> str:
        return f"over {format_duration(self.stats.length)} while saturated"

    def evidence(self) -> Evidence:
        return _evidence(self.stats, self.baseline, self.throughput)


def _judge(
    target: str, state: _EngineState, stats: WindowStats, peers: list[float], config: DriftConfig
) -> Evaluation:
    baseline = state.baseline
    if baseline is None:
        return _warming_up(target, state, config)
    throughput = stats.throughput
    if not stats.covered() or throughput is None:
        return _uncovered(target, stats)
    case = _Case(target, stats, baseline, throughput, config)
    if not _down_in_every_slice(case):
        return healthy(KV_DRIFT, target, f"{case.summary} {case.over}", case.evidence())
    if len(peers) >= MIN_PEERS:
        return _against_peers(case, peers)
    return _against_symptoms(case, len(peers))


def _warming_up(target: str, state: _EngineState, config: DriftConfig) -> Evaluation:
    collected = state.warmup.saturated_seconds if state.warmup is not None else 0.0
    return insufficient(
        KV_DRIFT,
        target,
        f"{target} warming up: {format_duration(collected)} of "
        f"{format_duration(config.warmup)} saturated for a baseline",
        {"warmup_seconds": collected},
    )


def _uncovered(target: str, stats: WindowStats) -> Evaluation:
    return insufficient(
        KV_DRIFT,
        target,
        f"{target} saturated {format_duration(stats.saturated_seconds)} of "
        f"{format_duration(max(0.0, stats.serving_seconds))} serving in the last "
        f"{format_duration(stats.length)}: needs {MIN_COVERAGE:.0%} of the serving time and "
        f"{MIN_SATURATED_SHARE_OF_WINDOW:.0%} of the window",
        {"coverage": stats.coverage(), "saturated_seconds": stats.saturated_seconds},
    )


def _evidence(stats: WindowStats, baseline: Baseline, throughput: float) -> Evidence:
    evidence: Evidence = {
        "throughput": throughput,
        "baseline": baseline.throughput,
        "change": throughput / baseline.throughput - 1,
        "window_seconds": stats.length,
        "coverage": stats.coverage(),
    }
    optional = {
        "prefix_hit_rate": stats.prefix_hit_rate,
        "baseline_prefix_hit_rate": baseline.prefix_hit_rate,
        "preemptions_per_minute": _per_minute(stats.preemptions_per_second),
        "baseline_preemptions_per_minute": _per_minute(baseline.preemptions_per_second),
    }
    evidence.update({key: value for key, value in optional.items() if value is not None})
    return evidence


def _per_minute(per_second: float | None) -> float | None:
    return None if per_second is None else per_second * 60


def _down_in_every_slice(case: _Case) -> bool:
    bound = case.baseline.throughput * (1 - case.config.threshold)
    stats = case.stats
    slice_length = stats.length / len(stats.slices)
    rates = stats.slice_rates(max(case.config.interval, MIN_SLICE_SATURATED_SHARE * slice_length))
    return case.throughput <= bound and all(rate <= bound for rate in rates)


def _against_peers(case: _Case, peers: list[float]) -> Evaluation:
    peer_median = statistics.median(peers)
    evidence = {**case.evidence(), "peer_median": peer_median, "peers": len(peers)}
    text = (
        f"{case.summary} and peers {peer_median:.0f} {case.over}"
        f"{_prefix_note(case.stats, case.baseline)}"
    )
    if case.throughput <= peer_median * (1 - case.config.threshold):
        return finding(KV_DRIFT, case.target, FailureReason.KV_CACHE_DRIFT, text, evidence)
    return healthy(KV_DRIFT, case.target, f"{text}: slower together with its peers", evidence)


def _prefix_note(stats: WindowStats, baseline: Baseline) -> str:
    if stats.prefix_hit_rate is None or baseline.prefix_hit_rate is None:
        return ""
    return f", prefix hit rate {baseline.prefix_hit_rate:.2f} -> {stats.prefix_hit_rate:.2f}"


def _against_symptoms(case: _Case, peer_count: int) -> Evaluation:
    symptoms = [
        _prefix_symptom(case.stats, case.baseline, case.config),
        _preemption_symptom(case.stats, case.baseline, case.config),
    ]
    confirmed = " and ".join(text for available, text in symptoms if available and text)
    few = f"{peer_count} comparable peers (fewer than {MIN_PEERS})"
    evidence = {**case.evidence(), "peers": peer_count}
    if confirmed:
        message = f"{case.summary} {case.over}, confirmed by {confirmed}; {few}"
        evidence["confirmed_by"] = confirmed
        return finding(KV_DRIFT, case.target, FailureReason.KV_CACHE_DRIFT, message, evidence)
    if any(available for available, _ in symptoms):
        message = f"{case.summary} {case.over}; no KV-cache symptom confirms it; {few}"
        return healthy(KV_DRIFT, case.target, message, evidence)
    return insufficient(
        KV_DRIFT,
        case.target,
        f"{case.summary} {case.over}; {few} and no prefix-cache or preemption metrics to "
        "confirm it",
        evidence,
    )


def _prefix_symptom(
    stats: WindowStats, baseline: Baseline, config: DriftConfig
) -> tuple[bool, str | None]:
    now, before = stats.prefix_hit_rate, baseline.prefix_hit_rate
    if now is None or before is None or before <= 0:
        return False, None
    if now <= before * (1 - config.threshold / 2):
        return True, f"prefix hit rate {before:.2f} -> {now:.2f}"
    return True, None


def _preemption_symptom(
    stats: WindowStats, baseline: Baseline, config: DriftConfig
) -> tuple[bool, str | None]:
    now, before = stats.preemptions_per_second, baseline.preemptions_per_second
    if now is None or before is None:
        return False, None
    if now > before * (1 + config.threshold) and now - before >= MIN_PREEMPTION_RISE_PER_SECOND:
        return True, f"preemptions {before * 60:.1f} -> {now * 60:.1f}/min"
    return True, None
