"""The drift detector of one peer group: the engines of one role of one job, observed, restarted,
forgotten, summarized into status and restored from it, and evaluated together."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from rljob.api.status import ENGINE_HEALTH_MAX_AGE, MAX_ENGINE_HEALTH, EngineHealth
from rljob.health.drift.config import DriftConfig
from rljob.health.drift.engine import EngineState
from rljob.health.drift.judge import judge
from rljob.health.drift.measures import Baseline, WindowStats
from rljob.health.drift.summary import Seed, from_summary, to_summary
from rljob.health.evaluation import KV_DRIFT, Evaluation, format_duration, healthy
from rljob.health.samples import EngineSample
from rljob.vocabulary.enums import RoleName


class KVDriftDetector:
    """Drift detection for the engines of one role of one job (the peer group)."""

    def __init__(self, config: DriftConfig, role: RoleName = RoleName.ROLLOUT) -> None:
        self.config = config
        self.role = role
        self._engines: dict[str, EngineState] = {}
        # Restored summaries of engines not observed yet; applied at their first sample.
        self._seeds: dict[str, Seed] = {}

    @property
    def targets(self) -> list[str]:
        return sorted(self._engines)

    def observe(self, target: str, sample: EngineSample) -> None:
        state = self._engines.get(target)
        if state is None:
            state = self._engines[target] = EngineState(self.config)
            if (seed := self._seeds.pop(target, None)) is not None:
                state.seed(seed)
        state.add(sample, self.config)

    def note_restart(self, target: str, at: float) -> None:
        """The engine was restarted at `at`: a new baseline after warm-up, no finding within
        `cooldown`, and samples from before the restart are ignored."""
        state = EngineState(self.config)
        state.cooldown_until = at + self.config.cooldown
        state.not_before = at
        self._engines[target] = state
        self._seeds.pop(target, None)

    def forget(self, target: str) -> None:
        self._engines.pop(target, None)
        self._seeds.pop(target, None)

    def retain(self, targets: Collection[str]) -> None:
        for target in [name for name in self._engines if name not in targets]:
            del self._engines[target]
        self._seeds = {name: seed for name, seed in self._seeds.items() if name in targets}

    def summaries(self, now: float) -> list[EngineHealth]:
        """Warmed-up engines' baselines and cooldowns for status.health.engines[], by pod name;
        restored engines not observed since keep the time their summary was saved."""
        seeds = {
            target: (seed, now)
            for target, state in self._engines.items()
            if (seed := state.as_seed()) is not None
        }
        for target, seed in self._seeds.items():
            if now - seed.saved_at <= ENGINE_HEALTH_MAX_AGE.total_seconds():
                seeds.setdefault(target, (seed, seed.saved_at))
        return [
            to_summary(target, self.role, seed, updated_at, now)
            for target, (seed, updated_at) in sorted(seeds.items())[:MAX_ENGINE_HEALTH]
        ]

    def restore(self, summaries: Iterable[EngineHealth], now: float) -> None:
        """Seeds engines from summaries a previous operator saved: a restored engine is judged
        against its saved baseline from its first sample on, cooldown kept. Summaries of other
        detectors or roles, stale ones and those of pods never observed (gone) have no effect;
        engines without one warm up as usual."""
        for summary in summaries:
            seed = from_summary(summary, self.role, now)
            if seed is None:
                continue
            state = self._engines.get(summary.pod)
            if state is None:
                self._seeds[summary.pod] = seed
            else:
                state.seed(seed)

    def baseline(self, target: str) -> Baseline | None:
        state = self._engines.get(target)
        return state.baseline if state is not None else None

    def retained_values(self) -> int:
        """Numbers held across all engines (intervals and warm-up rates): bounded per engine."""
        return sum(state.retained_values() for state in self._engines.values())

    def evaluate(self, now: float) -> list[Evaluation]:
        stats = {
            target: state.window_stats(self.config, now) for target, state in self._engines.items()
        }
        comparable = {
            target: throughput
            for target, state in self._engines.items()
            if state.baseline is not None
            and stats[target].covered()
            and (throughput := stats[target].throughput) is not None
        }
        return [
            self._evaluate_engine(target, stats[target], comparable, now)
            for target in sorted(self._engines)
        ]

    def _evaluate_engine(
        self, target: str, stats: WindowStats, comparable: dict[str, float], now: float
    ) -> Evaluation:
        state = self._engines[target]
        peers = [throughput for name, throughput in comparable.items() if name != target]
        evaluation = judge(target, state, stats, peers, self.config)
        if evaluation.is_finding and now < state.cooldown_until:
            remaining = format_duration(state.cooldown_until - now)
            return healthy(
                KV_DRIFT,
                target,
                f"{evaluation.message}; not acted on: cooldown for another {remaining}",
                {**evaluation.evidence, "suppressed": "cooldown"},
            )
        return evaluation
