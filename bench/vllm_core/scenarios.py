"""The traced scenarios and the two sizes they run at (standard library only)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.vllm_core.workload import H100_HALF, EngineShape, Workload

LOOPS = ("sync", "inflight", "colocated")
FAULTS = ("leak", "prefix-collapse", "frozen", "memory-growth")


@dataclass(frozen=True)
class Scenario:
    name: str
    loop: str  # one of LOOPS
    summary: str
    fault: str | None = None  # one of FAULTS
    shift: bool = False
    clear_cache: bool = True  # whether a weight sync resets the prefix cache
    onset: float = 0.4  # the fault or shift starts at this share of the trace

    def onset_seconds(self, seconds: float) -> float | None:
        return self.onset * seconds if self.fault or self.shift else None


RL = (
    "on-policy GRPO on a dedicated engine: each batch generated to its last sample, the engine "
    "idle while the trainer steps, then a weight sync (generation paused, prefix cache reset)"
)
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("rl", "sync", RL),
        Scenario(
            "rl-no-reset",
            "sync",
            "rl, but the weight syncs keep the prefix cache (pause_generation(clear_cache=False)):"
            " KV computed under the old weights is reused after every sync",
            clear_cache=False,
        ),
        Scenario(
            "weight-sync-inflight",
            "inflight",
            "asynchronous RL: a prompt batch's worth of groups kept in flight; every training "
            "step a weight sync pauses generation keeping the requests (pause mode keep), resets "
            "the prefix cache (which preempts them) and resumes",
        ),
        Scenario(
            "sleep-wake",
            "colocated",
            "colocated RL (a hybrid engine): after each batch the engine sleeps at level 1 "
            "(requests aborted, caches reset, weights offloaded) while the trainer steps and the "
            "weights sync, then wakes for the next batch",
        ),
        Scenario(
            "load-shift",
            "sync",
            "rl; from the onset prompts 4x longer and twice the samples of half as many prompts",
            shift=True,
            onset=0.5,
        ),
        Scenario(
            "leak",
            "sync",
            "rl; from the onset a quarter of the finished requests' KV blocks are never freed",
            fault="leak",
        ),
        Scenario(
            "prefix-collapse",
            "sync",
            "rl; from the onset every prefix cache lookup misses, the prompt mix unchanged",
            fault="prefix-collapse",
        ),
        Scenario(
            "frozen",
            "sync",
            "rl; at the first step after the onset with requests running, the engine core stops "
            "stepping: the page keeps its last values while requests are in flight",
            fault="frozen",
        ),
        Scenario(
            "memory-growth",
            "sync",
            "rl; from the onset the container's working set keeps a fixed amount per finished "
            "request (the simulated memory column)",
            fault="memory-growth",
        ),
    )
}


@dataclass(frozen=True)
class Preset:
    shape: EngineShape
    workload: Workload
    scrape_seconds: float
    seconds: float
    leak_fraction: float = 0.25


PRESETS: dict[str, Preset] = {
    # One H100 engine of a GRPO job (workload.py), scraped every 5 s.
    "bench": Preset(H100_HALF, Workload(), scrape_seconds=5.0, seconds=1200.0),
    # Small enough for tests/upstream/vllm/test_kv_core.py: a few seconds of CPU a scenario.
    "test": Preset(
        EngineShape(num_gpu_blocks=400, max_num_seqs=64, max_num_batched_tokens=1024),
        Workload(
            prompts_per_step=8,
            samples_per_prompt=4,
            system_tokens=32,
            prompt_median=48.0,
            prompt_sigma=0.4,
            prompt_cap=200,
            response_median=80.0,
            response_sigma=0.8,
            response_cap=400,
            train_seconds=4.0,
            sync_seconds=1.0,
        ),
        scrape_seconds=1.0,
        seconds=120.0,
    ),
}
