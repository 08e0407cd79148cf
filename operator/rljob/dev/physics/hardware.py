"""A rollout engine's hardware: KV-cache capacity and the cost of a decode step and of prefill.

Where the default numbers come from (an 8B Llama-architecture model in BF16 on one H100 80 GB SXM,
vLLM defaults):

- KV bytes per token: 2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes = 128 KiB,
  from Llama-3.1-8B's config.json; the Hugging Face Llama 3.1 blog lists the same 0.125 GB per
  1k tokens (huggingface.co/blog/llama31, "Inference memory requirements").
- KV capacity, about 440,000 tokens: the GPU exposes 79.2 GiB; vLLM's default
  gpu_memory_utilization 0.9 leaves 71.3 GiB; the weights take 15.0 GiB ("Loading model weights
  took 14.9888 GB" for Llama-3.1-8B, vllm-project/vllm#10517) and the profiled activation peak and
  non-torch memory about 2.5 GiB (same log, a 24 GB card), so 53.8 GiB / 128 KiB = 440k tokens.
- block_size 16 and max_num_seqs 256: vLLM's defaults (Lambda's vLLM benchmark also ran 256).
- step_fixed_seconds 6.5 ms: the 16.1 GB of weights are read once per decode step; at the H100's
  3.35 TB/s that is 4.8 ms, and batch-1 decode reaches about 75% of the bandwidth roofline
  (77% measured for this model on an A100: johnmusgrave.com "vLLM throughput-latency sweep").
  Lambda measured a 7.6 ms median TPOT for Llama-3-8B on one H100 at 10 requests
  (LambdaLabsML/vllm-benchmark, results/prompt_10/1xH100-80GB-SXM, vLLM 0.5.4 with CPU overhead).
- step_per_context_token_seconds 5.2e-8 s: attention reads each running sequence's 128 KiB per
  context token every step, at the same 75% of 3.35 TB/s.
- step_per_seq_seconds 4.0e-5 s: the GEMMs cost 2 x 8.03e9 FLOP per sequence per step, about 40%
  of the H100's 989 dense BF16 TFLOPS. With the two terms above this gives about 21 ms a step at
  256 sequences of ~300-token ShareGPT contexts; Lambda's benchmark_v0.md reports 8,088 output
  tokens/s and a 25.6 ms median TPOT there (vLLM 0.6.0, max-num-seqs 256), prefill chunks included.
- prefill_seconds_per_token 3.0e-5 s: 2 x 8.03e9 FLOP per prompt token at about 55% of the
  989 TFLOPS (compute-bound prefill); the utilisation is a modelling choice.

Modelling choices rather than sources: the step is the sum of its three costs (real kernels
overlap memory and compute, so this overstates the step a little at mid batch), and a sequence
wastes half a block on average (PagedAttention wastes only inside a sequence's last block).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# PagedAttention's only waste is the unfilled part of each sequence's last block: half on average.
LAST_BLOCK_WASTE = 0.5


@dataclass(frozen=True, slots=True)
class Hardware:
    """One engine's GPU as the decode loop sees it. Times are seconds."""

    kv_capacity_tokens: int
    block_size: int
    max_num_seqs: int
    step_fixed_seconds: float
    step_per_seq_seconds: float
    step_per_context_token_seconds: float
    prefill_seconds_per_token: float

    @property
    def kv_capacity_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    def blocks_per_sequence(self, context: float) -> float:
        """KV blocks a sequence of `context` tokens holds, its last block half empty."""
        return context / self.block_size + LAST_BLOCK_WASTE

    def step_seconds(self, batch: float, context: float) -> float:
        """One decode step of `batch` sequences with a mean context of `context` tokens."""
        per_sequence = self.step_per_seq_seconds + context * self.step_per_context_token_seconds
        return self.step_fixed_seconds + batch * per_sequence

    def slower(self, factor: float) -> Hardware:
        """A slower node: every step and prefill cost times `factor`, the same KV capacity."""
        return replace(
            self,
            step_fixed_seconds=self.step_fixed_seconds * factor,
            step_per_seq_seconds=self.step_per_seq_seconds * factor,
            step_per_context_token_seconds=self.step_per_context_token_seconds * factor,
            prefill_seconds_per_token=self.prefill_seconds_per_token * factor,
        )


DEFAULT_HARDWARE = Hardware(
    kv_capacity_tokens=440_000,  # (79.2 GiB x 0.9 - 15.0 GiB weights - 2.5 GiB) / 128 KiB a token
    block_size=16,  # vLLM's default --block-size
    max_num_seqs=256,  # vLLM's default --max-num-seqs
    step_fixed_seconds=6.5e-3,  # 16.1 GB of weights at ~75% of the H100's 3.35 TB/s
    step_per_seq_seconds=4.0e-5,  # 2 x 8.03e9 FLOP a sequence at ~40% of 989 dense BF16 TFLOPS
    step_per_context_token_seconds=5.2e-8,  # 128 KiB of KV a context token at ~75% of 3.35 TB/s
    prefill_seconds_per_token=3.0e-5,  # 2 x 8.03e9 FLOP a prompt token at ~55% of 989 TFLOPS
)
