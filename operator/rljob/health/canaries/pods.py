"""What both canary detectors share: admitting one trainer pod's samples in time order, and one
job-wide verdict from the verdicts of the trainer pods that export the canary series.

Every rank may export the same gauges, or only rank 0 does: each pod is judged on its own
series, and the job's evaluation is the most telling pod's, named in its evidence."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Generic, Protocol, TypeVar

from rljob.health.evaluation import FINDING, HEALTHY, Evaluation, Evidence, insufficient
from rljob.health.samples import MAX_PLAUSIBLE_VALUE, MIN_SPACING_INTERVALS

POD_EVIDENCE = "pod"
# A gap longer than this many evaluation intervals means the series stopped arriving.
STALE_INTERVALS = 3.0


def plausible_time(t: float) -> bool:
    return math.isfinite(t) and 0 <= t <= MAX_PLAUSIBLE_VALUE


def plausible_level(value: float) -> bool:
    """A gauge that may be negative (a reward), bounded so that every sum stays finite."""
    return math.isfinite(value) and abs(value) <= MAX_PLAUSIBLE_VALUE


def plausible_count(value: float) -> bool:
    return math.isfinite(value) and 0 <= value <= MAX_PLAUSIBLE_VALUE


def min_spacing(interval: float) -> float:
    """Samples closer than this to the last accepted one are dropped (duplicates, and a scrape
    faster than the evaluation interval that would outgrow a ring sized for the window)."""
    return max(interval * MIN_SPACING_INTERVALS, 1e-9)


def admits(t: float, last: float | None, not_before: float, spacing: float) -> bool:
    """Whether a sample at `t` is the pod's next one: a plausible time, not before the
    attempt's start, and `spacing` after the last accepted sample (late ones are dropped)."""
    if not plausible_time(t) or t < not_before:
        return False
    return last is None or t >= last + spacing


class PodState(Protocol):
    def forget_before(self, at: float) -> None: ...

    def __len__(self) -> int: ...


S = TypeVar("S", bound=PodState)


class PodStates(Generic[S]):
    """Each trainer pod's state; a pod first seen after a restart starts after it too."""

    def __init__(self, new: Callable[[float], S]) -> None:
        self._new = new
        self._states: dict[str, S] = {}
        self._not_before = -math.inf

    def of(self, pod: str) -> S:
        state = self._states.get(pod)
        if state is None:
            state = self._states[pod] = self._new(self._not_before)
        return state

    def note_restart(self, at: float) -> None:
        """A new trainer attempt from `at`: every pod forgets what came before."""
        self._not_before = max(self._not_before, at)
        for state in self._states.values():
            state.forget_before(at)

    def retain(self, pods: Collection[str]) -> None:
        for pod in [name for name in self._states if name not in pods]:
            del self._states[pod]

    def retained_values(self) -> int:
        return sum(len(state) for state in self._states.values())

    def with_samples(self) -> Iterator[tuple[str, S]]:
        return ((pod, state) for pod, state in self._states.items() if len(state))


def combine(
    detector: str,
    target: str,
    per_pod: Mapping[str, Evaluation],
    rank: Callable[[Evaluation], float],
    nothing: str,
) -> Evaluation:
    """The job's evaluation: the highest-ranked finding, else the highest-ranked healthy pod,
    else the first pod's insufficient data; `nothing` says why when no pod exports the series.
    The pod's name goes into the evidence and leads the message."""
    if not per_pod:
        return insufficient(detector, target, nothing)
    for outcome in (FINDING, HEALTHY):
        candidates = [pod for pod, verdict in per_pod.items() if verdict.outcome == outcome]
        if candidates:
            best = max(sorted(candidates), key=lambda pod: rank(per_pod[pod]))
            return retarget(target, best, per_pod[best], len(per_pod))
    first = sorted(per_pod)[0]
    return retarget(target, first, per_pod[first], len(per_pod))


def retarget(target: str, pod: str, verdict: Evaluation, pods: int) -> Evaluation:
    """A pod's verdict as the job's: the pod named in the evidence and the message."""
    evidence: Evidence = {**verdict.evidence, POD_EVIDENCE: pod}
    others = f" (of {pods} trainer pods)" if pods > 1 else ""
    message = f"trainer pod {pod}{others}: {verdict.message}"
    return Evaluation(verdict.detector, target, verdict.outcome, verdict.reason, evidence, message)
