"""The health loop's per-job series: detector evaluations and values, the bottleneck role and
each phase's seconds per step. A forgotten job's series are removed, so a deleted RLJob leaves
none behind. Every round sets each job's two dozen gauges as floats in JOB_SERIES's dictionary,
which the metrics server turns into families at each scrape."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from prometheus_client import Counter as CounterMetric

from rljob.health import Evaluation
from rljob.health.evaluation import INSUFFICIENT_DATA
from rljob.health.monitor import JobKey
from rljob.health.monitor_answers import VALUED_DETECTORS, detector_values
from rljob.observability import (
    BOTTLENECK,
    DETECTOR_EVALUATIONS,
    DETECTOR_JUDGED,
    DETECTOR_VALUE,
    HEALTH_FAMILIES,
    JOB_SERIES,
    STEP_PHASE_SECONDS,
    JobSeries,
    Slot,
)
from rljob.vocabulary.enums import BottleneckRole


class HealthSeries:
    """See the module docstring."""

    def __init__(self, series: JobSeries = JOB_SERIES) -> None:
        self._series = series
        self._set = series.values
        self._counted: dict[tuple[str, str], CounterMetric] = {}

    def count(self, key: JobKey, evaluations: Sequence[Evaluation]) -> None:
        for evaluation in evaluations:
            self._evaluations(evaluation.detector, evaluation.outcome).inc()
        values = detector_values(evaluations)
        judged = Counter(e.detector for e in evaluations if e.outcome != INSUFFICIENT_DATA)
        evaluated = {e.detector for e in evaluations}
        for detector in VALUED_DETECTORS:
            self._put(key, (DETECTOR_VALUE, detector), values.get(detector))
            count = judged[detector] if detector in evaluated else None
            self._put(key, (DETECTOR_JUDGED, detector), count)

    def diagnosis(
        self, key: JobKey, role: BottleneckRole | None, phase_seconds: Mapping[str, float]
    ) -> None:
        """rljob_job_bottleneck (1 for the held role, 0 for the others; none before the first
        verdict) and rljob_job_step_phase_seconds (phases no longer seen removed)."""
        for each in BottleneckRole:
            self._put(key, (BOTTLENECK, each.value), None if role is None else float(each == role))
        gone = [s for s in self._set.get(key, {}) if s[0] is STEP_PHASE_SECONDS]
        for slot in gone:
            if slot[1] not in phase_seconds:
                self._put(key, slot, None)
        for phase, seconds in phase_seconds.items():
            self._put(key, (STEP_PHASE_SECONDS, phase), seconds)

    def forget(self, key: JobKey) -> None:
        """The health loop's series of the job (a finished job keeps its checkpoint's)."""
        self._series.forget(key, HEALTH_FAMILIES)

    def _put(self, key: JobKey, slot: Slot, value: float | None) -> None:
        """The series at `value`, or gone when there is none."""
        if value is None:
            self._set.get(key, {}).pop(slot, None)
        else:
            self._set.setdefault(key, {})[slot] = value

    def _evaluations(self, detector: str, outcome: str) -> CounterMetric:
        counter = self._counted.get((detector, outcome))
        if counter is None:
            counter = DETECTOR_EVALUATIONS.labels(detector=detector, outcome=outcome)
            self._counted[detector, outcome] = counter
        return counter
