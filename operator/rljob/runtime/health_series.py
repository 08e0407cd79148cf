"""The health loop's per-job series: detector evaluations and values, the bottleneck role and
each phase's seconds per step. A forgotten job's series are removed, so a deleted RLJob leaves
none behind."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from rljob.api.diagnosis import BottleneckRole
from rljob.health import Evaluation
from rljob.health.monitor import JobKey
from rljob.health.monitor_answers import VALUED_DETECTORS, detector_values
from rljob.observability import (
    BOTTLENECK,
    DETECTOR_EVALUATIONS,
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
        namespace, name = key
        for detector in VALUED_DETECTORS:
            if detector in values:
                DETECTOR_VALUE.labels(namespace, name, detector).set(values[detector])
            else:
                with contextlib.suppress(KeyError):
                    DETECTOR_VALUE.remove(namespace, name, detector)

    def diagnosis(
        self, key: JobKey, role: BottleneckRole | None, phase_seconds: Mapping[str, float]
    ) -> None:
        """rljob_job_bottleneck (1 for the held role, 0 for the others; none before the first
        verdict) and rljob_job_step_phase_seconds (phases no longer seen removed)."""
        namespace, name = key
        for each in BottleneckRole:
            if role is None:
                with contextlib.suppress(KeyError):
                    BOTTLENECK.remove(namespace, name, each.value)
            else:
                BOTTLENECK.labels(namespace, name, each.value).set(float(each == role))
        for phase in self._phases.get(key, set()) - set(phase_seconds):
            with contextlib.suppress(KeyError):
                STEP_PHASE_SECONDS.remove(namespace, name, phase)
        for phase, seconds in phase_seconds.items():
            STEP_PHASE_SECONDS.labels(namespace, name, phase).set(seconds)
        if phase_seconds:
            self._phases[key] = set(phase_seconds)
        else:
            self._phases.pop(key, None)

    def forget(self, key: JobKey) -> None:
        namespace, name = key
        for detector in VALUED_DETECTORS:
            with contextlib.suppress(KeyError):
                DETECTOR_VALUE.remove(namespace, name, detector)
        self.diagnosis(key, None, {})
