"""The RL rollout workload the traces drive the real core with, and the simulated host memory.

GRPO-style: every training step draws `prompts_per_step` prompts and asks for K samples of each,
all sharing the prompt (and a chat-template prefix every prompt shares), with long-tailed
response lengths (lognormal, capped at the response budget). The engine limits are verl's
rollout defaults (verl/trainer/config/rollout/rollout.yaml @005f2732: gpu_memory_utilization
0.5, max_num_seqs 1024, max_num_batched_tokens 8192, prefix caching and chunked prefill on).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace

GIB = 1 << 30
KIB = 1 << 10
VOCAB = 128_256  # Llama 3's tokenizer


@dataclass(frozen=True)
class EngineShape:
    num_gpu_blocks: int
    block_size: int = 16
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    # The tiny Qwen2 config the core is built from allows 4096 positions.
    max_model_len: int = 4096


# 0.5 x 80 GiB (verl's gpu_memory_utilization) - 14.96 GiB of BF16 weights - 2.5 GiB for
# activations and CUDA graphs (an assumption) = 22.5 GiB of KV at 128 KiB a token (cost.py):
# 184,320 tokens, 11,520 blocks of 16.
H100_HALF = EngineShape(num_gpu_blocks=11_520)


@dataclass(frozen=True)
class Workload:
    prompts_per_step: int = 64
    samples_per_prompt: int = 8
    system_tokens: int = 64  # chat template + instruction, the same for every prompt
    prompt_median: float = 160.0
    prompt_sigma: float = 0.5
    prompt_cap: int = 960
    response_median: float = 600.0
    response_sigma: float = 0.9
    response_cap: int = 3072
    train_seconds: float = 30.0  # the trainer's step, the engine idle (or asleep) meanwhile
    sync_seconds: float = 5.0  # weights pushed to the engine, generation paused

    def shifted(self) -> Workload:
        """The load shift: longer prompts, twice the samples of half as many prompts."""
        return replace(
            self,
            prompts_per_step=self.prompts_per_step // 2,
            samples_per_prompt=self.samples_per_prompt * 2,
            prompt_median=self.prompt_median * 4,
        )

    def header(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Group:
    """One prompt and its K samples' response lengths (max_tokens, ignore_eos)."""

    prompt_id: int
    prompt: list[int]
    response_lengths: list[int]


class Prompts:
    """Draws prompt groups from one seeded stream."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.drawn = 0

    def group(self, workload: Workload) -> Group:
        system = [(7 * i + 11) % VOCAB for i in range(workload.system_tokens)]
        length = self._lognormal(workload.prompt_median, workload.prompt_sigma, workload.prompt_cap)
        question = [self.rng.randrange(256, VOCAB) for _ in range(length)]
        responses = [
            self._lognormal(
                workload.response_median, workload.response_sigma, workload.response_cap
            )
            for _ in range(workload.samples_per_prompt)
        ]
        self.drawn += 1
        return Group(self.drawn, system + question, responses)

    def _lognormal(self, median: float, sigma: float, cap: int) -> int:
        return max(1, min(cap, round(self.rng.lognormvariate(math.log(median), sigma))))


@dataclass(frozen=True)
class HostMemory:
    """The container working set the operator reads from cAdvisor: simulated, not from vLLM."""

    # PR #44490 (the fix of vllm #44175): the reporter's engine started at ~6.0 GiB host RSS.
    base_bytes: int = 6 * GIB
    # Assumption: request state (Request, RequestState, outputs) held while a request is in flight.
    per_in_flight_bytes: int = 48 * KIB
    # Sleep level 1 offloads the weights to host memory (vllm/v1/engine/core.py sleep()).
    offloaded_weight_bytes: int = 16_060_000_000
    # The memory-growth fault: bytes never returned per finished request. Reported leaks range
    # from ~1.4-2.3 KB a request (vllm #52089) to ~25 MB (intel/llm-scaler #590); this is chosen
    # to show within a half-hour trace, as #44175 / SGLang #5958, #6914 grow over hours.
    leak_bytes_per_request: int = 256 * KIB

    def header(self) -> dict[str, object]:
        return asdict(self)
