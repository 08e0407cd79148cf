"""What the RL driver offers an engine and how it changes: the request mix, the driver, workload
shifts that slow an engine without any fault, and the fragmentation fault. Times are seconds
since the engine's start."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from rljob.dev.host_memory import HostMemory
from rljob.dev.physics.hardware import DEFAULT_HARDWARE, Hardware

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class RequestMix:
    """Mean prompt and generated tokens per request, the coefficient of variation of generation
    length, and the share of prompt tokens that is a prefix shared with other requests."""

    prompt_tokens: float
    generation_tokens: float
    generation_cv: float
    shared_prefix: float

    @property
    def context_tokens(self) -> float:
        """Mean context of the sequences in flight: long requests stay longer (length-biased),
        so the mean generated share is E[g^2] / 2E[g] = g (1 + cv^2) / 2."""
        return self.prompt_tokens + self.generation_tokens * (1 + self.generation_cv**2) / 2


# A reasoning-RL rollout: 1k-token prompts, 2k-token answers; GRPO groups share prompt prefixes.
DEFAULT_MIX = RequestMix(
    prompt_tokens=1024.0, generation_tokens=2048.0, generation_cv=0.6, shared_prefix=0.5
)


@dataclass(frozen=True, slots=True)
class Shifts:
    """Workload changes that slow an engine with no fault. `response_growth_per_day` 1.0 doubles
    the mean response over 24 h (RL answers lengthen as training goes); from `long_prompts_at`
    for `long_prompts_for` prompts are `long_prompt_factor` times longer (their extra tokens are
    unique, so the shared share falls by the same factor); from `mix_change_at` the driver
    offers `mix_after` instead."""

    response_growth_per_day: float = 0.0
    long_prompts_at: float = math.inf
    long_prompts_for: float = 0.0
    long_prompt_factor: float = 4.0
    mix_change_at: float = math.inf
    mix_after: RequestMix | None = None


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """The fault: from `start` a growing share of KV blocks leaks (unusable, still counted as
    used), reaching `loss` after `ramp` seconds and staying there."""

    start: float
    ramp: float
    loss: float

    def __post_init__(self) -> None:
        if not 0 <= self.loss < 1 or self.ramp < 0:
            raise ValueError(f"loss must be in [0, 1) and ramp >= 0: {self}")

    def at(self, age: float) -> float:
        if age < self.start:
            return 0.0
        if self.ramp <= 0:
            return self.loss
        return self.loss * min(1.0, (age - self.start) / self.ramp)


@dataclass(frozen=True, slots=True)
class Driver:
    """`async`: continuous RL keeping `concurrency` requests in flight. `sync`: generate/train
    cycles, `batch` requests at once, the engine asleep for `train_seconds` once they all finish,
    then paused for `weight_sync_seconds`. The first requests arrive `offset` seconds after the
    engine starts, so the engines of one job do not align exactly."""

    kind: Literal["async", "sync"] = "async"
    # Above the ~180 sequences the default mix fits in the default KV cache, so a healthy engine
    # is KV-bound with a queue, where fragmentation costs throughput.
    concurrency: int = 256
    # 128 prompts x 8 samples: KV-bound for most of a generate phase, then a drain tail.
    batch: int = 1024
    train_seconds: float = 300.0
    weight_sync_seconds: float = 30.0
    offset: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("async", "sync"):
            raise ValueError(f"unknown driver kind {self.kind!r}")
        if self.batch < 1 or self.concurrency < 0:
            raise ValueError(f"a batch needs a request and concurrency can't be negative: {self}")

    @property
    def full_load(self) -> int:
        """Requests offered when the driver is at full load."""
        return self.concurrency if self.kind == "async" else self.batch


@dataclass(frozen=True, slots=True)
class MemoryGrowth:
    """The host memory fault: from `start` the engine's processes keep `gib_per_hour` more
    (rljob.dev.host_memory), never given back."""

    start: float
    gib_per_hour: float


@dataclass(frozen=True, slots=True)
class PhysicalProfile:
    """One engine's hardware, workload and disturbances. Counter resets and scrape gaps are
    times (and spans) since the engine's start. Its pod's host memory (the working set the
    operator reads through Prometheus) follows `memory`, plus `memory_growth`'s leak."""

    hardware: Hardware = DEFAULT_HARDWARE
    mix: RequestMix = DEFAULT_MIX
    driver: Driver = field(default_factory=Driver)
    shifts: Shifts = field(default_factory=Shifts)
    fragmentation: Fragmentation | None = None
    counter_resets_at: tuple[float, ...] = ()
    gaps: tuple[tuple[float, float], ...] = ()
    noise: float = 0.03
    memory: HostMemory = field(default_factory=HostMemory)
    memory_growth: MemoryGrowth | None = None
    # No fault: the first wake at or after this age leaves sleep level 1's pinned weight copies
    # in PyTorch's pinned-host cache for good (vllm #16663), one step of the weights' size.
    memory_pinned_from: float = math.inf

    def loss_at(self, age: float) -> float:
        """The share of KV blocks lost to fragmentation at `age`."""
        return self.fragmentation.at(age) if self.fragmentation is not None else 0.0

    def mix_at(self, age: float) -> RequestMix:
        """The request mix the driver offers at `age`, shifts applied."""
        shifts = self.shifts
        after = shifts.mix_after is not None and age >= shifts.mix_change_at
        mix = shifts.mix_after if after and shifts.mix_after is not None else self.mix
        growth = 1 + shifts.response_growth_per_day * max(0.0, age) / DAY
        end = shifts.long_prompts_at + shifts.long_prompts_for
        factor = shifts.long_prompt_factor if shifts.long_prompts_at <= age < end else 1.0
        if growth == 1 and factor == 1:
            return mix
        return RequestMix(
            prompt_tokens=mix.prompt_tokens * factor,
            generation_tokens=mix.generation_tokens * growth,
            generation_cv=mix.generation_cv,
            shared_prefix=mix.shared_prefix / factor,
        )
