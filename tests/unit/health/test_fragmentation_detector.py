"""The operating-point drift detector on physically simulated engines (rljob.dev.engine_physics):
fragmentation is found on one engine, on a whole fleet and on a job with one engine; workload
shifts that slow every engine are not; evidence names the operating point and the indicator."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from rljob.dev.engine_physics import (
    DEFAULT_MIX,
    Driver,
    Fragmentation,
    PhysicalEngine,
    PhysicalProfile,
    Shifts,
    loss_for_drop,
)
from rljob.health import DriftConfig
from rljob.health.drift.operating_point import RequestMix
from rljob.health.drift.point_detector import FragmentationDetector
from rljob.health.drift.throughput_model import PointModel, StepFit, with_fit
from rljob.health.evaluation import Evaluation
from rljob.health.samples import EngineSample
from rljob.vocabulary.enums import FailureReason, RoleName

HOUR = 3600.0
CONFIG = DriftConfig(threshold=0.2, window=1800.0, warmup=900.0, cooldown=HOUR)
FAULT_AT = 2 * HOUR


def _fragmenting(profile: PhysicalProfile, drop: float = 0.3) -> PhysicalProfile:
    loss = loss_for_drop(profile, drop)
    return replace(profile, fragmentation=Fragmentation(start=FAULT_AT, ramp=HOUR, loss=loss))


def _profile(kind: str = "async", index: int = 0, **changes: object) -> PhysicalProfile:
    driver = Driver(kind="async" if kind == "async" else "sync", offset=index * 37.0)
    return replace(PhysicalProfile(driver=driver), **changes)  # type: ignore[arg-type]


def _findings(
    profiles: dict[str, PhysicalProfile], hours: float, detector: FragmentationDetector
) -> list[tuple[float, Evaluation]]:
    engines = {name: PhysicalEngine(p, seed=f"1:{name}") for name, p in profiles.items()}
    found = []
    for index in range(1, int(hours * HOUR // CONFIG.interval) + 1):
        now = index * CONFIG.interval
        for name, engine in engines.items():
            if (sample := engine.sample(now)) is not None:
                detector.observe(name, sample)
        for evaluation in detector.evaluate(now):
            if evaluation.is_finding:
                found.append((now, evaluation))
                for engine_name in str(
                    evaluation.evidence.get("engines", evaluation.target)
                ).split():
                    detector.note_restart(engine_name, now)
    return found


@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize(
    ("engines", "victim"),
    [(1, "rollout-0"), (2, "rollout-1"), (4, "rollout-3")],
    ids=["one-engine-job", "two-engine-job", "one-of-four"],
)
def test_one_fragmenting_engine_is_found_against_itself(
    kind: str, engines: int, victim: str
) -> None:
    profiles = {f"rollout-{i}": _profile(kind, i) for i in range(engines)}
    profiles[victim] = _fragmenting(profiles[victim])
    found = _findings(profiles, 6, FragmentationDetector(CONFIG))
    assert [(e.target, e.reason) for _, e in found] == [
        (victim, FailureReason.KV_CACHE_FRAGMENTATION)
    ]
    at, evaluation = found[0]
    assert FAULT_AT < at < FAULT_AT + 2 * HOUR
    assert "at the load it is offered" in evaluation.message
    assert "KV capacity" in evaluation.message
    assert float(evaluation.evidence["change"]) <= -CONFIG.threshold


def test_a_fleet_fragmenting_together_is_one_finding_naming_the_longest_running_first() -> None:
    profiles = {f"rollout-{i}": _fragmenting(_profile("async", i)) for i in range(3)}
    detector = FragmentationDetector(CONFIG)
    # rollout-2 was created first, rollout-1 last: the in-turn order the monitor passes.
    detector.retain(("rollout-2", "rollout-0", "rollout-1"))
    engines = {name: PhysicalEngine(p, seed=name) for name, p in profiles.items()}
    fleet: list[Evaluation] = []
    for index in range(1, int(6 * HOUR // CONFIG.interval) + 1):
        now = index * CONFIG.interval
        for name in ("rollout-0", "rollout-1", "rollout-2"):
            sample = engines[name].sample(now)
            assert sample is not None
            detector.observe(name, sample)
        fleet = [e for e in detector.evaluate(now) if e.is_finding]
        if fleet:
            break
    assert [(e.target, e.reason) for e in fleet] == [
        ("rollout-2", FailureReason.FLEET_KV_CACHE_FRAGMENTATION)
    ]
    assert str(fleet[0].evidence["engines"]).split() == ["rollout-2", "rollout-0", "rollout-1"]
    assert "repair rollout-2, rollout-0, rollout-1 in that order" in fleet[0].message


def _two_fragmenting(gap: tuple[float, float]) -> list[tuple[float, str, FailureReason | None]]:
    """Two engines fragmenting together; rollout-1 not scraped in `gap` (a loaded machine)."""
    profiles = {f"rollout-{i}": _fragmenting(_profile("async", i)) for i in range(2)}
    engines = {name: PhysicalEngine(p, seed=name) for name, p in profiles.items()}
    detector = FragmentationDetector(CONFIG)
    found = []
    for index in range(1, int(8 * HOUR // CONFIG.interval) + 1):
        now = index * CONFIG.interval
        for name, engine in engines.items():
            sample = engine.sample(now)
            if sample is not None and not (name == "rollout-1" and gap[0] <= now < gap[1]):
                detector.observe(name, sample)
        for evaluation in detector.evaluate(now):
            if evaluation.is_finding:
                found.append((now, evaluation.target, evaluation.reason))
                for engine_name in str(evaluation.evidence.get("engines", "")).split():
                    detector.note_restart(engine_name, now)
    return found


def test_a_peer_with_a_scrape_gap_as_the_fleet_crosses_holds_the_finding_for_one_fleet_repair() -> (
    None
):
    ((crossed, _, reason),) = _two_fragmenting((0.0, 0.0))
    assert reason == FailureReason.FLEET_KV_CACHE_FRAGMENTATION

    # rollout-1 has too few samples to be judged when rollout-0 crosses: held, not repaired
    # alone (a second, separate repair of rollout-1 would follow), until both are judged down.
    found = _two_fragmenting((crossed - CONFIG.window * 5 / 6, crossed + CONFIG.window / 3))
    assert [(target, reason) for _, target, reason in found] == [
        ("rollout-0", FailureReason.FLEET_KV_CACHE_FRAGMENTATION)
    ]
    assert found[0][0] - crossed <= CONFIG.window


@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize(
    "changes",
    [
        {"shifts": Shifts(response_growth_per_day=1.0)},
        {"shifts": Shifts(long_prompts_at=4 * HOUR, long_prompts_for=2 * HOUR)},
        {
            "shifts": Shifts(
                mix_change_at=4 * HOUR,
                mix_after=replace(DEFAULT_MIX, prompt_tokens=2048, shared_prefix=0.2),
            )
        },
        {"counter_resets_at": (3 * HOUR, 7 * HOUR)},
        {"gaps": ((3 * HOUR, 3 * HOUR + 600),)},
    ],
    ids=["responses-double", "long-prompt-phase", "prompt-mix-change", "counter-resets", "gaps"],
)
def test_workload_shifts_slow_every_engine_and_are_never_a_finding(
    kind: str, changes: dict[str, object]
) -> None:
    profiles = {f"rollout-{i}": _profile(kind, i, **changes) for i in range(2)}
    assert _findings(profiles, 12, FragmentationDetector(CONFIG)) == []


def test_without_request_lengths_the_engine_stays_in_warm_up_and_says_why() -> None:
    detector = FragmentationDetector(CONFIG)
    engine = PhysicalEngine(_profile(), seed=3)
    for index in range(1, 200):
        sample = engine.sample(index * CONFIG.interval)
        assert sample is not None
        detector.observe("rollout-0", replace(sample, finished_requests_total=None))
    (evaluation,) = detector.evaluate(200 * CONFIG.interval)
    assert evaluation.outcome == "insufficient_data"
    assert "request lengths known" in evaluation.message


def test_a_restarted_operator_judges_against_the_saved_model_at_once() -> None:
    profile = _fragmenting(_profile())
    first = FragmentationDetector(CONFIG)
    engine = PhysicalEngine(profile, seed=5)
    samples: list[EngineSample] = []
    for index in range(1, int(FAULT_AT // CONFIG.interval)):
        sample = engine.sample(index * CONFIG.interval)
        assert sample is not None
        samples.append(sample)
        first.observe("rollout-0", sample)
    now = samples[-1].t
    (summary,) = first.summaries(now)
    assert summary.detector == "kvOperatingPoint"
    assert summary.values["capacityTokens"] > 0
    second = FragmentationDetector(CONFIG)
    second.restore([summary], now)
    restored = second.state("rollout-0")
    saved = first.state("rollout-0")
    assert restored is not None and saved is not None
    assert restored.model is not None and saved.model is not None
    assert restored.model.capacity == saved.model.capacity
    # Fragmented samples from here on are judged against the saved capacity, not a new warm-up.
    found = []
    for index in range(int(FAULT_AT // CONFIG.interval), int(5 * HOUR // CONFIG.interval)):
        sample = engine.sample(index * CONFIG.interval)
        assert sample is not None
        second.observe("rollout-0", sample)
        found += [e for e in second.evaluate(sample.t) if e.is_finding]
        if found:
            break
    assert [e.reason for e in found] == [FailureReason.KV_CACHE_FRAGMENTATION]


def test_summaries_of_another_role_or_detector_are_ignored() -> None:
    detector = FragmentationDetector(CONFIG, RoleName.ROLLOUT)
    engine = PhysicalEngine(_profile(), seed=2)
    for index in range(1, 80):
        sample = engine.sample(index * CONFIG.interval)
        assert sample is not None
        detector.observe("rollout-0", sample)
    (summary,) = detector.summaries(80 * CONFIG.interval)
    other = FragmentationDetector(CONFIG, RoleName.TRAINER)
    other.restore(
        [summary, summary.model_copy(update={"detector": "kvDrift"})], 80 * CONFIG.interval
    )
    assert other.targets == []


# ---------------------------------------------------------------- the pure parts


def test_request_mix_needs_enough_finished_requests_and_forgets_old_ones() -> None:
    mix = RequestMix()

    def at(t: float, count: float, prompt: float, generation: float) -> EngineSample:
        return EngineSample(
            t=t,
            generated_tokens_total=0,
            running=0,
            waiting=0,
            finished_requests_total=count,
            finished_prompt_tokens_total=prompt,
            finished_generation_tokens_total=generation,
        )

    mix.add(at(0, 0, 0, 0), at(30, 4, 4000, 8000))
    assert mix.generation is None
    mix.add(at(30, 4, 4000, 8000), at(60, 20, 20000, 40000))
    assert mix.prompt == pytest.approx(1000)
    assert mix.generation == pytest.approx(2000)
    # Much later, a new mix dominates the decayed sums.
    mix.add(at(60, 20, 20000, 40000), at(6000, 120, 420000, 140000))
    assert mix.prompt == pytest.approx(4000, rel=0.01)


@pytest.mark.parametrize(
    ("offered", "context", "expected"),
    [(50, 1000, 50), (500, 1000, 256), (500, 4000, 100), (0, 1000, 1)],
    ids=["load-bound", "max-num-seqs-bound", "kv-bound", "at-least-one"],
)
def test_the_batch_is_predicted_from_offered_load_and_capacity(
    offered: float, context: float, expected: float
) -> None:
    model = PointModel(400_000, 256, 0.03, 0.0, 0.0, 0.0, 0.0)
    assert model.batch(offered, context) == pytest.approx(expected)


def test_step_fit_recovers_per_token_costs_and_keeps_slopes_physical() -> None:
    fit = StepFit()
    for index in range(200):
        kv, prefill = 100_000 + 1_000 * (index % 17), 50.0 + index % 5
        fit.add(kv, prefill, 0.01 + 5e-8 * kv + 2e-5 * prefill, 30.0, index * 30.0)
    intercept, per_kv, per_prefill, mean_kv, mean_prefill = fit.solve()
    assert per_kv == pytest.approx(5e-8, rel=0.2)
    assert per_prefill == pytest.approx(2e-5, rel=0.3)
    assert intercept == pytest.approx(0.01 + 5e-8 * mean_kv + 2e-5 * mean_prefill, rel=1e-3)
    flat = StepFit()
    for index in range(50):
        flat.add(100_000, 50, 0.03 + (0.001 if index % 2 else -0.001), 30.0, index * 30.0)
    intercept, per_kv, per_prefill, _, _ = flat.solve()
    # Features that never varied teach no slope: the fit stays at the mean time.
    assert per_kv == pytest.approx(0.0, abs=1e-12)
    assert per_prefill == pytest.approx(0.0, abs=1e-12)
    assert intercept == pytest.approx(0.03, rel=1e-3)


@pytest.mark.parametrize("seed", range(20), ids=lambda seed: f"seed={seed}")
def test_features_flat_but_for_rounding_teach_no_slope(seed: int) -> None:
    """A simulated engine at one operating point: batch x context and the prefill per token are
    the same but for the last bits, which once fitted slopes of 1e14 and expected 0 tok/s."""
    jitter = random.Random(seed)
    fit = StepFit()
    for index in range(10):
        kv = 64 * 2560.0 * (1 + jitter.uniform(-1e-12, 1e-12))
        prefill = 64 * 512 / 2048.0 * (1 + jitter.uniform(-1e-12, 1e-12))
        fit.add(kv, prefill, 0.08 * (1 + jitter.uniform(-0.02, 0.02)), 1.0, float(index))
    intercept, per_kv, per_prefill, mean_kv, mean_prefill = fit.solve()
    model = with_fit(400_000, math.inf, fit)
    # A 10 % move of either feature moves the expected time by under a millionth.
    assert per_kv * 0.1 * mean_kv < 1e-6 * intercept
    assert per_prefill * 0.1 * mean_prefill < 1e-6 * intercept
    assert model.token_latency(64, 2560 * 1.1, 512, 2048 / 1.1) == pytest.approx(intercept)


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_healthy_engine_generates_what_its_model_expects(kind: str) -> None:
    detector = FragmentationDetector(CONFIG)
    engine = PhysicalEngine(_profile(kind), seed=4)
    changes = []
    for index in range(1, int(3 * HOUR // CONFIG.interval)):
        sample = engine.sample(index * CONFIG.interval)
        assert sample is not None
        detector.observe("rollout-0", sample)
        (evaluation,) = detector.evaluate(sample.t)
        if "change" in evaluation.evidence:
            changes.append(float(evaluation.evidence["change"]))
    assert changes, "the engine was judged"
    # No systematic bias: the model's batch is the one a KV-bound engine reaches.
    assert max(abs(c) for c in changes) < 0.05
