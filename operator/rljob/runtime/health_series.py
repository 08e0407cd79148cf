"""The health loop's per-job series: detector evaluations and values, the bottleneck role and
each phase's seconds per step. A forgotten job's series are removed, so a deleted RLJob leaves
none behind."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping, Sequence

from prometheus_client import Gauge

from rljob.api.diagnosis import BottleneckRole
from rljob.health import Evaluation
from rljob.health.evaluation import INSUFFICIENT_DATA
from rljob.health.monitor import JobKey
from rljob.health.monitor_answers import VALUED_DETECTORS, detector_values
from rljob.observability import (
    BOTTLENECK,
    DETECTOR_EVALUATIONS,
    DETECTOR_JUDGED,
    DETECTOR_VALUE,
    STEP_PHASE_SECONDS,
)


class HealthSeries:
    """See the module docstring; remembers which phases it exported per job."""

    def __init__(self) -> None:
        self._phases: dict[JobKey, set[str]] = {}

    def count(self, key: JobKey, evaluations: Sequence[Evaluation]) -> None:
        for evaluation in evaluations:
            DETECTOR_EVALUATIONS.labels(
                detector=evaluation.detector, outcome=evaluation.outcome
            ).inc()
        values = detector_values(evaluations)
        judged = Counter(e.detector for e in evaluations if e.outcome != INSUFFICIENT_DATA)
        evaluated = {e.detector for e in evaluations}
        namespace, name = key
        for detector in VALUED_DETECTORS:
            _set_or_remove(DETECTOR_VALUE, (namespace, name, detector), values.get(detector))
            count = judged[detector] if detector in evaluated else None
            _set_or_remove(DETECTOR_JUDGED, (namespace, name, detector), count)

    def diagnosis(
        self, key: JobKey, role: BottleneckRole | None, phase_seconds: Mapping[str, float]
    ) -> None:
        """rljob_job_bottleneck (1 for the held role, 0 for the others; none before the first
        verdict) and rljob_job_step_phase_seconds (phases no longer seen removed)."""
        namespace, name = key
        for each in BottleneckRole:
            held = None if role is None else float(each == role)
            _set_or_remove(BOTTLENECK, (namespace, name, each.value), held)
        for phase in self._phases.get(key, set()) - set(phase_seconds):
            _set_or_remove(STEP_PHASE_SECONDS, (namespace, name, phase), None)
        for phase, seconds in phase_seconds.items():
            STEP_PHASE_SECONDS.labels(namespace, name, phase).set(seconds)
        if phase_seconds:
            self._phases[key] = set(phase_seconds)
        else:
            self._phases.pop(key, None)

    def forget(self, key: JobKey) -> None:
        namespace, name = key
        for detector in VALUED_DETECTORS:
            for gauge in (DETECTOR_VALUE, DETECTOR_JUDGED):
                _set_or_remove(gauge, (namespace, name, detector), None)
        self.diagnosis(key, None, {})


def _set_or_remove(gauge: Gauge, labels: tuple[str, ...], value: float | None) -> None:
    """The series at `value`, or gone when there is none."""
    if value is None:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
    else:
        gauge.labels(*labels).set(value)
