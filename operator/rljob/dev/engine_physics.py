"""Physical rollout engines for the KV-cache drift benchmark and unit tests: pure, seeded, no I/O.

A mean-field model of one vLLM engine (the code is in rljob.dev.physics). A decode step of B
running sequences with mean context c takes fixed + per_seq B + per_ctx B c seconds; the engine
decodes B tokens a step, less the share of each second that chunked prefill of admitted prompts
takes. B is the offered load capped by max_num_seqs and by the sequences the usable KV blocks
hold; in-flight context is length-biased, prompt + generation (1 + cv^2) / 2. The fragmentation
fault leaks a growing share of blocks: they still count in kv_usage, so the batch shrinks, the
queue grows, preemptions rise and fewer cached prefixes survive. Workload shifts (longer
responses, a long-prompt phase, a new prompt mix, a slower node) also slow an engine, through
the same physics, with no fault: `throughput_ratio` (the ground truth) stays 1.0 for them.

Drivers: `async` keeps `concurrency` requests in flight; `sync` submits a batch, drains it (a tail
with an empty queue), sleeps while the trainer trains and pauses for the weight sync. The default
concurrency (256) and batch (1,024) exceed the ~180 sequences of the default mix (1,024-token
prompts, 2,048-token answers, cv 0.6) that the default KV cache holds, so a healthy engine runs
KV-bound with a queue, the regime in which fragmentation costs throughput at all. There the step
is dominated by reading the batch's KV, so throughput barely depends on B: losing 30% of the
blocks costs only ~7% of throughput, and `loss_for_drop` finds the loss for a wanted drop.

Sourced (rljob.dev.physics.hardware says where from): KV bytes per token and capacity, block size,
max_num_seqs, and the three step costs and the prefill cost, from Llama-3.1-8B's architecture,
H100 bandwidth and FLOPS, and published vLLM benchmark figures. Modelling choices: the request
mix and driver defaults, the additive step, half a block wasted per sequence, the preemption
probability (0.02 a finished request, x (1 + 20 loss), x response / 2,048 tokens), cache
survival (1 - loss)^2, 3% multiplicative noise, prefill not shortened by prefix hits, no
recompute cost for preemptions, and no prefill burst when a sync batch arrives. Host memory
(the pod's working set) is rljob.dev.host_memory's model: a base, the weights while asleep, the
running batch's state, and the `MemoryGrowth` fault's leak.
"""

from rljob.dev.physics.engine import Phase, PhysicalEngine, physical_fleet
from rljob.dev.physics.hardware import DEFAULT_HARDWARE, Hardware
from rljob.dev.physics.model import OperatingPoint, loss_for_drop, operating_point
from rljob.dev.physics.workload import (
    DEFAULT_MIX,
    Driver,
    Fragmentation,
    MemoryGrowth,
    PhysicalProfile,
    RequestMix,
    Shifts,
)

__all__ = [
    "DEFAULT_HARDWARE",
    "DEFAULT_MIX",
    "Driver",
    "Fragmentation",
    "Hardware",
    "MemoryGrowth",
    "OperatingPoint",
    "Phase",
    "PhysicalEngine",
    "PhysicalProfile",
    "RequestMix",
    "Shifts",
    "loss_for_drop",
    "operating_point",
    "physical_fleet",
]
