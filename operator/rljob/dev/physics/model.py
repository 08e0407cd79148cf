"""The mean-field engine: the batch a KV cache admits, the decode rate it gives, and the prefix
cache and preemption symptoms of fragmentation. Pure functions of hardware, mix and lost share.

Modelling choices (not sourced): a finished request was preempted with probability
PREEMPTION_BASE x (1 + PREEMPTION_LOSS_GAIN x loss) x (response / PREEMPTION_REFERENCE_TOKENS),
and only while the batch is KV-bound; cached prefixes survive as (1 - loss)^CACHE_SURVIVAL_POWER.
Prefill is charged for every prompt token of the requests admitted (prefix hits do not shorten
it here), and a preemption costs no recompute, so the fault costs throughput only through the
batch it no longer fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rljob.dev.physics.hardware import Hardware
from rljob.dev.physics.workload import PhysicalProfile, RequestMix

PREEMPTION_BASE = 0.02
PREEMPTION_LOSS_GAIN = 20.0
PREEMPTION_REFERENCE_TOKENS = 2048.0
CACHE_SURVIVAL_POWER = 2
BISECTION_STEPS = 60


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """What an engine does at one offered load: `running` sequences (the rest wait), one decode
    step's seconds, decode tokens/s net of prefill, and the KV usage gauge."""

    running: float
    step_seconds: float
    decode_rate: float
    kv_bound: bool
    kv_usage: float


def operating_point(
    hardware: Hardware, mix: RequestMix, offered: float, loss: float, *, admitting: bool
) -> OperatingPoint:
    """The engine with `offered` requests and a `loss` share of its KV blocks leaked. While
    `admitting`, finished requests are replaced and their prompts' prefill takes its share of
    each second (chunked prefill); a draining batch admits nothing."""
    context = mix.context_tokens
    capacity = hardware.kv_capacity_blocks
    lost = capacity * loss
    per_sequence = hardware.blocks_per_sequence(context)
    fits = math.floor((capacity - lost) / per_sequence)
    wanted = min(offered, hardware.max_num_seqs)
    running = max(0.0, min(wanted, fits))
    step = hardware.step_seconds(running, context)
    rate = running / step
    if admitting and rate > 0:
        prefill_share = rate / mix.generation_tokens * mix.prompt_tokens
        rate /= 1 + prefill_share * hardware.prefill_seconds_per_token
    return OperatingPoint(
        running=running,
        step_seconds=step,
        decode_rate=rate,
        kv_bound=fits < wanted,
        kv_usage=min(1.0, (running * per_sequence + lost) / capacity),
    )


def prefix_hit_rate(mix: RequestMix, loss: float) -> float:
    """Share of prompt tokens found cached: the shareable share, times the cached prefixes that
    survive in the free blocks leaked ones no longer leave them."""
    return mix.shared_prefix * (1 - loss) ** CACHE_SURVIVAL_POWER


def preemption_probability(mix: RequestMix, loss: float) -> float:
    """Chance a finished request was preempted on the way, when the batch is KV-bound: longer
    responses grow more after admission, and leaked blocks leave less room to grow into."""
    length = mix.generation_tokens / PREEMPTION_REFERENCE_TOKENS
    return min(1.0, PREEMPTION_BASE * (1 + PREEMPTION_LOSS_GAIN * loss) * length)


def decode_ratio(hardware: Hardware, mix: RequestMix, offered: float, loss: float) -> float:
    """Decode throughput with `loss` over that without it, at the same load and mix."""
    healthy = operating_point(hardware, mix, offered, 0.0, admitting=True).decode_rate
    if healthy <= 0:
        return 1.0
    return operating_point(hardware, mix, offered, loss, admitting=True).decode_rate / healthy


def throughput_ratio(profile: PhysicalProfile, age: float) -> float:
    """Ground truth at `age`: what the fault leaves of decode throughput at the driver's full
    load (for `sync`, the saturated part of a generate phase) and the mix of that time."""
    loss = profile.loss_at(age)
    if loss <= 0:
        return 1.0
    return decode_ratio(profile.hardware, profile.mix_at(age), profile.driver.full_load, loss)


def loss_for_drop(profile: PhysicalProfile, drop: float) -> float:
    """The plateau loss that makes throughput_ratio 1 - `drop` at the profile's starting mix and
    full load, by bisection (the ratio falls as loss grows, in steps as whole sequences go)."""
    if not 0 <= drop < 1:
        raise ValueError(f"drop must be in [0, 1): {drop}")
    target = 1 - drop
    mix, load = profile.mix_at(0.0), profile.driver.full_load

    def miss(loss: float) -> float:
        return decode_ratio(profile.hardware, mix, load, loss) - target

    low, high = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if miss(middle) <= 0:
            high = middle
        else:
            low = middle
    # The ratio steps at the boundary found: take the side of the step nearer the target.
    return low if abs(miss(low)) < abs(miss(high)) else high
