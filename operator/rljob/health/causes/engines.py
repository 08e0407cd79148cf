"""What the cause detectors share: one state per engine (pod), fed in time order, started over
when the operator restarts the engine, dropped when the pod leaves."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Generic, Protocol, TypeVar

from rljob.health.evaluation import Evaluation
from rljob.health.samples import EngineSample

# Samples older than this many evaluation intervals mean the engine's metrics are gone.
STALE_SAMPLE_INTERVALS = 3.0


class EngineState(Protocol):
    not_before: float

    def add(self, sample: EngineSample) -> None: ...


StateT = TypeVar("StateT", bound=EngineState)


class PerEngine(Generic[StateT]):
    """The states of the engines of one group, each made by `make` on its first sample."""

    def __init__(self, make: Callable[[], StateT]) -> None:
        self._make = make
        self._engines: dict[str, StateT] = {}

    @property
    def targets(self) -> list[str]:
        return sorted(self._engines)

    def state(self, target: str) -> StateT | None:
        return self._engines.get(target)

    def observe(self, target: str, sample: EngineSample) -> None:
        state = self._engines.get(target)
        if state is None:
            state = self._engines[target] = self._make()
        if sample.t >= state.not_before:
            state.add(sample)

    def note_restart(self, target: str, at: float) -> None:
        """The engine restarted at `at`: its evidence starts over, samples before `at` ignored."""
        state = self._make()
        state.not_before = at
        self._engines[target] = state

    def forget(self, target: str) -> None:
        self._engines.pop(target, None)

    def retain(self, targets: Collection[str]) -> None:
        for target in [name for name in self._engines if name not in targets]:
            del self._engines[target]

    def evaluate_each(self, judge: Callable[[str, StateT], Evaluation]) -> list[Evaluation]:
        return [judge(target, self._engines[target]) for target in sorted(self._engines)]


def is_stale(last_t: float | None, now: float, interval: float) -> bool:
    """No sample, or none for STALE_SAMPLE_INTERVALS intervals."""
    return last_t is None or not now - last_t <= STALE_SAMPLE_INTERVALS * interval


NEVER = -math.inf
