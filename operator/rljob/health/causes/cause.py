"""What the cause detectors built on PerEngine share: a config with the job's interval, a state
per engine made from it and fed through an EngineSeries, a verdict per engine each evaluation,
and insufficient data for an engine whose metrics stopped."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ClassVar, Generic, Protocol, TypeVar

from rljob.health.causes.engines import NEVER, PerEngine, StateT
from rljob.health.evaluation import Evaluation, insufficient
from rljob.health.samples import EngineSample, EngineSeries, Interval


class Timed(Protocol):
    @property
    def interval(self) -> float: ...


ConfigT = TypeVar("ConfigT", bound=Timed)
# A sample the series accepted: the one before it (None: the first), it, and the interval
# between them (None: the first).
Accepted = tuple[EngineSample | None, EngineSample, Interval | None]


class SeriesState:
    """The base of a cause's per-engine state: its samples in time order through an
    EngineSeries (garbage, duplicates, late and too close ones dropped); `not_before` is
    PerEngine's restart time."""

    __slots__ = ("not_before", "series")

    def __init__(self, interval: float) -> None:
        self.series = EngineSeries(interval)
        self.not_before = NEVER

    def accept(self, sample: EngineSample) -> Accepted | None:
        """The sample as the series took it, or None when it was dropped."""
        previous = self.series.last
        interval = self.series.add(sample)
        current = self.series.last
        if current is None or current is previous:
            return None
        return previous, current, interval


class CauseDetector(PerEngine[StateT], Generic[StateT, ConfigT]):
    """One cause's detector for the engines of one role of one job; `detector` is its name
    (evaluation.py's), `_judge` its verdict on one engine."""

    detector: ClassVar[str]

    def __init__(self, config: ConfigT, make: Callable[[ConfigT], StateT]) -> None:
        super().__init__(partial(make, config))
        self.config = config

    def evaluate(self, now: float) -> list[Evaluation]:
        return self.evaluate_each(lambda target, state: self._judge(target, state, now))

    def _judge(self, target: str, state: StateT, now: float) -> Evaluation:
        raise NotImplementedError

    def no_recent_metrics(self, target: str) -> Evaluation:
        """The verdict on an engine without a sample, or none recent (engines.is_stale)."""
        return insufficient(self.detector, target, f"{target}: no recent metrics")
