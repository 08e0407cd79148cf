"""Drives detectors over synthetic traces the way the health scheduler does: one scrape round
per interval, then one evaluation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from rljob.dev.traces import EngineProfile, fleet_trace
from rljob.health import DriftConfig, Evaluation, KVDriftDetector

HOUR = 3600.0


@dataclass
class DriftRun:
    first_finding: dict[str, float] = field(default_factory=dict)
    findings: list[tuple[float, Evaluation]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    def finding_targets(self) -> set[str]:
        return {evaluation.target for _, evaluation in self.findings}


def run_drift(
    profiles: Mapping[str, EngineProfile],
    duration: float,
    config: DriftConfig | None = None,
    seed: int | str = 0,
) -> DriftRun:
    config = config or DriftConfig()
    detector = KVDriftDetector(config)
    run = DriftRun()
    last_name = list(profiles)[-1]
    for name, sample in fleet_trace(profiles, duration, interval=config.interval, seed=seed):
        detector.observe(name, sample)
        if name != last_name:
            continue
        for evaluation in detector.evaluate(sample.t):
            run.outcomes[evaluation.outcome] += 1
            if evaluation.is_finding:
                run.findings.append((sample.t, evaluation))
                run.first_finding.setdefault(evaluation.target, sample.t)
    return run


def fleet(count: int, **overrides: EngineProfile) -> dict[str, EngineProfile]:
    """`count` healthy engines named rollout-0..; keyword arguments replace some of them."""
    profiles = {f"rollout-{index}": EngineProfile() for index in range(count)}
    profiles.update({name.replace("_", "-"): profile for name, profile in overrides.items()})
    return profiles
