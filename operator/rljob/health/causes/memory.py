"""EngineMemoryGrowth: a rollout engine's host memory rising steadily while it serves
(docs/architecture.md section 7).

Upstream reports host memory that grows for hours in long-running engines and that a restart
gives back: vllm #44175 (the engine's RSS linear in requests served, with a latency step after
~7 h; its mechanism, `new_block_ids` never drained, is fixed in 0.33.0 by PR #44490), vllm #50150
(the TP workers' RSS growing to the pod's 64 GiB limit, then OOMKilled), SGLang #6914 (the
scheduler process's RSS growing with every request to ~60 GB before the OOM killer). SGLang #5958
(radix-cache tensors accumulating over 7 days) and vllm PR #37428 (PyTorch's reserved-minus-
allocated fragmentation) are GPU memory: no host signal shows them.

Readings (EngineSample.memory_bytes): the pod cgroup's working set (cAdvisor through Prometheus:
every container, page cache not recently used left out) or the engine process tree's resident
memory (the rljob SDK's gauge on a plugin page). Only samples while the engine serves (awake, not
paused) count: vLLM's sleep level 1 copies the weights, the runtime buffers and the CUDA graph
pools into pinned host tensors (vllm 0.33.0 `sleep_mode_backend.py` suspend, `cumem.py` sleep),
a no-fault jump of the model's size. A warm-up after the engine starts (its first sample, an
operator restart, or its token counter starting over) is ignored: model load, CUDA graph capture
and pinned staging buffers settle in it (`warmup`, 20 minutes or two intervals).

What is judged is the lower envelope: the lowest serving reading of each `bucket` (10 minutes),
so a batch's transient request state and allocator high-water marks, which come and go with the
load, do not count. The first closed bucket after the warm-up is the baseline. A run is the
bucket minima since the envelope last fell by more than `tolerance` (1 % of the baseline, at
least 128 MiB); the growth is the run's rise since it last stood within `tolerance` of its first
minimum. It is a finding when the growth
- spans at least `rising_buckets` buckets (6: an hour),
- is at least max(25 % of the baseline, 2 GiB),
- is steady: no bucket-to-bucket step carries more than half of it, and its later half still
  carries at least a quarter of it.

Why these, against the behaviours that are no fault:
- sleep and wake: asleep readings are left out; a wake whose pinned copies PyTorch's pinned-host
  caching allocator keeps (vllm #16663; vllm PR #55206 proposes releasing them) raises the
  envelope once, by at most the weights' size: one step, more than half of any growth it could
  pass the threshold with, and then flat (the later half carries nothing).
- weight sync: in-place (NCCL, CUDA IPC) it moves no host memory; from disk it reads a new
  checkpoint through the page cache, which the working set counts only while recently used
  (cAdvisor subtracts inactive file pages), a step per sync that the kernel reclaims, not a run.
- load swings: a busier batch holds more request state and allocator arenas; the bucket minimum
  is the engine's quietest moment in 10 minutes, and a lasting load shift is one step.
- KV-cache offload to CPU (vLLM's `--kv-offloading-size`, SGLang's HiCache `--hicache-size`)
  allocates its host pool at start, inside the warm-up; a tier that fills lazily (LMCache's CPU
  backend) grows only to its configured size: a fill slower than the warm-up and larger than
  the threshold reads as growth until it is full (the runbook says how to tell).
- 25 % and 2 GiB: a healthy engine's envelope stays within a few hundred MiB of its baseline
  (tokenizer caches, arenas), while the reported leaks grow without bound; the floor keeps a
  small engine (#44175 started at 6 GiB) from being restarted over a few hundred MiB.
The container's memory limit is not read: the growth is judged against the engine's own
baseline, whatever the limit (an OOMKilled container is the container_restarts detector's).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from itertools import pairwise

from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.health.causes.cause import CauseDetector, SeriesState
from rljob.health.causes.engines import is_stale
from rljob.health.evaluation import (
    MEMORY_GROWTH,
    Evaluation,
    Evidence,
    finding,
    format_duration,
    healthy,
    insufficient,
)
from rljob.health.samples import (
    PROCESS_TREE_MEMORY,
    WORKING_SET_MEMORY,
    EngineSample,
)
from rljob.vocabulary.enums import FailureReason

GIB = float(1 << 30)
MIB = float(1 << 20)
WARMUP_SECONDS = 20 * 60.0
WARMUP_INTERVALS = 2
BUCKET_SECONDS = 10 * 60.0
# A bucket's minimum is taken over at least this many readings at long intervals.
BUCKET_INTERVALS = 4
RISING_BUCKETS = 6
MIN_GROWTH_SHARE = 0.25
MIN_GROWTH_BYTES = 2 * GIB
TOLERANCE_SHARE = 0.01
MIN_TOLERANCE_BYTES = 128 * MIB
MAX_STEP_SHARE = 0.5
LATER_HALF_SHARE = 0.25
# A run is judged over its last day at most: 144 minima and their times, 2.3 KiB an engine.
MAX_RUN_BUCKETS = 144
SIGNAL_WORDS = {
    WORKING_SET_MEMORY: "the pod's working set",
    PROCESS_TREE_MEMORY: "the engine processes' resident memory",
}
_MISSING = (
    "no host memory exported: the pod's container_memory_working_set_bytes (cAdvisor, through "
    "Prometheus) or the SDK plugin page's rljob_engine_process_tree_resident_bytes"
)


@dataclass(frozen=True, slots=True)
class MemoryGrowthConfig:
    """When an engine's host memory growth is a finding; `interval` is the job's interval."""

    interval: float = 30.0
    warmup: float = WARMUP_SECONDS
    bucket: float = BUCKET_SECONDS
    rising_buckets: int = RISING_BUCKETS
    min_growth_share: float = MIN_GROWTH_SHARE
    min_growth_bytes: float = MIN_GROWTH_BYTES
    tolerance_share: float = TOLERANCE_SHARE
    min_tolerance_bytes: float = MIN_TOLERANCE_BYTES
    max_step_share: float = MAX_STEP_SHARE
    later_half_share: float = LATER_HALF_SHARE
    max_buckets: int = MAX_RUN_BUCKETS

    @classmethod
    def from_health(cls, health: Health) -> MemoryGrowthConfig:
        interval = parse_duration(health.interval)
        return cls(
            interval=interval,
            warmup=max(WARMUP_SECONDS, WARMUP_INTERVALS * interval),
            bucket=max(BUCKET_SECONDS, BUCKET_INTERVALS * interval),
        )

    def threshold(self, baseline: float) -> float:
        return max(self.min_growth_share * baseline, self.min_growth_bytes)

    def tolerance(self, baseline: float) -> float:
        return max(self.tolerance_share * baseline, self.min_tolerance_bytes)


@dataclass(frozen=True, slots=True)
class Growth:
    """The envelope's rise in the current run: from `since` (a bucket's start) to the last
    closed bucket, over `buckets` buckets, the largest single step and what the later half
    of it rose."""

    since: float
    start_bytes: float
    end_bytes: float
    end_at: float
    buckets: int
    largest_step: float
    later_half: float

    @property
    def bytes(self) -> float:
        return self.end_bytes - self.start_bytes

    @property
    def seconds(self) -> float:
        return self.end_at - self.since

    @property
    def gib_per_hour(self) -> float:
        return self.bytes / GIB / (self.seconds / 3600) if self.seconds > 0 else 0.0


class _MemoryState(SeriesState):
    __slots__ = (
        "baseline",
        "bucket",
        "bucket_min",
        "config",
        "last_memory",
        "run_at",
        "run_min",
        "signal",
        "started",
    )

    def __init__(self, config: MemoryGrowthConfig) -> None:
        super().__init__(config.interval)
        self.config = config
        self.started: float | None = None  # the first sample since the engine (re)started
        self.last_memory: tuple[float, float] | None = None  # (t, bytes) of the newest reading
        self.signal: str | None = None
        self.baseline: float | None = None  # the first closed bucket's minimum
        self.bucket: int | None = None  # the open bucket (its index from the warm-up's end)
        self.bucket_min = math.inf
        self.run_at = array("d")  # each closed bucket's start, oldest first
        self.run_min = array("d")  # and its minimum

    def _start_over(self) -> None:
        """Forgets the envelope (not the warm-up): a new engine process, or another signal."""
        self.baseline, self.bucket, self.bucket_min = None, None, math.inf
        self.run_at, self.run_min = array("d"), array("d")

    @property
    def warm_from(self) -> float:
        return (self.started if self.started is not None else math.inf) + self.config.warmup

    def add(self, sample: EngineSample) -> None:
        accepted = self.accept(sample)
        if accepted is None:
            return  # dropped: garbage, a duplicate, out of order or too close
        _, current, interval = accepted
        if self.started is None or (interval is not None and interval.counter_reset):
            # The first sample, or the token counter started over: a new engine process.
            self.started, self.signal = current.t, None
            self._start_over()
        memory = current.memory_bytes
        if memory is None:
            return
        self.last_memory = (current.t, memory)
        if current.memory_signal != self.signal:
            self.signal = current.memory_signal
            self._start_over()  # the working set and the process tree are not comparable
        if current.serving and current.t >= self.warm_from:
            self._read(current.t, memory)

    def _read(self, t: float, memory: float) -> None:
        index = math.floor((t - self.warm_from) / self.config.bucket)
        if self.bucket is not None and index != self.bucket:
            self._close()
        if self.bucket is None or index != self.bucket:
            self.bucket, self.bucket_min = index, memory
        else:
            self.bucket_min = min(self.bucket_min, memory)

    def _close(self) -> None:
        assert self.bucket is not None
        start = self.warm_from + self.bucket * self.config.bucket
        lowest = self.bucket_min
        if self.baseline is None:
            self.baseline = lowest
        if self.run_min and lowest < self.run_min[-1] - self.config.tolerance(self.baseline):
            self.run_at, self.run_min = array("d"), array("d")  # the envelope fell
        self.run_at.append(start)
        self.run_min.append(lowest)
        if len(self.run_min) > self.config.max_buckets:
            self.run_at.pop(0)
            self.run_min.pop(0)

    def growth(self) -> Growth | None:
        """The run's rise since its envelope last stood within the tolerance of its start."""
        minima, times = self.run_min, self.run_at
        if not minima or self.baseline is None:
            return None
        level = minima[0] + self.config.tolerance(self.baseline)
        first = max(i for i, value in enumerate(minima) if value <= level)
        rising = minima[first:]
        steps = [b - a for a, b in pairwise(rising)]
        middle = len(rising) // 2
        return Growth(
            since=times[first],
            start_bytes=rising[0],
            end_bytes=rising[-1],
            end_at=times[-1],
            buckets=len(rising),
            largest_step=max(steps, default=0.0),
            later_half=rising[-1] - rising[middle],
        )


class MemoryGrowthDetector(CauseDetector[_MemoryState, MemoryGrowthConfig]):
    """Host memory growth for the engines of one role of one job."""

    detector = MEMORY_GROWTH

    def __init__(self, config: MemoryGrowthConfig) -> None:
        super().__init__(config, _MemoryState)

    def _judge(self, target: str, state: _MemoryState, now: float) -> Evaluation:
        config = self.config
        last = state.series.last
        if last is None or is_stale(last.t, now, config.interval):
            return self.no_recent_metrics(target)
        memory = state.last_memory
        if memory is None or is_stale(memory[0], now, config.interval):
            return insufficient(MEMORY_GROWTH, target, f"{target}: {_MISSING}")
        growth, baseline = state.growth(), state.baseline
        if growth is None or baseline is None:
            return _warming_up(target, state, config, now)
        evidence: Evidence = {
            "signal": state.signal or "",
            "baseline_bytes": baseline,
            "memory_bytes": growth.end_bytes,
            "growth_bytes": growth.bytes,
        }
        if _is_growth(growth, baseline, config):
            return _finding(target, growth, evidence, baseline=baseline, config=config)
        message = (
            f"{target}: host memory's lower envelope at {_gib(growth.end_bytes)} against a "
            f"baseline of {_gib(baseline)}; {_gib(growth.bytes)} of steady growth over "
            f"{growth.buckets} buckets (a finding needs {_gib(config.threshold(baseline))} over "
            f"{config.rising_buckets})"
        )
        return healthy(MEMORY_GROWTH, target, message, evidence)


def _is_growth(growth: Growth, baseline: float, config: MemoryGrowthConfig) -> bool:
    rise = growth.bytes
    return (
        growth.buckets >= config.rising_buckets
        and rise >= config.threshold(baseline)
        and growth.largest_step <= config.max_step_share * rise
        and growth.later_half >= config.later_half_share * rise
    )


def _warming_up(
    target: str, state: _MemoryState, config: MemoryGrowthConfig, now: float
) -> Evaluation:
    started = state.started if state.started is not None else now
    return insufficient(
        MEMORY_GROWTH,
        target,
        f"{target} warming up: its host memory baseline is the lowest serving reading of the "
        f"first {format_duration(config.bucket)} after {format_duration(config.warmup)}",
        {"warmup_seconds": max(0.0, now - started)},
    )


def _finding(
    target: str, growth: Growth, evidence: Evidence, *, baseline: float, config: MemoryGrowthConfig
) -> Evaluation:
    words = SIGNAL_WORDS.get(str(evidence["signal"]), "host memory")
    message = (
        f"{target}'s host memory grows: {words} rose steadily from {_gib(growth.start_bytes)} to "
        f"{_gib(growth.end_bytes)} (+{_gib(growth.bytes)}, {growth.gib_per_hour:.2f} GiB/h) "
        f"over {format_duration(growth.seconds)} while serving, against a baseline of "
        f"{_gib(baseline)}: the lowest reading of each {format_duration(config.bucket)} has not "
        f"fallen for {growth.buckets} buckets. A leak in the engine's processes (as vllm #44175, "
        "#50150, SGLang #6914), which a restart gives back"
    )
    evidence = {
        **evidence,
        "growth_gib_per_hour": growth.gib_per_hour,
        "since": growth.since,
        "for_seconds": growth.seconds,
        "rising_buckets": float(growth.buckets),
    }
    return finding(MEMORY_GROWTH, target, FailureReason.ENGINE_MEMORY_GROWTH, message, evidence)


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"
