"""The verdict on one engine's window: down against its own baseline in every slice, then
confirmed by the median of its peers or, with fewer peers, by a KV-cache symptom."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from rljob.health.drift.config import DriftConfig
from rljob.health.drift.engine import EngineState
from rljob.health.drift.measures import (
    MIN_COVERAGE,
    MIN_SATURATED_SHARE_OF_WINDOW,
    Baseline,
    WindowStats,
)
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
from rljob.vocabulary.enums import FailureReason

MIN_PEERS = 3
# A slice is judged only with this share of it saturated; quieter slices are skipped.
MIN_SLICE_SATURATED_SHARE = 0.25
# A preemption-rate rise confirms drift only when it adds at least one preemption a minute.
MIN_PREEMPTION_RISE_PER_SECOND = 1 / 60


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


def judge(
    target: str, state: EngineState, stats: WindowStats, peers: list[float], config: DriftConfig
) -> Evaluation:
    """The verdict on one engine's window, before its cooldown can silence a finding."""
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


def _warming_up(target: str, state: EngineState, config: DriftConfig) -> Evaluation:
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
