"""From one round's answers to a job's evaluations (docs/architecture.md section 5). Pure: the
health loop turns a metrics source's answers into `Answers`; this module feeds them into a
JobMonitor's detectors (engine samples, trainer readings, verifier histogram snapshots per pod) and
its rollout engines' readings (rljob.health.monitor_engines), and evaluates them.

A signal that failed makes every evaluation of the roles that need it "insufficient data" for
that round, and none of that role's answers are fed (an engine whose sleep state is unknown
must not look awake); it is never a finding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rljob.health import (
    ENGINE_STALL,
    KV_DRIFT,
    KV_FRAGMENTATION,
    TRAINER_STALL,
    VERIFIER_LATENCY,
    Evaluation,
)
from rljob.health.canaries import (
    REWARD_HACKING,
    REWARD_HACKING_VALUE,
    THROUGHPUT_REGRESSION,
    THROUGHPUT_REGRESSION_VALUE,
)
from rljob.health.engine_group import DETECTORS as ENGINE_DETECTORS
from rljob.health.engine_group import GANG_ENGINES, EngineGroup
from rljob.health.evaluation import (
    CHECKPOINT_STEP_EVIDENCE,
    POLICY_GENERATION_EVIDENCE,
    TRAINER_STEP_EVIDENCE,
    insufficient,
)
from rljob.health.job_diagnosis import DIAGNOSIS_ROLE, diagnosis_queries
from rljob.health.monitor import (
    ROLLOUT,
    TRAINER_ROLE,
    TRAINER_TARGET,
    VERIFIER_ROLE,
    JobMonitor,
    S,
    Targets,
)
from rljob.health.monitor_engines import ENGINE_GAUGE_SIGNALS, engine_gauges
from rljob.health.profiles import (
    OPTIONAL_ENGINE_SIGNALS,
    TRAINER,
    VERIFIER,
    Series,
    Signal,
    engine_samples,
    trainer_reading,
    trainer_signals,
    verifier_samples,
)
from rljob.health.verifier import P99_EVIDENCE

PodKey = tuple[str, str]  # (namespace, pod)

# Per detector: the evidence key of its value (rljob_detector_value) and how targets combine.
_VALUE_OF: Mapping[str, tuple[str, Callable[[Iterable[float]], float]]] = {
    KV_DRIFT: ("change", min),
    KV_FRAGMENTATION: ("change", min),
    ENGINE_STALL: ("flat_seconds", max),
    TRAINER_STALL: ("stale_seconds", max),
    VERIFIER_LATENCY: (P99_EVIDENCE, max),
    REWARD_HACKING: (REWARD_HACKING_VALUE, max),
    THROUGHPUT_REGRESSION: (THROUGHPUT_REGRESSION_VALUE, min),
}
VALUED_DETECTORS: tuple[str, ...] = tuple(_VALUE_OF)


@dataclass(frozen=True, slots=True)
class Answers:
    """A source's answers by signal: each pod's series, or (described) why the signal failed.
    A signal in neither was not answered."""

    data: Mapping[Signal, Mapping[PodKey, list[Series]]]
    failed: Mapping[Signal, str]

    @property
    def answered(self) -> bool:
        """Whether any signal answered (with data, possibly none for some pods)."""
        return bool(self.data)


def failure(signals: Iterable[Signal], answers: Answers, *, optional: bool = False) -> str | None:
    """Why the first of `signals` that did not answer failed, or None when all answered; an
    `optional` signal left unanswered is no failure, only one the source said failed."""
    for signal in signals:
        problem = answers.failed.get(signal)
        if problem is not None:
            return problem
        if signal not in answers.data and not optional:
            return f"no answer for {signal.metric}"
    return None


def _pod_series(
    signals: Mapping[str, Signal], answers: Answers, pod: PodKey
) -> dict[str, list[Series]]:
    series: dict[str, list[Series]] = {}
    for name, signal in signals.items():
        data = answers.data.get(signal)
        if data is not None:
            series[name] = data.get(pod, [])
    return series


def feed(monitor: JobMonitor[S], targets: Targets, answers: Answers) -> dict[str, str]:
    """Feeds a job's detectors from the answers; returns role -> error for the roles whose
    signals failed (those roles get nothing fed)."""
    failed: dict[str, str] = {}
    _note_engine_gauges(monitor, targets, answers)
    feeds: list[tuple[str, Mapping[str, Signal], Callable[[], None]]] = []
    for group in monitor.engine_groups:
        pods = targets.engines(group.key)
        if pods and group.metrics is not None:
            named = group.metrics.signals().items()
            required = {n: s for n, s in named if n not in OPTIONAL_ENGINE_SIGNALS}
            feeds.append((group.key, required, _engine_feed(monitor, group, pods, answers)))
    if targets.trainer:
        feeds.append(
            (TRAINER_ROLE, TRAINER.signals(), lambda: _feed_trainer(monitor, targets, answers))
        )
    if targets.verifier and monitor.verifier is not None:
        feeds.append(
            (VERIFIER_ROLE, VERIFIER.signals(), lambda: _feed_verifier(monitor, targets, answers))
        )
    verifiers = targets.verifier if monitor.verifier is not None else ()
    diagnosis = {s.name: s for s in diagnosis_queries(targets.trainer, verifiers)}
    if diagnosis:
        feeds.append(
            (
                DIAGNOSIS_ROLE,
                diagnosis,
                lambda: _feed_diagnosis(monitor, targets, answers, diagnosis),
            )
        )
    for role, signals, feed_role in feeds:
        problem = failure(signals.values(), answers, optional=role == DIAGNOSIS_ROLE)
        if problem is not None:
            failed[role] = problem
        else:
            feed_role()
    return failed


def _note_engine_gauges(monitor: JobMonitor[S], targets: Targets, answers: Answers) -> None:
    """Keeps each rollout pod's newest reading from the answers (an older one never replaces
    a newer one: a backfill's history, a Prometheus that lags)."""
    profile = monitor.rollout.metrics
    if profile is None:
        return
    signals = {
        name: signal for name, signal in profile.signals().items() if name in ENGINE_GAUGE_SIGNALS
    }
    namespace = monitor.key[0]
    for pod in targets.rollout:
        series = {
            name: answers.data.get(signal, {}).get((namespace, pod), [])
            for name, signal in signals.items()
        }
        reading = engine_gauges(profile, series, monitor.staleness)
        known = monitor.engine_gauges.get(pod)
        if reading is not None and (known is None or reading.t >= known.t):
            monitor.engine_gauges[pod] = reading


def _engine_feed(
    monitor: JobMonitor[S], group: EngineGroup, pods: Sequence[str], answers: Answers
) -> Callable[[], None]:
    return lambda: _feed_engines(monitor, group, pods, answers)


def _feed_engines(
    monitor: JobMonitor[S], group: EngineGroup, pods: Sequence[str], answers: Answers
) -> None:
    engine = group.metrics
    if engine is None:
        return
    signals = engine.signals()
    for pod in pods:
        series = _pod_series(signals, answers, (monitor.key[0], pod))
        samples = engine_samples(
            engine,
            series,
            monitor.staleness,
            after=monitor.fed.get((group.key, pod), -math.inf),
            min_spacing=monitor.min_spacing,
        )
        diagnosed = group.key == monitor.diagnosed_engines
        for sample in samples:
            group.observe(pod, sample)
            if diagnosed:
                monitor.diagnosis.observe_engine(pod, sample)
        if samples:
            group.seen.add(pod)
            monitor.fed[group.key, pod] = samples[-1].t


def _feed_trainer(monitor: JobMonitor[S], targets: Targets, answers: Answers) -> None:
    signals = TRAINER.signals()
    for pod in targets.trainer:
        reading = trainer_reading(TRAINER, _pod_series(signals, answers, (monitor.key[0], pod)))
        known = monitor.trainer_readings.get(pod)
        if reading is not None and (known is None or reading.t >= known.t):
            monitor.trainer_readings[pod] = reading


def _feed_diagnosis(
    monitor: JobMonitor[S], targets: Targets, answers: Answers, signals: Mapping[str, Signal]
) -> None:
    namespace, spacing = monitor.key[0], monitor.min_spacing
    for pod in targets.trainer:
        after = monitor.fed.get((DIAGNOSIS_ROLE, pod), -math.inf)
        series = _pod_series(signals, answers, (namespace, pod))
        newest = monitor.diagnosis.feed_trainer(
            pod, series, monitor.staleness, after=after, min_spacing=spacing
        )
        if newest is not None:
            monitor.fed[DIAGNOSIS_ROLE, pod] = newest
    for pod in targets.verifier if monitor.verifier is not None else ():
        after = monitor.fed.get((DIAGNOSIS_ROLE, pod), -math.inf)
        series = _pod_series(signals, answers, (namespace, pod))
        newest = monitor.diagnosis.feed_verifier(pod, series, after=after, min_spacing=spacing)
        if newest is not None:
            monitor.fed[DIAGNOSIS_ROLE, pod] = newest


def _feed_verifier(monitor: JobMonitor[S], targets: Targets, answers: Answers) -> None:
    detector = monitor.verifier
    if detector is None:
        return
    signals = VERIFIER.signals()
    for pod in targets.verifier:
        series = _pod_series(signals, answers, (monitor.key[0], pod))
        histogram = verifier_samples(
            VERIFIER,
            series,
            monitor.staleness,
            after=monitor.fed.get((VERIFIER_ROLE, pod), -math.inf),
            min_spacing=monitor.min_spacing,
        )
        for snapshot in histogram:
            detector.observe(pod, snapshot)
        if histogram:
            monitor.seen_verifier.add(pod)
            monitor.fed[VERIFIER_ROLE, pod] = histogram[-1].t


def evaluate(
    monitor: JobMonitor[S],
    targets: Targets,
    answers: Answers,
    error: str | None,
    now: float,
) -> list[Evaluation]:
    """Feeds the round's answers and evaluates every detector of the round's targets; `error`
    (the whole source failed) makes every evaluation insufficient data and feeds nothing."""
    if error is not None:
        roles = (ROLLOUT, GANG_ENGINES, TRAINER_ROLE, VERIFIER_ROLE, DIAGNOSIS_ROLE)
        failed = dict.fromkeys(roles, error)
    else:
        failed = feed(monitor, targets, answers)
    source = monitor.source.describe() if monitor.source is not None else "none"
    evaluations: list[Evaluation] = []
    for group in monitor.engine_groups:
        pods = targets.engines(group.key)
        if pods:
            evaluations += _engines(group, pods, failed.get(group.key), source, now)
    if targets.trainer or monitor.trainer_pods or monitor.attempt is not None:
        evaluations.append(_trainer(monitor, failed.get(TRAINER_ROLE), source, now))
    if targets.verifier and monitor.verifier is not None:
        evaluations += _verifiers(monitor, targets.verifier, failed.get(VERIFIER_ROLE), source, now)
    return evaluations + _diagnose(monitor, targets, evaluations, failed.get(DIAGNOSIS_ROLE), now)


def _diagnose(
    monitor: JobMonitor[S],
    targets: Targets,
    evaluations: Sequence[Evaluation],
    problem: str | None,
    now: float,
) -> list[Evaluation]:
    """The bottleneck (kept on the monitor's diagnosis) and the canaries' evaluations; a round
    whose diagnosis series failed judges on what was fed before and finds nothing new."""
    monitor.diagnosis.note_verifier_evaluations(evaluations)
    watched = bool(targets.trainer or monitor.trainer_pods)
    canaries = monitor.diagnosis.evaluate(now, trainer_watched=watched)
    if problem is None:
        return canaries
    why = f"metrics source: {problem}"
    return [insufficient(e.detector, e.target, why, {"source_error": why}) for e in canaries]


def _unavailable(detectors: Sequence[str], pods: Iterable[str], why: str) -> list[Evaluation]:
    return [
        insufficient(detector, pod, f"{pod}: {why}", {"source_error": why})
        for pod in pods
        for detector in detectors
    ]


def _engines(
    group: EngineGroup,
    pods: Sequence[str],
    problem: str | None,
    source: str,
    now: float,
) -> list[Evaluation]:
    detectors = ENGINE_DETECTORS
    if group.metrics is None:
        return _unavailable(detectors, pods, group.error)
    if problem is not None:
        return _unavailable(detectors, pods, f"metrics source {source}: {problem}")
    current = set(pods)
    evaluations = [e for e in group.evaluate(now) if e.target in current]
    missing = [pod for pod in pods if pod not in group.seen]
    metric = group.metrics.generation_tokens_total
    evaluations += [
        insufficient(detector, pod, f"{pod}: no {metric} samples from {source} yet")
        for pod in missing
        for detector in detectors
    ]
    return evaluations


def _trainer(monitor: JobMonitor[S], problem: str | None, source: str, now: float) -> Evaluation:
    if problem is not None:
        why = f"metrics source {source}: {problem}"
        return insufficient(TRAINER_STALL, TRAINER_TARGET, why, {"source_error": why})
    readings = list(monitor.trainer_readings.values())
    steps = [r.step for r in readings if r.step is not None]
    signals = trainer_signals(  # a rank whose metrics vanished is not read as a stall
        readings,
        pods_running=monitor.trainer_running,
        attempt_started_at=monitor.attempt_started_at,
    )
    evaluation = monitor.trainer.evaluate(signals, now)
    saved = [r.checkpoint_step for r in readings if r.checkpoint_step is not None]
    if saved:  # lets the operator list checkpoints only when the trainer saved a new one
        evaluation.evidence[CHECKPOINT_STEP_EVIDENCE] = max(saved)
    if steps:
        evaluation.evidence[TRAINER_STEP_EVIDENCE] = max(steps)
    generations = [r.policy_generation for r in readings if r.policy_generation is not None]
    if generations:
        evaluation.evidence[POLICY_GENERATION_EVIDENCE] = max(generations)
    return evaluation


def _verifiers(
    monitor: JobMonitor[S],
    pods: Sequence[str],
    problem: str | None,
    source: str,
    now: float,
) -> list[Evaluation]:
    detector = monitor.verifier
    if detector is None:
        return []
    if problem is not None:
        return _unavailable((VERIFIER_LATENCY,), pods, f"metrics source {source}: {problem}")
    current = set(pods)
    evaluations = [e for e in detector.evaluate(now) if e.target in current]
    metric = VERIFIER.duration_buckets
    evaluations += [
        insufficient(VERIFIER_LATENCY, pod, f"{pod}: no {metric} samples from {source} yet")
        for pod in pods
        if pod not in monitor.seen_verifier
    ]
    return evaluations


def job_error(
    monitor: JobMonitor[S], targets: Targets, answers: Answers, error: str | None
) -> str | None:
    """Why the job's source failed this round (any of its signals), or None when it answered."""
    if error is not None:
        return error
    plan = monitor.query_plan(targets)
    return failure(plan.required, answers) or failure(plan.optional, answers, optional=True)


def detector_values(evaluations: Iterable[Evaluation]) -> dict[str, float]:
    """Per detector of VALUED_DETECTORS, its value over the targets (the lowest drift change,
    the longest flat or stale time, the highest p99); detectors without a finite one are left
    out."""
    values: dict[str, list[float]] = {}
    for evaluation in evaluations:
        spec = _VALUE_OF.get(evaluation.detector)
        if spec is None:
            continue
        value = evaluation.evidence.get(spec[0])
        if isinstance(value, int | float) and math.isfinite(value):
            values.setdefault(evaluation.detector, []).append(float(value))
    return {detector: _VALUE_OF[detector][1](found) for detector, found in values.items()}
