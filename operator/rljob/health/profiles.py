"""Which metrics each workload exports, and how one pod's raw series become detector samples.

Pure: names and arithmetic, no I/O. The metrics sources (rljob.adapters.metrics) return, per
signal and pod, a list of `Series` (labels without the metric name, pod and namespace labels,
plus time-ordered points); the functions here turn them into `EngineSample`, `VerifierSample`
and `TrainerReading` values.

Names (exposed series names: prometheus_client adds `_total` to counters, see
shared/reference/workload-signals.md section 0):

- vLLM (V1 `PrometheusStatLogger`): DESIGN section 6. `vllm:engine_sleep_state` carries a
  `sleep_state` label; its `awake` series is 0 while the engine sleeps (level 1 or 2). vLLM has
  no paused-requests gauge: during a weight sync the driver sends nothing, so the engine reads
  as idle.
- SGLang (`metrics/collector.py`): `sglang:generation_tokens_total`, `sglang:num_running_reqs`,
  `sglang:num_queue_reqs`, `sglang:token_usage` (the KV pool fraction),
  `sglang:num_paused_reqs` (requests paused by an async weight sync). Its prefix hit rate comes
  from `sglang:cached_tokens_total` / `sglang:prompt_tokens_total`, because the
  `sglang:cache_hit_rate` gauge is zeroed on every decode log. SGLang has no preemption
  counter (`sglang:num_retracted_reqs` is a gauge of the current count) and no sleep gauge.
- custom: the role's `metricNames`; a user's sleep gauge is non-zero while the engine sleeps
  (the spec's wording). `metricNames` also override single names of vllm and sglang.
- Trainer (the rljob SDK's progress exporter): `rljob_trainer_step`,
  `rljob_trainer_heartbeat_timestamp_seconds`, `rljob_trainer_phase{phase}` (1 for the current
  phase), `rljob_policy_generation`, `rljob_checkpoint_step`.
- Verifier: the histogram `rljob_verifier_request_duration_seconds` (its `_bucket` series, label
  `le`) and the counter `rljob_verifier_request_errors_total`, as the test bed's simulated
  verifiers export them.

Several series of one metric in one pod: series that differ in the profile's engine label
(vLLM `engine`, the data-parallel rank; SGLang `dp_rank`) are separate engines in one pod and
are summed (KV usage is averaged; the pod sleeps if any engine sleeps). Series that differ in any
other label are the same engine seen twice (e.g. scraped by two jobs) and collapse to their
maximum, so a duplicated scrape never doubles a counter.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rljob.api.enums import Engine
from rljob.api.spec import RolloutRole
from rljob.health.samples import EngineSample
from rljob.health.stall import TrainerSignals, current_phase, freshest_heartbeat
from rljob.health.verifier import VerifierSample

Point = tuple[float, float]
Labels = tuple[tuple[str, str], ...]

# Timestamps of one scrape are equal; this absorbs float rounding of millisecond timestamps.
TIME_EPSILON = 1e-3


@dataclass(frozen=True, slots=True)
class Series:
    """One time series of one pod: its labels (sorted; without the metric name, pod and
    namespace labels) and its points (time, value), ascending in time, all finite."""

    labels: Labels
    points: tuple[Point, ...]

    def label(self, name: str) -> str | None:
        for key, value in self.labels:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Signal:
    """One metric queried for a set of pods. `name` says which quantity it is (bounded: the
    `signal` label of rljob_health_queries_total); `metric` is the exposed series name and
    `matchers` are exact label matches every returned series must have."""

    name: str
    metric: str
    matchers: Labels = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.matchers)


@dataclass(frozen=True, slots=True)
class SleepGauge:
    """How an engine says it sleeps: `metric` (restricted to `matcher`, if set) is zero while it
    sleeps (`sleeping_when_zero`, vLLM's `awake` series) or non-zero while it sleeps."""

    metric: str
    matcher: tuple[str, str] | None = None
    sleeping_when_zero: bool = False


# Signal names, the bounded `signal` label values.
GENERATION_TOKENS = "generation_tokens"
REQUESTS_RUNNING = "requests_running"
REQUESTS_WAITING = "requests_waiting"
KV_CACHE_USAGE = "kv_cache_usage"
PREFIX_CACHE_HITS = "prefix_cache_hits"
PREFIX_CACHE_QUERIES = "prefix_cache_queries"
PREEMPTIONS = "preemptions"
SLEEP_STATE = "sleep_state"
PAUSED_REQUESTS = "paused_requests"
TRAINER_HEARTBEAT = "trainer_heartbeat"
TRAINER_STEP = "trainer_step"
TRAINER_PHASE = "trainer_phase"
POLICY_GENERATION = "policy_generation"
CHECKPOINT_STEP = "checkpoint_step"
VERIFIER_BUCKETS = "verifier_buckets"
VERIFIER_ERRORS = "verifier_errors"


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """A rollout engine's metric names; None: not exported."""

    engine: str
    generation_tokens_total: str
    requests_running: str
    requests_waiting: str
    kv_cache_usage: str | None = None
    prefix_cache_hits_total: str | None = None
    prefix_cache_queries_total: str | None = None
    preemptions_total: str | None = None
    sleep: SleepGauge | None = None
    paused_requests: str | None = None
    # The label telling engines in one pod apart (data-parallel ranks); None: one engine a pod.
    engine_label: str | None = None

    def signals(self) -> dict[str, Signal]:
        """Signal name -> signal, for the metrics this engine exports."""
        names = {
            GENERATION_TOKENS: self.generation_tokens_total,
            REQUESTS_RUNNING: self.requests_running,
            REQUESTS_WAITING: self.requests_waiting,
            KV_CACHE_USAGE: self.kv_cache_usage,
            PREFIX_CACHE_HITS: self.prefix_cache_hits_total,
            PREFIX_CACHE_QUERIES: self.prefix_cache_queries_total,
            PREEMPTIONS: self.preemptions_total,
            PAUSED_REQUESTS: self.paused_requests,
        }
        signals = {name: Signal(name, metric) for name, metric in names.items() if metric}
        if self.sleep is not None:
            matchers = (self.sleep.matcher,) if self.sleep.matcher is not None else ()
            signals[SLEEP_STATE] = Signal(SLEEP_STATE, self.sleep.metric, matchers)
        return signals


VLLM = EngineMetrics(
    engine=Engine.VLLM.value,
    generation_tokens_total="vllm:generation_tokens_total",
    requests_running="vllm:num_requests_running",
    requests_waiting="vllm:num_requests_waiting",
    kv_cache_usage="vllm:kv_cache_usage_perc",
    prefix_cache_hits_total="vllm:prefix_cache_hits_total",
    prefix_cache_queries_total="vllm:prefix_cache_queries_total",
    preemptions_total="vllm:num_preemptions_total",
    sleep=SleepGauge("vllm:engine_sleep_state", ("sleep_state", "awake"), sleeping_when_zero=True),
    engine_label="engine",
)

SGLANG = EngineMetrics(
    engine=Engine.SGLANG.value,
    generation_tokens_total="sglang:generation_tokens_total",
    requests_running="sglang:num_running_reqs",
    requests_waiting="sglang:num_queue_reqs",
    kv_cache_usage="sglang:token_usage",
    prefix_cache_hits_total="sglang:cached_tokens_total",
    prefix_cache_queries_total="sglang:prompt_tokens_total",
    paused_requests="sglang:num_paused_reqs",
    engine_label="dp_rank",
)

ENGINE_PROFILES: Mapping[str, EngineMetrics] = {
    Engine.VLLM.value: VLLM,
    Engine.SGLANG.value: SGLANG,
}


class MissingMetricNamesError(ValueError):
    """A custom engine without the metric names every engine detector needs."""


def engine_metrics(role: RolloutRole) -> EngineMetrics:
    """The rollout role's metric names: its engine's, with `metricNames` overriding them
    (custom engines have only those)."""
    engine = str(getattr(role.engine, "value", role.engine))
    names = role.metric_names
    base = ENGINE_PROFILES.get(engine)
    if names is None:
        if base is None:
            raise MissingMetricNamesError(_CUSTOM_NEEDS)
        return base

    def pick(field: str) -> str | None:
        override: str | None = getattr(names, field)
        if override:
            return override
        return getattr(base, field) if base is not None else None

    tokens = pick("generation_tokens_total")
    running = pick("requests_running")
    waiting = pick("requests_waiting")
    if not (tokens and running and waiting):
        raise MissingMetricNamesError(_CUSTOM_NEEDS)
    sleep = SleepGauge(names.sleep_state) if names.sleep_state else None
    return EngineMetrics(
        engine=engine,
        generation_tokens_total=tokens,
        requests_running=running,
        requests_waiting=waiting,
        kv_cache_usage=pick("kv_cache_usage"),
        prefix_cache_hits_total=pick("prefix_cache_hits_total"),
        prefix_cache_queries_total=pick("prefix_cache_queries_total"),
        preemptions_total=pick("preemptions_total"),
        sleep=sleep or (base.sleep if base is not None else None),
        paused_requests=base.paused_requests if base is not None else None,
        engine_label=base.engine_label if base is not None else None,
    )


_CUSTOM_NEEDS = (
    "engine custom needs metricNames.generationTokensTotal, requestsRunning and requestsWaiting"
)


@dataclass(frozen=True, slots=True)
class TrainerMetrics:
    heartbeat: str = "rljob_trainer_heartbeat_timestamp_seconds"
    step: str = "rljob_trainer_step"
    phase: str = "rljob_trainer_phase"
    phase_label: str = "phase"
    policy_generation: str = "rljob_policy_generation"
    checkpoint_step: str = "rljob_checkpoint_step"

    def signals(self) -> dict[str, Signal]:
        return {
            TRAINER_HEARTBEAT: Signal(TRAINER_HEARTBEAT, self.heartbeat),
            TRAINER_STEP: Signal(TRAINER_STEP, self.step),
            TRAINER_PHASE: Signal(TRAINER_PHASE, self.phase),
            POLICY_GENERATION: Signal(POLICY_GENERATION, self.policy_generation),
            CHECKPOINT_STEP: Signal(CHECKPOINT_STEP, self.checkpoint_step),
        }


@dataclass(frozen=True, slots=True)
class VerifierMetrics:
    duration_buckets: str = "rljob_verifier_request_duration_seconds_bucket"
    bound_label: str = "le"
    errors_total: str | None = "rljob_verifier_request_errors_total"

    def signals(self) -> dict[str, Signal]:
        signals = {VERIFIER_BUCKETS: Signal(VERIFIER_BUCKETS, self.duration_buckets)}
        if self.errors_total:
            signals[VERIFIER_ERRORS] = Signal(VERIFIER_ERRORS, self.errors_total)
        return signals


TRAINER = TrainerMetrics()
VERIFIER = VerifierMetrics()


# ------------------------------------------------------------------ series -> samples


class _Lookup:
    """Values of several series of one metric at a time: each series' latest point at or
    before t (no older than `staleness`), maximum within a group, one value per group.

    The common case, one series whose timestamps are the token counter's (one scrape), is a
    dictionary lookup."""

    __slots__ = ("_exact", "_groups", "_staleness")

    def __init__(self, series: Iterable[Series], group_label: str | None, staleness: float):
        groups: dict[str, list[tuple[list[float], list[float]]]] = {}
        for one in series:
            if not one.points:
                continue
            group = (one.label(group_label) or "") if group_label else ""
            times = [t for t, _ in one.points]
            values = [v for _, v in one.points]
            groups.setdefault(group, []).append((times, values))
        self._groups = groups
        self._staleness = staleness
        self._exact: dict[float, float] | None = None
        if len(groups) == 1:
            (members,) = groups.values()
            if len(members) == 1:
                times, values = members[0]
                self._exact = dict(zip(times, values, strict=True))

    def __bool__(self) -> bool:
        return bool(self._groups)

    def values_at(self, t: float) -> list[float]:
        """One value per group that has one at t."""
        if self._exact is not None:
            exact = self._exact.get(t)
            if exact is not None:
                return [exact]
        found = []
        for members in self._groups.values():
            best: float | None = None
            for times, values in members:
                index = bisect_right(times, t + TIME_EPSILON) - 1
                if index < 0 or t - times[index] > self._staleness:
                    continue
                value = values[index]
                best = value if best is None else max(best, value)
            if best is not None:
                found.append(best)
        return found

    def reduce(self, t: float, how: Callable[[list[float]], float]) -> float | None:
        if self._exact is not None:
            exact = self._exact.get(t)
            if exact is not None:
                return exact  # sum, max and mean of one value
        values = self.values_at(t)
        return how(values) if values else None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def sample_times(
    series: Iterable[Series], *, after: float = -math.inf, min_spacing: float = 0.0
) -> list[float]:
    """The distinct timestamps of the series after `after`, ascending, thinned so that each
    is at least `min_spacing` after the one before (the detectors' own rule: they would drop
    the others after building them)."""
    times: set[float] = set()
    for one in series:
        times.update(t for t, _ in one.points if t > after)
    kept: list[float] = []
    for t in sorted(times):
        if not kept or t >= kept[-1] + min_spacing:
            kept.append(t)
    return kept


def engine_samples(
    profile: EngineMetrics,
    series: Mapping[str, Sequence[Series]],
    staleness: float,
    *,
    after: float = -math.inf,
    min_spacing: float = 0.0,
) -> list[EngineSample]:
    """One pod's engine samples, one per timestamp of its token counter (after `after`,
    thinned to `min_spacing`), from its series by signal name. A timestamp without the token
    counter, running or waiting values gives no sample; optional metrics missing at a
    timestamp are None."""
    label = profile.engine_label

    def lookup(name: str) -> _Lookup:
        return _Lookup(series.get(name, ()), label, staleness)

    tokens, running, waiting = (
        lookup(GENERATION_TOKENS),
        lookup(REQUESTS_RUNNING),
        lookup(REQUESTS_WAITING),
    )
    if not (tokens and running and waiting):
        return []
    kv, hits, queries = (
        lookup(KV_CACHE_USAGE),
        lookup(PREFIX_CACHE_HITS),
        lookup(PREFIX_CACHE_QUERIES),
    )
    preemptions, sleep, paused = lookup(PREEMPTIONS), lookup(SLEEP_STATE), lookup(PAUSED_REQUESTS)
    samples = []
    times = sample_times(series.get(GENERATION_TOKENS, ()), after=after, min_spacing=min_spacing)
    for t in times:
        required = (tokens.reduce(t, sum), running.reduce(t, sum), waiting.reduce(t, sum))
        if required[0] is None or required[1] is None or required[2] is None:
            continue
        samples.append(
            EngineSample(
                t=t,
                generated_tokens_total=required[0],
                running=required[1],
                waiting=required[2],
                kv_usage=kv.reduce(t, _mean),
                prefix_hits_total=hits.reduce(t, sum),
                prefix_queries_total=queries.reduce(t, sum),
                preemptions_total=preemptions.reduce(t, sum),
                sleeping=_sleeping(profile.sleep, sleep.values_at(t)),
                paused=_paused(paused.values_at(t)),
            )
        )
    return samples


def _sleeping(gauge: SleepGauge | None, values: list[float]) -> bool | None:
    if gauge is None or not values:
        return None
    if gauge.sleeping_when_zero:
        return any(value == 0 for value in values)
    return any(value != 0 for value in values)


def _paused(values: list[float]) -> bool | None:
    return sum(values) > 0 if values else None


def _bound(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        bound = float(text)
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


def verifier_samples(
    profile: VerifierMetrics,
    series: Mapping[str, Sequence[Series]],
    staleness: float,
    *,
    after: float = -math.inf,
    min_spacing: float = 0.0,
) -> list[VerifierSample]:
    """One pod's histogram snapshots, one per timestamp of its bucket series (after `after`,
    thinned to `min_spacing`); a snapshot needs the +Inf bucket and at least one finite one."""
    by_bound: dict[float, list[Series]] = {}
    for one in series.get(VERIFIER_BUCKETS, ()):
        bound = _bound(one.label(profile.bound_label))
        if bound is not None:
            by_bound.setdefault(bound, []).append(one)
    if math.inf not in by_bound or len(by_bound) < 2:
        return []
    # Buckets from the same scrape only: a bucket that stopped arriving must not lend its old
    # count to a newer snapshot (the difference would read as slow requests).
    lookups = {bound: _Lookup(members, None, TIME_EPSILON) for bound, members in by_bound.items()}
    errors = _Lookup(series.get(VERIFIER_ERRORS, ()), None, staleness)
    samples = []
    times = sample_times(series.get(VERIFIER_BUCKETS, ()), after=after, min_spacing=min_spacing)
    for t in times:
        buckets = tuple(
            (bound, count)
            for bound, lookup in sorted(lookups.items())
            if (count := lookup.reduce(t, max)) is not None
        )
        if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
            continue
        samples.append(VerifierSample(t=t, buckets=buckets, errors_total=errors.reduce(t, max)))
    return samples


@dataclass(frozen=True, slots=True)
class TrainerReading:
    """The latest trainer signals of one pod; None: not exported."""

    t: float
    heartbeat_at: float | None
    phase: str | None
    step: float | None
    policy_generation: float | None
    checkpoint_step: float | None = None
    heartbeat_scraped_at: float | None = None  # the heartbeat point's own time


def _latest(series: Iterable[Series]) -> tuple[float, float] | None:
    """The newest point over the series (the largest value among equally new ones)."""
    best: tuple[float, float] | None = None
    for one in series:
        if one.points:
            point = one.points[-1]
            if best is None or point > best:
                best = point
    return best


def trainer_reading(
    profile: TrainerMetrics, series: Mapping[str, Sequence[Series]]
) -> TrainerReading | None:
    """One trainer pod's newest signals, or None when it exports none of them."""
    heartbeat = _latest(series.get(TRAINER_HEARTBEAT, ()))
    step = _latest(series.get(TRAINER_STEP, ()))
    generation = _latest(series.get(POLICY_GENERATION, ()))
    checkpoint = _latest(series.get(CHECKPOINT_STEP, ()))
    phases: dict[str, tuple[float, float]] = {}
    for one in series.get(TRAINER_PHASE, ()):
        phase = one.label(profile.phase_label)
        if phase is None or not one.points:
            continue
        point = one.points[-1]
        if phase not in phases or point[0] > phases[phase][0]:
            phases[phase] = point
    # Phases whose series stopped before the newest one are over.
    newest_phase_time = max((t for t, _ in phases.values()), default=None)
    current = None
    if newest_phase_time is not None:
        current = current_phase(
            {
                phase: value
                for phase, (t, value) in phases.items()
                if t >= newest_phase_time - TIME_EPSILON
            }
        )
    times = [p[0] for p in (heartbeat, step, generation) if p is not None]
    times.extend(t for t, _ in phases.values())
    if not times:
        return None
    return TrainerReading(
        t=max(times),
        heartbeat_at=heartbeat[1] if heartbeat is not None else None,
        phase=current,
        step=step[1] if step is not None else None,
        policy_generation=generation[1] if generation is not None else None,
        checkpoint_step=checkpoint[1] if checkpoint is not None else None,
        heartbeat_scraped_at=heartbeat[0] if heartbeat is not None else None,
    )


def trainer_signals(
    readings: Iterable[TrainerReading], *, pods_running: bool, attempt_started_at: float
) -> TrainerSignals:
    """The gang's signals from its ranks' latest readings: the freshest plausible heartbeat and
    when it was read (a rank whose metrics stopped arriving leaves an old reading behind: the
    heartbeat is judged as of then, not read as a stall now), the phase of that rank (else of
    the newest reading) and the highest step."""
    readings = list(readings)
    beating = [r for r in readings if freshest_heartbeat([r.heartbeat_at]) is not None]
    source = max(beating, key=lambda r: (r.heartbeat_at or 0.0, _heartbeat_time(r)), default=None)
    phase_from = source or max(readings, key=lambda r: r.t, default=None)
    steps = [r.step for r in readings if r.step is not None]
    return TrainerSignals(
        pods_running=pods_running,
        attempt_started_at=attempt_started_at,
        heartbeat_at=source.heartbeat_at if source is not None else None,
        phase=phase_from.phase if phase_from is not None else None,
        step=max(steps) if steps else None,
        observed_at=_heartbeat_time(source) if source is not None else None,
    )


def _heartbeat_time(reading: TrainerReading) -> float:
    return reading.heartbeat_scraped_at if reading.heartbeat_scraped_at is not None else reading.t
