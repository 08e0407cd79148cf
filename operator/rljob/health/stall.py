"""EngineStalled and TrainerStalled: work pending, no progress (docs/architecture.md section 7).

A wedged vLLM engine keeps answering /health (vllm #39863), so an engine is judged by its token
counter: serving, requests pending, counter flat for `engineStall.timeout`. Sleep and weight-sync
pauses legitimately stop generation and reset the clock.

SGLang differs (docs/engine-fidelity.md): its completion counter is no progress evidence (it
grows only as requests finish), so without `sglang:realtime_tokens_total` progress is its
`gen_throughput` gauge; and it writes its gauges only when the scheduler logs stats, so unchanged
gauges mean paused (or idle, or wedged): such time is not judged. A wedged SGLang scheduler fails
its own /health, which runs a one-token generation (http_server.py), so the probe covers it.

The finding names what the page shows of the cause (issue 32): a page frozen in every value while
requests are shown pending (the engine core dead or deadlocked while /health answers, vllm
#39863; or no engine step since every request was aborted, vllm #29928: vLLM records its stats
only in steps, so the real core's `frozen` trace repeats every value); a queue wedged on a full KV
cache with nothing running (leaked blocks, as the real core's `leak` trace ends; the kv_leak
detector finds it sooner); else no progress. The reason stays EngineStalled: the remedy and its
timeout are the same, and the cause is in the message and the evidence's `cause`.

The trainer is judged by the SDK heartbeat. It is gated by the attempt's startup grace and by the
`waiting_for_rollouts` phase (the trainer waits on engines, whose own detectors cover them). The
`checkpointing` phase gets twice the timeout rather than none: killing a trainer mid-save wastes
the save, but a save hung on a stalled store must still end in a restart eventually.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.health.causes.engines import NEVER, STALE_SAMPLE_INTERVALS, PerEngine
from rljob.health.causes.leak import WEDGE_USAGE
from rljob.health.evaluation import (
    ENGINE_STALL,
    TRAINER_STALL,
    Evaluation,
    finding,
    format_duration,
    healthy,
    insufficient,
)
from rljob.health.samples import MAX_PLAUSIBLE_VALUE, EngineSample, EngineSeries, Interval
from rljob.vocabulary.enums import FailureReason
from rljob.vocabulary.phases import CHECKPOINTING, WAITING_FOR_ROLLOUTS

CHECKPOINTING_TIMEOUT_FACTOR = 2.0
PAGE_FROZEN_CAUSE = "page_frozen"
KV_WEDGED_CAUSE = "kv_wedged"
NO_PROGRESS_CAUSE = "no_progress"
# Every value of a sample but its time: equal in consecutive samples, the page did not change.
# The engine's own page: memory comes from elsewhere (cAdvisor, the SDK's process gauge) and
# keeps changing while the page is frozen.
_NOT_FROM_THE_PAGE = frozenset({"t", "memory_bytes", "memory_signal"})
_PAGE_FIELDS = tuple(f.name for f in fields(EngineSample) if f.name not in _NOT_FROM_THE_PAGE)


def _page(sample: EngineSample) -> tuple[object, ...]:
    return tuple(getattr(sample, name) for name in _PAGE_FIELDS)


@dataclass(frozen=True, slots=True)
class EngineStallConfig:
    timeout: float = 300.0
    interval: float = 30.0

    @classmethod
    def from_health(cls, health: Health) -> EngineStallConfig:
        return cls(
            timeout=parse_duration(health.engine_stall.timeout),
            interval=parse_duration(health.interval),
        )


def _stuck(interval: Interval, previous: EngineSample, current: EngineSample) -> bool:
    return not interval.excluded and previous.pending and current.pending and interval.tokens <= 0


class _StallState:
    __slots__ = ("flat_since", "frozen", "not_before", "series", "unchanged_since")

    def __init__(self, interval: float) -> None:
        self.series = EngineSeries(interval)
        self.flat_since: float | None = None
        self.not_before = NEVER
        self.frozen = False  # the last interval had no stats log (SGLang paused or idle)
        self.unchanged_since: float | None = None  # every page value the same since then

    def add(self, sample: EngineSample) -> None:
        previous = self.series.last
        interval = self.series.add(sample)
        if interval is None or previous is None or self.series.last is None:
            return
        current = self.series.last
        self.frozen = interval.frozen
        if _stuck(interval, previous, current):
            if self.flat_since is None:
                self.flat_since = interval.start
        else:
            self.flat_since = None
        if _page(previous) != _page(current):
            self.unchanged_since = None
        elif self.unchanged_since is None:
            self.unchanged_since = interval.start


class EngineStallDetector(PerEngine[_StallState]):
    """Stall detection for the engines of one role of one job."""

    def __init__(self, config: EngineStallConfig) -> None:
        super().__init__(lambda: _StallState(self.config.interval))
        self.config = config

    def evaluate(self, now: float) -> list[Evaluation]:
        return self.evaluate_each(lambda target, state: self._evaluate_engine(target, state, now))

    def _evaluate_engine(self, target: str, state: _StallState, now: float) -> Evaluation:
        last = state.series.last
        # Not `is_stale`: an engine is given the timeout too, and a NaN age is not stale here.
        stale_after = max(self.config.timeout, STALE_SAMPLE_INTERVALS * self.config.interval)
        if last is None or now - last.t > stale_after:
            return insufficient(ENGINE_STALL, target, f"{target}: no recent metrics")
        load = f"{last.running:.0f} running, {last.waiting:.0f} waiting"
        if last.sleeping is True:
            return healthy(ENGINE_STALL, target, f"{target} asleep")
        if last.paused is True:
            return healthy(ENGINE_STALL, target, f"{target} paused for a weight sync")
        if state.frozen:
            return healthy(
                ENGINE_STALL,
                target,
                f"{target} logged no stats since the last sample (paused or idle; its /health "
                "probe judges a wedge)",
            )
        if not last.pending:
            return healthy(ENGINE_STALL, target, f"{target} idle: no requests")
        flat_for = last.t - state.flat_since if state.flat_since is not None else 0.0
        evidence: dict[str, float | str] = {
            "flat_seconds": flat_for,
            "running": last.running,
            "waiting": last.waiting,
        }
        if last.kv_usage is not None:
            evidence["kv_usage"] = last.kv_usage
        if flat_for < self.config.timeout:
            return healthy(ENGINE_STALL, target, f"{target} generating ({load})", evidence)
        cause, why = self._cause(state, last)
        evidence["cause"] = cause
        if state.unchanged_since is not None:
            evidence["unchanged_seconds"] = last.t - state.unchanged_since
        message = (
            f"{target} generated no tokens for {format_duration(flat_for)} while awake with "
            f"requests pending ({load}){why}"
        )
        return finding(ENGINE_STALL, target, FailureReason.ENGINE_STALLED, message, evidence)

    def _cause(self, state: _StallState, last: EngineSample) -> tuple[str, str]:
        """What the page shows of why: its evidence name and the message's clause."""
        usage = last.kv_usage
        if last.running == 0 and usage is not None and usage >= WEDGE_USAGE:
            return KV_WEDGED_CAUSE, (
                f": queue wedged with nothing running and KV usage {usage:.1%}, blocks no "
                "running request holds (leaked KV capacity)"
            )
        unchanged = last.t - state.unchanged_since if state.unchanged_since is not None else 0.0
        if unchanged >= self.config.timeout:
            return PAGE_FROZEN_CAUSE, (
                f": page frozen, every value unchanged for {format_duration(unchanged)} with "
                f"{last.running:.0f} running: engine core dead or its stats loop stuck (vllm "
                "#39863), or no engine step since every request was aborted (vllm #29928)"
            )
        return NO_PROGRESS_CAUSE, ""


@dataclass(frozen=True, slots=True)
class TrainerStallConfig:
    timeout: float = 1800.0
    startup_grace: float = 1800.0

    @classmethod
    def from_health(cls, health: Health) -> TrainerStallConfig:
        return cls(
            timeout=parse_duration(health.trainer_stall.timeout),
            startup_grace=parse_duration(health.trainer_stall.startup_grace),
        )


@dataclass(frozen=True, slots=True)
class TrainerSignals:
    """The trainer's state at one evaluation, in unix seconds.

    `heartbeat_at` is the freshest `rljob_trainer_heartbeat_timestamp_seconds` across the
    attempt's pods (see `freshest_heartbeat`): the gang is stalled only when no rank heartbeats.
    """

    pods_running: bool
    attempt_started_at: float
    heartbeat_at: float | None
    phase: str | None = None
    step: float | None = None
    # When the reading `heartbeat_at` comes from was scraped (None: taken as now). The heartbeat
    # is judged as of that moment: metrics that stopped arriving are missing data, not a stall.
    observed_at: float | None = None


def _plausible(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and 0 <= value <= MAX_PLAUSIBLE_VALUE


def freshest_heartbeat(values: Iterable[float | None]) -> float | None:
    """The newest plausible heartbeat timestamp, or None; garbage is dropped."""
    plausible = [value for value in values if value is not None and _plausible(value)]
    return max(plausible) if plausible else None


def current_phase(phase_gauges: Mapping[str, float]) -> str | None:
    """The phase whose `rljob_trainer_phase{phase}` gauge is set (the highest, if several)."""
    set_phases = [
        (value, phase)
        for phase, value in phase_gauges.items()
        if math.isfinite(value) and value > 0
    ]
    return max(set_phases)[1] if set_phases else None


class TrainerStallDetector:
    """Stall detection for one job's trainer gang. It remembers when the trainer last waited for
    rollouts, so a heartbeat that only resumes after the wait is not read as stale at once."""

    def __init__(self, config: TrainerStallConfig, target: str = "trainer") -> None:
        self.config = config
        self.target = target
        self._last_gated_at = -math.inf

    def note_restart(self, at: float) -> None:
        self._last_gated_at = -math.inf

    def evaluate(self, signals: TrainerSignals, now: float) -> Evaluation:
        target = self.target
        if not signals.pods_running:
            return insufficient(TRAINER_STALL, target, "trainer pods are not all running")
        if signals.phase == WAITING_FOR_ROLLOUTS:
            self._last_gated_at = now
            return healthy(TRAINER_STALL, target, "trainer waiting for rollouts")
        since_start = now - signals.attempt_started_at
        if since_start < self.config.startup_grace:
            return healthy(
                TRAINER_STALL,
                target,
                f"trainer within startup grace ({format_duration(since_start)} of "
                f"{format_duration(self.config.startup_grace)})",
            )
        heartbeat = signals.heartbeat_at
        if heartbeat is None or not _plausible(heartbeat):
            return insufficient(TRAINER_STALL, target, "no trainer heartbeat exported")
        observed = signals.observed_at
        if observed is not None and not now - observed <= self.config.timeout:
            age = format_duration(now - observed) if _plausible(observed) else "?"
            return insufficient(TRAINER_STALL, target, f"no trainer metrics for {age}")
        as_of = min(now, observed) if observed is not None else now
        return self._judge_heartbeat(signals, heartbeat, as_of)

    def _judge_heartbeat(self, signals: TrainerSignals, heartbeat: float, now: float) -> Evaluation:
        """The heartbeat's staleness at `now` (the time it was read, when that is known)."""
        reference = max(heartbeat, self._last_gated_at, signals.attempt_started_at)
        stale_for = now - reference
        timeout = self.config.timeout
        if signals.phase == CHECKPOINTING:
            timeout *= CHECKPOINTING_TIMEOUT_FACTOR
        phase = signals.phase or "unknown"
        evidence: dict[str, float | str] = {
            "stale_seconds": stale_for,
            "timeout_seconds": timeout,
            "phase": phase,
        }
        if signals.step is not None and _plausible(signals.step):
            evidence["step"] = signals.step
        if stale_for < timeout:
            return healthy(
                TRAINER_STALL,
                self.target,
                f"trainer heartbeat {format_duration(stale_for)} old",
                evidence,
            )
        at_step = f" at step {signals.step:.0f}" if "step" in evidence else ""
        message = (
            f"trainer heartbeat stale for {format_duration(stale_for)} (timeout "
            f"{format_duration(timeout)}) in phase {phase}{at_step}, attempt started "
            f"{format_duration(now - signals.attempt_started_at)} ago"
        )
        return finding(TRAINER_STALL, self.target, FailureReason.TRAINER_STALLED, message, evidence)
