"""Detection quality on a seeded corpus of synthetic traces (pure Python, no cluster).

Our KV-cache drift detector runs side by side with the rule a user would otherwise write in
Prometheus: tokens/s below (1 - threshold) times its own 1-hour average, for the whole window,

    rate(vllm:generation_tokens_total[5m])
      < 0.8 * avg_over_time(rate(vllm:generation_tokens_total[5m])[1h:])   for: 30m

Both see the same samples, one scrape round per evaluation interval, and both "restart" an
engine the way the operator would: the engine is left alone for the cooldown and its history
starts over (our detector through note_restart, the naive rule by clearing its series). The
trace itself does not heal, so only the first finding on a degraded engine is a detection;
every other finding is a false restart.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from rljob.dev.traces import Cycle, EngineProfile, LoadSwings, fleet_trace
from rljob.health import DriftConfig, EngineSample, KVDriftDetector
from rljob.health.samples import counter_delta

HOUR = 3600.0
MINUTE = 60.0
CONFIG = DriftConfig(threshold=0.2, window=30 * MINUTE, warmup=15 * MINUTE, cooldown=HOUR)
MAGNITUDES = (0.5, 1.0, 1.5)  # drop sizes as multiples of the threshold
ENGINES = 4
VICTIM = "rollout-3"
DEGRADE_AT = HOUR
MAGNITUDE_TRACE = 6 * HOUR
LONG_TRACE = 24 * HOUR
# The naive rule's rate() range and average span.
NAIVE_RATE_RANGE = 5 * MINUTE
NAIVE_AVERAGE_SPAN = HOUR


@dataclass(frozen=True)
class Scenario:
    """A fleet of engines; `victim` degrades from `degraded_at` on by `magnitude` thresholds
    (no victim: every finding is a false restart)."""

    name: str
    profiles: Mapping[str, EngineProfile]
    duration: float
    magnitude: float = 0.0
    victim: str | None = None
    degraded_at: float = math.inf


# ---------------------------------------------------------------- the corpus


def _fleet(make: Callable[[int], EngineProfile]) -> dict[str, EngineProfile]:
    return {f"rollout-{index}": make(index) for index in range(ENGINES)}


def _with_victim(
    name: str, make: Callable[[int], EngineProfile], magnitude: float, **victim: object
) -> Scenario:
    profiles = _fleet(make)
    profiles[VICTIM] = replace(profiles[VICTIM], **victim)  # type: ignore[arg-type]
    degraded_at = DEGRADE_AT
    if "drift_per_hour" in victim:
        # A slow drift reaches the threshold when its accumulated decline does.
        degraded_at = HOUR * CONFIG.threshold / float(victim["drift_per_hour"])  # type: ignore[arg-type]
    return Scenario(name, profiles, MAGNITUDE_TRACE, magnitude, VICTIM, degraded_at)


def _steady(_: int) -> EngineProfile:
    return EngineProfile(noise=0.05)


def _noisy(_: int) -> EngineProfile:
    return EngineProfile(noise=0.1)


def _cycling(index: int) -> EngineProfile:
    return EngineProfile(cycle=Cycle(offset=index * 41.0))


def _swinging(index: int) -> EngineProfile:
    return EngineProfile(
        load_swings=LoadSwings(period=2 * HOUR, low_for=45 * MINUTE, offset=index * 600.0)
    )


def _resetting(index: int) -> EngineProfile:
    resets = tuple(HOUR * (k + 0.5) + 300 * index for k in range(0, 24, 2))
    return EngineProfile(counter_resets_at=resets)


def _long_sleeps(index: int) -> EngineProfile:
    cycle = Cycle(
        generate=30 * MINUTE,
        drain=2 * MINUTE,
        train=40 * MINUTE,
        weight_sync=MINUTE,
        offset=index * 97.0,
    )
    return EngineProfile(cycle=cycle)


def _noisy_everything(index: int) -> EngineProfile:
    return EngineProfile(
        noise=0.08,
        throughput=700 + 40 * index,
        cycle=Cycle(generate=540 + 30 * index, offset=97.0 * index),
        load_swings=LoadSwings(period=5400, low_for=1200 + 60 * index, offset=700.0 * index),
        counter_resets_at=(7 * HOUR + 300 * index,) if index % 3 == 0 else (),
    )


def _drop_scenarios(magnitude: float) -> list[Scenario]:
    drop = magnitude * CONFIG.threshold
    step = {"drop": drop, "drop_at": DEGRADE_AT}
    # A linear decline that reaches `drop` four hours in (and keeps going).
    drift = {"drift_per_hour": drop / 4}
    return [
        _with_victim("step drop", _steady, magnitude, **step),
        _with_victim("slow drift", _steady, magnitude, **drift),
        _with_victim("step drop, generate/train cycles", _cycling, magnitude, **step),
        _with_victim("step drop, load swings", _swinging, magnitude, **step),
        _with_victim("step drop, counter resets", _resetting, magnitude, **step),
    ]


def _quiet_scenarios() -> list[Scenario]:
    return [
        Scenario("stationary noise (10%)", _fleet(_noisy), LONG_TRACE),
        Scenario("sleep phases (40 min asleep)", _fleet(_long_sleeps), LONG_TRACE),
        Scenario("load swings (45 min at 40%)", _fleet(_swinging), LONG_TRACE),
        Scenario("counter resets (every 2 h)", _fleet(_resetting), LONG_TRACE),
        Scenario("bursty generate/train cycles", _fleet(_cycling), LONG_TRACE),
        Scenario("all of the above, 8% noise", _fleet(_noisy_everything), LONG_TRACE),
    ]


def corpus() -> list[Scenario]:
    scenarios = [s for magnitude in MAGNITUDES for s in _drop_scenarios(magnitude)]
    return scenarios + _quiet_scenarios()


# ---------------------------------------------------------------- the naive Prometheus rule


@dataclass
class _NaiveEngine:
    samples: deque[tuple[float, float]] = field(default_factory=deque)  # (t, token counter)
    rates: deque[tuple[float, float]] = field(default_factory=deque)  # (t, rate5m)
    rate_sum: float = 0.0
    pending_since: float | None = None
    muted_until: float = -math.inf


class NaiveRule:
    """The Prometheus alert above, evaluated at every scrape round, per engine."""

    def __init__(self, config: DriftConfig) -> None:
        self.config = config
        self._engines: dict[str, _NaiveEngine] = {}

    def observe(self, target: str, sample: EngineSample) -> None:
        engine = self._engines.setdefault(target, _NaiveEngine())
        engine.samples.append((sample.t, sample.generated_tokens_total))
        while engine.samples[0][0] < sample.t - NAIVE_RATE_RANGE:
            engine.samples.popleft()
        rate = _rate(engine.samples)
        if rate is None:
            return
        engine.rates.append((sample.t, rate))
        engine.rate_sum += rate
        while engine.rates[0][0] < sample.t - NAIVE_AVERAGE_SPAN:
            engine.rate_sum -= engine.rates.popleft()[1]

    def fires(self, target: str, now: float) -> bool:
        """True when the alert for `target` fires now (it has been pending for the window)."""
        engine = self._engines.get(target)
        if engine is None or now < engine.muted_until or not engine.rates:
            return False
        average = engine.rate_sum / len(engine.rates)
        if engine.rates[-1][1] >= (1 - self.config.threshold) * average:
            engine.pending_since = None
            return False
        if engine.pending_since is None:
            engine.pending_since = now
        return now - engine.pending_since >= self.config.window

    def note_restart(self, target: str, at: float) -> None:
        self._engines[target] = _NaiveEngine(muted_until=at + self.config.cooldown)


def _rate(samples: deque[tuple[float, float]]) -> float | None:
    """rate(): the counter's increase (resets handled) over the samples' span, per second."""
    if len(samples) < 2:
        return None
    span = samples[-1][0] - samples[0][0]
    if span <= 0:
        return None
    increase = sum(counter_delta(a[1], b[1]) for a, b in itertools.pairwise(samples))
    return increase / span


# ---------------------------------------------------------------- running a scenario


@dataclass
class Outcome:
    """What one detector did on one trace."""

    detected_after: float | None = None  # seconds from degradation to the first finding
    false_restarts: int = 0


@dataclass(frozen=True)
class Verdicts:
    ours: Outcome
    naive: Outcome


def _judge(scenario: Scenario, outcome: Outcome, target: str, now: float) -> None:
    if target == scenario.victim and outcome.detected_after is not None:
        return  # a real restart heals the engine; the trace cannot show that, so stop judging
    real = target == scenario.victim and scenario.magnitude >= 1.0 and now >= scenario.degraded_at
    if real:
        outcome.detected_after = now - scenario.degraded_at
    else:
        outcome.false_restarts += 1


def _rounds(scenario: Scenario, seed: int) -> Iterator[list[tuple[str, EngineSample]]]:
    """One list of (engine, sample) per scrape round."""
    names = list(scenario.profiles)
    samples = fleet_trace(scenario.profiles, scenario.duration, interval=CONFIG.interval, seed=seed)
    batch: list[tuple[str, EngineSample]] = []
    for name, sample in samples:
        batch.append((name, sample))
        if name == names[-1]:
            yield batch
            batch = []


def run(scenario: Scenario, seed: int) -> Verdicts:
    ours, naive = KVDriftDetector(CONFIG), NaiveRule(CONFIG)
    verdicts = Verdicts(Outcome(), Outcome())
    for batch in _rounds(scenario, seed):
        now = batch[-1][1].t
        for name, sample in batch:
            ours.observe(name, sample)
            naive.observe(name, sample)
        for evaluation in ours.evaluate(now):
            if evaluation.is_finding:
                _judge(scenario, verdicts.ours, evaluation.target, now)
                ours.note_restart(evaluation.target, now)
        for name, _ in batch:
            if naive.fires(name, now):
                _judge(scenario, verdicts.naive, name, now)
                naive.note_restart(name, now)
    return verdicts


# ---------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Summary:
    """One detector on one scenario over every seed."""

    runs: int
    detected: int
    delays: tuple[float, ...]  # seconds, of the runs that detected
    false_restarts: int


@dataclass(frozen=True)
class ScenarioResult:
    scenario: Scenario
    ours: Summary
    naive: Summary

    @property
    def expects_detection(self) -> bool:
        return self.scenario.victim is not None and self.scenario.magnitude >= 1.0


def summarize(outcomes: list[Outcome]) -> Summary:
    delays = tuple(o.detected_after for o in outcomes if o.detected_after is not None)
    return Summary(len(outcomes), len(delays), delays, sum(o.false_restarts for o in outcomes))


def evaluate_corpus(seeds: int, scenarios: list[Scenario] | None = None) -> list[ScenarioResult]:
    results = []
    for scenario in scenarios if scenarios is not None else corpus():
        verdicts = [run(scenario, seed) for seed in range(seeds)]
        results.append(
            ScenarioResult(
                scenario,
                summarize([v.ours for v in verdicts]),
                summarize([v.naive for v in verdicts]),
            )
        )
    return results
