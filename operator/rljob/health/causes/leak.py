"""KVCacheLeak: KV capacity that no request holds (docs/architecture.md section 7, issue 32).

vLLM's block pool counts as used only blocks some request references: cached blocks nobody
references sit on the free queue (vllm/v1/core/block_pool.py `get_usage`: 1 - free / (blocks - 1)),
and its blocks are fixed-size, so the pool does not fragment externally. A healthy idle engine
therefore reads 0 % usage whatever its prefix cache holds (bench/vllm_core/README.md, checked
step by step by tests/upstream/vllm/test_kv_core.py). Blocks that a finished request never gave
back show in two shapes, both seen in the real core's `leak` trace:

- idle floor: awake, nothing running or waiting, and usage above `idle_floor` at every idle
  reading (the real core reads exactly the leaked share);
- wedged queue: nothing running, requests waiting, usage at least `wedge_usage`, for `wedge_for`:
  the FCFS head of the queue no longer fits in the blocks left (in the trace 0 running, 112
  waiting, 99.6 % usage from then on). A healthy engine cannot hold it: a preempted request frees
  its blocks, so with nothing running the blocks are held by nobody.

SGLang's `token_usage` also counts evictable radix-cache tokens as free; its gauges are written
only when the scheduler logs, so samples whose gauges did not change are no reading here.
"""

from __future__ import annotations

from dataclasses import dataclass

from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.health.causes.cause import CauseDetector, SeriesState
from rljob.health.causes.engines import is_stale
from rljob.health.evaluation import (
    KV_LEAK,
    Evaluation,
    Evidence,
    finding,
    format_duration,
    healthy,
    insufficient,
)
from rljob.health.samples import EngineSample
from rljob.vocabulary.enums import FailureReason

IDLE_FLOOR = 0.05
IDLE_READINGS = 2
WEDGE_USAGE = 0.95
WEDGE_SECONDS = 60.0
IDLE_FLOOR_CAUSE = "idle_floor"
WEDGED_CAUSE = "wedged_queue"


@dataclass(frozen=True, slots=True)
class KVLeakConfig:
    """When an engine's KV usage says blocks leaked; `interval` is the job's evaluation interval."""

    interval: float = 30.0
    # A healthy vLLM V1 engine reads exactly 0 while idle; the floor leaves room for rounding.
    idle_floor: float = IDLE_FLOOR
    idle_readings: int = IDLE_READINGS
    wedge_usage: float = WEDGE_USAGE
    wedge_for: float = WEDGE_SECONDS

    @classmethod
    def from_health(cls, health: Health) -> KVLeakConfig:
        interval = parse_duration(health.interval)
        return cls(interval=interval, wedge_for=max(WEDGE_SECONDS, 2 * interval))


def idle_reading(sample: EngineSample) -> bool:
    """Awake, not paused, nothing running or waiting, usage known."""
    return sample.serving and not sample.pending and sample.kv_usage is not None


def wedged_reading(sample: EngineSample, config: KVLeakConfig) -> bool:
    usage = sample.kv_usage
    return (
        sample.serving
        and sample.running == 0
        and sample.waiting > 0
        and usage is not None
        and usage >= config.wedge_usage
    )


class _LeakState(SeriesState):
    __slots__ = ("config", "high_idle", "high_idle_since", "idle_usage", "wedged_since")

    def __init__(self, config: KVLeakConfig) -> None:
        super().__init__(config.interval)
        self.config = config
        self.high_idle = 0  # consecutive idle readings above the floor
        self.high_idle_since: float | None = None
        self.idle_usage: float | None = None
        self.wedged_since: float | None = None

    def add(self, sample: EngineSample) -> None:
        accepted = self.accept(sample)
        if accepted is None:
            return  # dropped: garbage, a duplicate, out of order or too close
        previous, current, _ = accepted
        if previous is not None and _gauges_unchanged(previous, current):
            self.wedged_since = None  # SGLang logged nothing: no reading either way
            return
        self._idle(current)
        self._wedge(current)

    def _idle(self, sample: EngineSample) -> None:
        if not idle_reading(sample):
            return
        usage = sample.kv_usage
        assert usage is not None
        self.idle_usage = usage
        if usage < self.config.idle_floor:
            self.high_idle, self.high_idle_since = 0, None
            return
        self.high_idle += 1
        if self.high_idle_since is None:
            self.high_idle_since = sample.t

    def _wedge(self, sample: EngineSample) -> None:
        if not wedged_reading(sample, self.config):
            self.wedged_since = None
        elif self.wedged_since is None:
            self.wedged_since = sample.t


def _gauges_unchanged(previous: EngineSample, current: EngineSample) -> bool:
    return current.gauges is not None and previous.gauges == current.gauges


class KVLeakDetector(CauseDetector[_LeakState, KVLeakConfig]):
    """Leaked KV capacity for the engines of one role of one job."""

    detector = KV_LEAK

    def __init__(self, config: KVLeakConfig) -> None:
        super().__init__(config, _LeakState)

    def _judge(self, target: str, state: _LeakState, now: float) -> Evaluation:
        last = state.series.last
        if last is None or is_stale(last.t, now, self.config.interval):
            return self.no_recent_metrics(target)
        if last.kv_usage is None:
            return insufficient(KV_LEAK, target, f"{target}: no KV cache usage exported")
        wedged_for = last.t - state.wedged_since if state.wedged_since is not None else 0.0
        if state.wedged_since is not None and wedged_for >= self.config.wedge_for:
            return _wedged(target, last, wedged_for)
        if state.high_idle >= self.config.idle_readings and state.high_idle_since is not None:
            return _idle_floor(target, last, state)
        return healthy(KV_LEAK, target, _healthy_message(target, state), _evidence(last))


def _evidence(last: EngineSample) -> Evidence:
    evidence: Evidence = {"running": last.running, "waiting": last.waiting}
    if last.kv_usage is not None:
        evidence["kv_usage"] = last.kv_usage
    return evidence


def _healthy_message(target: str, state: _LeakState) -> str:
    if state.idle_usage is None:
        return f"{target}: no idle reading yet; no queue wedged on a full KV cache"
    return f"{target} read {state.idle_usage:.1%} KV usage when last idle; no queue wedged"


def _wedged(target: str, last: EngineSample, wedged_for: float) -> Evaluation:
    usage = last.kv_usage or 0.0
    message = (
        f"{target} leaked KV capacity: queue wedged for {format_duration(wedged_for)} with "
        f"{last.waiting:.0f} waiting, nothing running and KV usage {usage:.1%}: blocks no "
        "running request holds were never freed, so the head of the queue no longer fits"
    )
    evidence = {**_evidence(last), "cause": WEDGED_CAUSE, "for_seconds": wedged_for}
    return finding(KV_LEAK, target, FailureReason.KV_CACHE_LEAK, message, evidence)


def _idle_floor(target: str, last: EngineSample, state: _LeakState) -> Evaluation:
    since = state.high_idle_since
    assert since is not None and state.idle_usage is not None
    held_for = last.t - since
    message = (
        f"{target} leaked KV capacity: {state.idle_usage:.1%} of its KV cache held while idle "
        f"(awake, nothing running or waiting) at its last {state.high_idle} idle readings over "
        f"{format_duration(held_for)}; a healthy engine holds no blocks when idle, so finished "
        "requests' blocks were never freed"
    )
    evidence = {
        **_evidence(last),
        "cause": IDLE_FLOOR_CAUSE,
        "idle_kv_usage": state.idle_usage,
        "idle_readings": float(state.high_idle),
        "for_seconds": held_for,
    }
    return finding(KV_LEAK, target, FailureReason.KV_CACHE_LEAK, message, evidence)
