"""What every simulated workload model shares: the interface the simulator drives, the time steps
(with noise) each model integrates its counters over, and the process start series every page
carries."""

from __future__ import annotations

import math
import random
from typing import Any, Protocol

from rljob.dev.sim.faults import NO_FAULTS, Active

MAX_STEP = 1.0
MAX_STEPS = 3600
PROCESS_START = "process_start_time_seconds"


class Model(Protocol):
    role: str
    start: float
    t: float
    profile: Any

    def set_profile(self, profile: Any) -> None: ...

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None: ...

    def render(self) -> str: ...

    def state(self) -> dict[str, Any]: ...


def noisy(rng: random.Random, noise: float) -> float:
    """A rate multiplier around 1 (never negative) with `noise` as its standard deviation."""
    return max(0.0, 1.0 + rng.gauss(0.0, noise)) if noise > 0 else 1.0


def steps(span: float) -> tuple[int, float]:
    """(count, length) of the equal steps, at most MAX_STEP seconds each, that cover span."""
    count = min(MAX_STEPS, max(1, math.ceil(span / MAX_STEP - 1e-9)))
    return count, span / count
