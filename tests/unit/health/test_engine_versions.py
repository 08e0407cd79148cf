"""The stall and drift detectors on each simulated engine version's pages (docs/engine-fidelity.md):
pages rendered as upstream writes them, parsed as a metrics source returns them, sampled by the
engine's profile and fed to the detectors, one scrape a second."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models import EngineModel
from rljob.dev.sim.profiles import EngineProfile
from rljob.dev.traces import Cycle
from rljob.health.drift import DriftConfig, KVDriftDetector
from rljob.health.evaluation import Evaluation
from rljob.health.profiles import ENGINE_PROFILES, engine_samples
from rljob.health.samples import EngineSample
from rljob.health.stall import EngineStallConfig, EngineStallDetector
from tests.unit.sim.test_contract import collect

T0 = 1_800_000_000.0
STALL = EngineStallConfig(timeout=20.0, interval=1.0)
DRIFT = DriftConfig(threshold=0.2, window=60.0, warmup=20.0, cooldown=0.0, interval=1.0)
Faults = Callable[[float], Active]


def _no_faults(_: float) -> Active:
    return NO_FAULTS


class Bed:
    """Engines of one role scraped every second into both detectors."""

    def __init__(self, profiles: dict[str, EngineProfile]) -> None:
        self.engines = {name: EngineModel(p, name, T0) for name, p in profiles.items()}
        self.stall = EngineStallDetector(STALL)
        self.drift = KVDriftDetector(DRIFT)
        self.t = T0
        self.stall_findings: list[Evaluation] = []

    def run(self, seconds: int, faults: dict[str, Faults] | None = None) -> None:
        for _ in range(seconds):
            self.t += 1
            for name, engine in self.engines.items():
                active = (faults or {}).get(name, _no_faults)(self.t)
                engine.advance(self.t, active)
                profile = ENGINE_PROFILES[engine.profile.exporter]
                page = collect(profile.signals(), [(self.t, engine.render())])
                for sample in engine_samples(profile, page, staleness=5.0):
                    self.stall.observe(name, sample)
                    self.drift.observe(name, sample)
            self.stall_findings += [e for e in self.stall.evaluate(self.t) if e.is_finding]

    def drift_of(self, name: str) -> Evaluation:
        (found,) = [e for e in self.drift.evaluate(self.t) if e.target == name]
        return found


SGLANG_VERSIONS = ("no-realtime", "realtime-prefill-decode", "realtime")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_an_sglang_long_decode_tail_is_no_stall(version: str) -> None:
    # No request finishes for 10 minutes: the completion counters stand still throughout.
    profile = EngineProfile(exporter="sglang", version=version, noise=0.0, finish_every=600.0)
    bed = Bed({"e": profile})
    bed.run(120)
    assert bed.stall_findings == []
    (evaluation,) = bed.stall.evaluate(bed.t)
    assert "generating" in evaluation.message


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_a_paused_sglang_is_neither_stalled_nor_drifting(version: str) -> None:
    profiles = {f"e{i}": EngineProfile(exporter="sglang", version=version) for i in range(4)}
    bed = Bed(profiles)
    bed.run(60)
    paused_at = bed.t
    bed.run(90, {"e0": lambda _: Active(pause=(paused_at, True))})
    assert bed.stall_findings == []
    (e0,) = [e for e in bed.stall.evaluate(bed.t) if e.target == "e0"]
    assert "logged no stats" in e0.message
    assert not bed.drift_of("e0").is_finding


@pytest.mark.parametrize("version", ["0.8", "0.10", "0.11.1"])
def test_vllm_of_each_version_is_judged_through_generate_train_cycles(version: str) -> None:
    cycle = Cycle(generate=30.0, drain=4.0, train=15.0, weight_sync=3.0)
    profiles = {
        f"e{i}": EngineProfile(version=version, cycle=replace(cycle, offset=i)) for i in range(4)
    }
    bed = Bed(profiles)
    bed.run(200)
    assert bed.stall_findings == []
    verdicts = [bed.drift_of(name) for name in profiles]
    # Judged, not "insufficient data": the sleep phases of an engine without a sleep gauge
    # read as idle and are left out of the coverage, as a sleep gauge would have them.
    assert all(v.outcome == "healthy" for v in verdicts), [v.message for v in verdicts]
    prefix = [s for s in bed.drift.summaries(bed.t)]
    assert all(s.values.get("prefixHitRate") for s in prefix)


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_a_drifting_sglang_engine_is_still_caught(version: str) -> None:
    profiles = {f"e{i}": EngineProfile(exporter="sglang", version=version) for i in range(4)}
    bed = Bed(profiles)
    bed.run(40)
    drift_from = bed.t
    bed.run(90, {"e0": lambda _: Active(drifts=((drift_from, 0.5, 5.0),))})
    assert bed.drift_of("e0").is_finding
    assert not any(bed.drift_of(f"e{i}").is_finding for i in (1, 2, 3))
    assert bed.stall_findings == []


@pytest.mark.parametrize(
    ("gauges_move", "stalled"),
    [
        pytest.param(True, True, id="logging-with-flat-decode-counter-is-a-stall"),
        pytest.param(False, False, id="frozen-gauges-are-not-judged"),
    ],
)
def test_sglang_stall_needs_a_logging_scheduler(gauges_move: bool, stalled: bool) -> None:
    """Gauges moving while the realtime decode counter stays flat with requests pending is the
    one SGLang stall its own /health would not see; frozen gauges are left to /health."""
    detector = EngineStallDetector(STALL)
    for second in range(40):
        usage = 0.5 + (second % 7) / 100 if gauges_move else 0.5
        detector.observe(
            "e",
            EngineSample(
                t=T0 + second,
                generated_tokens_total=1000.0,
                running=8.0,
                waiting=2.0,
                kv_usage=usage,
                gauges=(8.0, 2.0, usage, 0.0),
            ),
        )
    (evaluation,) = detector.evaluate(T0 + 39)
    assert evaluation.is_finding is stalled
