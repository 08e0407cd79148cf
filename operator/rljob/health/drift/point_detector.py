"""KV-cache fragmentation judged at each engine's operating point, for the engines of one role
of one job (docs/architecture.md section 7).

Every engine is judged against itself, so a job with one or two engines is judged as one with
forty. When every judged engine of a role (two or more) is down together, each confirmed by a
fragmentation indicator, that is one FleetKVCacheFragmentation finding for the role, naming the
longest-running engine first, where the peer-gated KVCacheDrift detector would call them "slower
together"; a role where only some are down gets one KVCacheFragmentation finding per engine.
Engines that fragment together do not cross the threshold in the same pass, so an engine found
while its peers are sagging too, or while a peer with a learned model has too little data this
pass to be judged (a scrape gap on a loaded machine), is held for up to a window: the role is
then repaired as one.

Each engine's learned throughput model is kept in status.health.engines[] (detector
`kvOperatingPoint`) and read back by a restarted operator: re-learned after a restart, the KV
capacity would be measured on a cache that may already have fragmented.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from rljob.api.status import ENGINE_HEALTH_MAX_AGE, EngineHealth
from rljob.health.drift.config import DriftConfig
from rljob.health.drift.point_engine import PointBaseline, PointState, judge_point
from rljob.health.drift.throughput_model import PointModel
from rljob.health.evaluation import (
    ENGINES_EVIDENCE,
    KV_FRAGMENTATION,
    Evaluation,
    finding,
    format_duration,
    healthy,
)
from rljob.health.samples import EngineSample
from rljob.vocabulary.enums import FailureReason, RoleName

POINT_SUMMARY = "kvOperatingPoint"
# Seven of the eight values status allows: the per-token slopes are left out and re-fitted
# after a restore, which starts from the flat model at the saved mean time.
_CAPACITY, _MAX_BATCH, _LATENCY = "capacityTokens", "maxBatch", "tokenSeconds"
_SHARE, _PREFIX = "usableShare", "prefixHitRate"
_PREEMPTIONS, _PROMPT = "preemptionsPerRequest", "promptTokens"


@dataclass(frozen=True, slots=True)
class PointSeed:
    model: PointModel
    baseline: PointBaseline
    warmed_up_at: float
    cooldown_until: float

    @property
    def model_and_baseline(self) -> tuple[PointModel, PointBaseline, float]:
        return self.model, self.baseline, self.warmed_up_at


def _rounded(value: float | None) -> float | None:
    """Two significant figures: the fit refreshes every pass, and status is written only when a
    value moves materially, so finer digits would be a write every few minutes for nothing."""
    if value is None or not math.isfinite(value) or value == 0:
        return value
    return round(value, 1 - math.floor(math.log10(abs(value))))


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def to_point_summary(pod: str, role: RoleName, state: PointState, now: float) -> EngineHealth:
    model, baseline = state.model, state.baseline
    assert model is not None
    values = {
        _CAPACITY: model.capacity,
        _MAX_BATCH: model.max_batch if math.isfinite(model.max_batch) else None,
        _LATENCY: _rounded(model.intercept),
        _SHARE: _rounded(model.usable_share),
        _PREFIX: baseline.prefix_hit_rate if baseline else None,
        _PREEMPTIONS: baseline.preemptions_per_request if baseline else None,
        _PROMPT: baseline.prompt if baseline else None,
    }
    cooldown = state.cooldown_until
    return EngineHealth(
        pod=pod,
        role=role,
        detector=POINT_SUMMARY,
        baseline_tokens_per_second=None,
        warmed_up_at=_moment(state.warmed_up_at or now),
        cooldown_until=_moment(cooldown) if cooldown > now else None,
        updated_at=_moment(now),
        values={key: value for key, value in values.items() if value is not None},
    )


def from_point_summary(summary: EngineHealth, role: RoleName, now: float) -> PointSeed | None:
    values = summary.values
    if (
        summary.detector != POINT_SUMMARY
        or summary.role != role
        or not now - summary.updated_at.timestamp() <= ENGINE_HEALTH_MAX_AGE.total_seconds()
        or summary.warmed_up_at is None
        or not values.get(_CAPACITY, 0.0) > 0
        or not values.get(_LATENCY, 0.0) > 0
    ):
        return None
    model = PointModel(
        capacity=values[_CAPACITY],
        max_batch=values.get(_MAX_BATCH, math.inf),
        intercept=values[_LATENCY],
        per_kv_token=0.0,
        per_prefill_token=0.0,
        mean_kv=0.0,
        mean_prefill=0.0,
        usable_share=values.get(_SHARE, 1.0),
    )
    baseline = PointBaseline(values.get(_PREFIX), values.get(_PREEMPTIONS), values.get(_PROMPT))
    cooldown = summary.cooldown_until
    return PointSeed(
        model,
        baseline,
        summary.warmed_up_at.timestamp(),
        cooldown.timestamp() if cooldown is not None else -math.inf,
    )


MIN_FLEET = 2


class FragmentationDetector:
    """Operating-point drift detection for the engines of one role of one job."""

    def __init__(self, config: DriftConfig, role: RoleName = RoleName.ROLLOUT) -> None:
        self.config = config
        self.role = role
        self._engines: dict[str, PointState] = {}
        # Engines found while peers sag too: since when, waiting to see whether all go down.
        self._held: dict[str, float] = {}
        # The watched engines' places in the in-turn order (longest-running first).
        self._turn: dict[str, int] = {}

    @property
    def targets(self) -> list[str]:
        return sorted(self._engines)

    def state(self, target: str) -> PointState | None:
        return self._engines.get(target)

    def observe(self, target: str, sample: EngineSample) -> None:
        state = self._engines.get(target)
        if state is None:
            state = self._engines[target] = PointState(self.config)
        state.add(sample, self.config)

    def note_restart(self, target: str, at: float) -> None:
        """The engine restarted at `at`: a new model after warm-up, no finding in cooldown."""
        state = PointState(self.config)
        state.not_before = at
        state.cooldown_until = at + self.config.cooldown
        self._engines[target] = state

    def forget(self, target: str) -> None:
        self._engines.pop(target, None)
        self._held.pop(target, None)

    def retain(self, targets: Sequence[str]) -> None:
        """The engines watched now, in the order the in-turn restart takes them."""
        for target in [name for name in self._engines if name not in targets]:
            del self._engines[target]
        self._held = {t: since for t, since in self._held.items() if t in targets}
        self._turn = {target: place for place, target in enumerate(targets)}

    def summaries(self, now: float) -> list[EngineHealth]:
        return [
            to_point_summary(target, self.role, state, now)
            for target, state in sorted(self._engines.items())
            if state.model is not None
        ]

    def restore(self, summaries: Iterable[EngineHealth], now: float) -> None:
        for summary in summaries:
            seed = from_point_summary(summary, self.role, now)
            if seed is None:
                continue
            state = self._engines.setdefault(summary.pod, PointState(self.config))
            state.seed(*seed.model_and_baseline)
            state.cooldown_until = max(state.cooldown_until, seed.cooldown_until)

    def evaluate(self, now: float) -> list[Evaluation]:
        verdicts = {
            target: judge_point(target, state, self.config, now)
            for target, state in sorted(self._engines.items())
        }
        judged = [t for t, e in verdicts.items() if e.outcome != "insufficient_data"]
        down = [t for t in judged if verdicts[t].is_finding]
        if len(judged) >= MIN_FLEET and len(down) == len(judged):
            self._held.clear()
            return self._fleet(verdicts, down, now)
        sagging = [t for t in judged if t not in down and _sagging(verdicts[t], self.config)]
        unjudged = [t for t in verdicts if t not in judged and self._engines[t].model is not None]
        self._held = {t: since for t, since in self._held.items() if t in down}
        return [
            self._cooled(target, self._hold(target, evaluation, sagging, unjudged, now), now)
            for target, evaluation in verdicts.items()
        ]

    def _hold(
        self,
        target: str,
        evaluation: Evaluation,
        sagging: list[str],
        unjudged: list[str],
        now: float,
    ) -> Evaluation:
        """A finding while peers sag too or cannot be judged this pass, for up to a window:
        the whole role may be going."""
        if not evaluation.is_finding or not (sagging or unjudged):
            return evaluation
        since = self._held.setdefault(target, now)
        if now - since >= self.config.window:
            return evaluation
        peers = [f"{', '.join(sagging)} slowing too"] if sagging else []
        peers += [f"{', '.join(unjudged)} not judged this pass"] if unjudged else []
        return _suppressed(
            evaluation,
            f"held: {'; '.join(peers)}, so the role may be fragmenting together "
            f"(judged as one for up to {format_duration(self.config.window)})",
            "fleet",
        )

    def _cooled(self, target: str, evaluation: Evaluation, now: float) -> Evaluation:
        until = self._engines[target].cooldown_until
        if not evaluation.is_finding or now >= until:
            return evaluation
        return _suppressed(
            evaluation,
            f"not acted on: cooldown for another {format_duration(until - now)}",
            "cooldown",
        )

    def _fleet(
        self, verdicts: dict[str, Evaluation], down: list[str], now: float
    ) -> list[Evaluation]:
        order = sorted(down, key=lambda t: (self._turn.get(t, len(self._turn)), t))
        first = verdicts[order[0]]
        message = (
            f"every {self.role.value} engine ({len(order)}) is slower than its model expects at "
            f"the load it is offered, each confirmed by a fragmentation indicator: repair "
            f"{', '.join(order)} in that order (longest-running first); {first.message}"
        )
        evidence = {
            **first.evidence,
            ENGINES_EVIDENCE: " ".join(order),
            "fleet_size": float(len(order)),
        }
        fleet = finding(
            KV_FRAGMENTATION,
            order[0],
            FailureReason.FLEET_KV_CACHE_FRAGMENTATION,
            message,
            evidence,
        )
        others = [
            replace(e, outcome="healthy", reason=None, message=f"{e.message}; in the fleet finding")
            for t, e in verdicts.items()
            if t != order[0]
        ]
        return [self._cooled(order[0], fleet, now), *others]


def _suppressed(evaluation: Evaluation, note: str, why: str) -> Evaluation:
    """The finding said but not acted on, and why."""
    evidence = {**evaluation.evidence, "suppressed": why}
    return healthy(
        evaluation.detector, evaluation.target, f"{evaluation.message}; {note}", evidence
    )


def _sagging(evaluation: Evaluation, config: DriftConfig) -> bool:
    change = evaluation.evidence.get("change")
    return isinstance(change, float) and change <= -config.threshold / 2
