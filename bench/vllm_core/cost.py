"""The one simulated clock of the traces: how long a GPU engine step would take.

A roofline for Llama-3.1-8B-Instruct (BF16) on one H100 SXM5 80 GB: a step reads the weights once
and the KV cache of every scheduled request's context (memory bound), or does 2 x params FLOPs per
scheduled token (compute bound, prefill chunks), whichever is longer. Attention FLOPs, CUDA-graph
padding, sampling and the scheduler's own CPU time are not modelled apart: the bandwidth
efficiency is calibrated on a measured batch-1 step, which holds them all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CostModel:
    # meta-llama/Llama-3.1-8B-Instruct model card: 8.03 B parameters, BF16 (2 bytes each).
    params: float = 8.03e9
    weight_bytes: float = 8.03e9 * 2
    # Its config.json: 32 layers x 8 KV heads x head_dim 128 (4096 / 32), K and V, 2 bytes.
    kv_bytes_per_token: int = 2 * 32 * 8 * 128 * 2
    # NVIDIA H100 SXM5 datasheet: HBM3 3.35 TB/s, BF16 tensor core 989 TFLOPS dense.
    hbm_bytes_per_second: float = 3.35e12
    bf16_flops: float = 989e12
    # Calibrated: 16.06 GB / 3.35 TB/s = 4.79 ms against a measured 6.48 ms p50 TPOT at
    # concurrency 1 (InferenceBench concurrency sweep, H100-80GB-HBM3, vLLM 0.21.0, Llama-3.1-8B-
    # Instruct: yobitelcomm.github.io/bench/recipes/concurrency-sweep) = 0.74; the same model on an
    # A100 40 GB under vLLM 0.23.0 decodes at about 77 % of the bandwidth ceiling at batch 1
    # (johnmusgrave.com/p/vllm-throughput-latency-sweep-on).
    bandwidth_efficiency: float = 0.74
    # Assumption, not measured here: the share of peak FLOPS a prefill chunk's GEMMs reach.
    prefill_mfu: float = 0.5

    def step_seconds(self, context_tokens: int, scheduled_tokens: int) -> float:
        """One engine step: `context_tokens` is the KV every scheduled request attends over (its
        computed tokens after the step), `scheduled_tokens` the tokens computed in it."""
        read = self.weight_bytes + context_tokens * self.kv_bytes_per_token
        memory = read / (self.hbm_bytes_per_second * self.bandwidth_efficiency)
        compute = 2 * self.params * scheduled_tokens / (self.bf16_flops * self.prefill_mfu)
        return max(memory, compute)

    def header(self) -> dict[str, object]:
        return {
            "model": "roofline: max(weights + context KV read / (HBM x efficiency), "
            "2 x params x tokens / (BF16 FLOPS x MFU))",
            "constants": asdict(self),
            "sources": {
                "params, weight_bytes": "Llama-3.1-8B-Instruct model card: 8.03 B parameters, BF16",
                "kv_bytes_per_token": "Llama-3.1-8B config.json: 32 layers, 8 KV heads, dim 128",
                "hbm_bytes_per_second, bf16_flops": "NVIDIA H100 SXM5 datasheet",
                "bandwidth_efficiency": "6.48 ms p50 TPOT at concurrency 1, Llama-3.1-8B, "
                "H100 80GB HBM3, vLLM 0.21.0 (yobitelcomm.github.io/bench/recipes/"
                "concurrency-sweep); about 77 % on A100 40 GB, vLLM 0.23.0 "
                "(johnmusgrave.com/p/vllm-throughput-latency-sweep-on)",
                "prefill_mfu": "assumption",
            },
        }
