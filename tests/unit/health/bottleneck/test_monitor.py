"""The bottleneck monitor end to end on simulated jobs: the published doubling sweep, an
under-driven synchronous rollout, a verifier slowdown, trainer- and weight-sync-bound jobs, a
trainer without phase counters, and garbage."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from rljob.api.diagnosis import Bottleneck
from rljob.api.spec import Health
from rljob.health.bottleneck import BottleneckConfig, BottleneckMonitor
from rljob.health.samples import EngineSample
from rljob.vocabulary.enums import BottleneckRole

from .sim import (
    SCRAPE,
    Job,
    Schedule,
    constant,
    cycle,
    step_time_curve,
    true_recommendation,
)

HOUR = 3600.0
WINDOW = 900.0


def monitor() -> BottleneckMonitor:
    return BottleneckMonitor(BottleneckConfig(window=WINDOW, interval=SCRAPE))


def sweep_schedule(levels: list[float], hold: float) -> Schedule:
    return lambda t: levels[min(int(t // hold), len(levels) - 1)]


# The published doubling sweep (parallelism, rollouts/s), as tokens/s of one engine.
PUBLISHED = {8: 2.1, 16: 4.0, 32: 7.2, 64: 8.1, 128: 8.3}


def published(c: float) -> float:
    return 1000 * PUBLISHED.get(round(c), 0.0)


def test_published_sweep_through_the_monitor_puts_the_knee_at_64_and_recommends_51() -> None:
    hold = 600.0
    levels = [8.0, 16.0, 32.0, 64.0, 128.0, 16.0]
    job = Job(
        in_flight=sweep_schedule(levels, hold),
        throughput=published,
        phase=cycle(("waiting_for_rollouts", 70), ("training", 30)),
    )
    # The driver goes back to 16 after the sweep for longer than the window.
    results = job.run(monitor(), 5 * hold + 2 * WINDOW)
    last = results[-1]
    assert last.curve is not None
    assert last.curve.knee == pytest.approx(64)
    assert last.curve.recommended == pytest.approx(51.2)
    assert not last.curve.beyond
    assert last.role is BottleneckRole.ROLLOUT_CONCURRENCY
    assert last.recommended_concurrency == 51
    assert "from about 16 requests in flight to 51" in last.advice


def test_running_past_the_knee_with_room_is_the_engines_limit() -> None:
    hold = 600.0
    levels = [8.0, 16.0, 32.0, 64.0, 128.0]
    job = Job(
        in_flight=sweep_schedule(levels, hold),
        throughput=published,
        phase=cycle(("waiting_for_rollouts", 70), ("training", 30)),
    )
    results = job.run(monitor(), 5 * hold + 600)
    last = results[-1]
    assert last.role is BottleneckRole.ROLLOUT
    assert "128 in flight, at or past the recommended 51, the knee at 64" in last.evidence


def sync_rollout(concurrency: float, generate: float, train: float) -> Job:
    """In flight decays from `concurrency` to 0 over each generate phase, as a synchronous
    rollout's tail does, then the engines idle while the trainer trains."""
    period = generate + train

    def in_flight(t: float) -> float:
        at = t % period
        return concurrency * (1 - at / generate) if at < generate else 0.0

    return Job(
        in_flight=in_flight,
        throughput=lambda c: 0.0,
        phase=cycle(("waiting_for_rollouts", generate), ("training", train)),
    )


UNDER_DRIVEN = [
    # a (s), b (s per sequence), KV capacity, the driver's concurrency, engines
    pytest.param(0.01, 0.0002, 256, 16, 1, id="one-engine-driven-at-16-of-256"),
    pytest.param(0.02, 0.0001, 512, 24, 2, id="two-engines-driven-at-24-of-512"),
    pytest.param(0.015, 0.0005, 96, 8, 4, id="four-engines-driven-at-8-of-96"),
    pytest.param(0.008, 0.0003, 128, 12, 1, id="one-engine-driven-at-12-of-128"),
]


@pytest.mark.parametrize(("a", "b", "capacity", "concurrency", "engines"), UNDER_DRIVEN)
def test_under_driven_engines_get_an_extrapolated_recommendation_within_15_percent(
    a: float, b: float, capacity: float, concurrency: float, engines: int
) -> None:
    job = sync_rollout(concurrency, generate=300, train=120)
    job.throughput = step_time_curve(a, b, capacity)
    job.engines, job.capacity = engines, capacity
    last = job.run(monitor(), 4 * HOUR, evaluate_every=40)[-1]
    truth = engines * true_recommendation(job.throughput, capacity)
    assert last.role is BottleneckRole.ROLLOUT_CONCURRENCY
    assert last.curve is not None and last.curve.beyond
    assert last.recommended_concurrency is not None
    assert last.recommended_concurrency == pytest.approx(truth, rel=0.15)
    assert "extrapolated" in last.curve.message
    assert "decode step time c/T" in last.curve.message


def test_under_driven_without_kv_usage_recommends_doubling() -> None:
    job = sync_rollout(16, generate=300, train=120)
    job.throughput = step_time_curve(0.01, 0.0002, 256)
    last = job.run(monitor(), 4 * HOUR, evaluate_every=40)[-1]
    assert last.role is BottleneckRole.ROLLOUT_CONCURRENCY
    assert last.recommended_concurrency == 32
    assert last.curve is not None
    assert "no KV capacity estimate" in last.curve.message
    assert "the knee lies beyond 16" in last.curve.message


def test_a_verifier_slowdown_flips_rollout_to_verifier() -> None:
    slow_from = 2 * HOUR
    job = Job(
        # Saturated engines; once the verifiers slow down, requests wait there instead.
        in_flight=lambda t: 300.0 if t < slow_from else 40.0,
        throughput=step_time_curve(0.01, 0.0002, 256),
        capacity=256,
        engines=4,
        phase=cycle(("waiting_for_rollouts", 70), ("training", 30)),
        verifiers=2,
        verifier_depth=lambda t: 0.2 if t < slow_from else 2 + (t - slow_from) / 60,
    )
    results = job.run(monitor(), 3 * HOUR)
    roles = [r.role for r in results]
    # Unknown until the phase counters span half the window, then Rollout, then Verifier.
    assert [role for role, _ in itertools.groupby(roles)] == [
        BottleneckRole.UNKNOWN,
        BottleneckRole.ROLLOUT,
        BottleneckRole.VERIFIER,
    ]
    flipped = roles.index(BottleneckRole.VERIFIER)
    assert results[flipped].updated_at.timestamp() > slow_from
    assert "pointed to Verifier" in results[flipped - 1].evidence
    assert results[flipped].since == results[-1].since == results[flipped].updated_at
    last = results[-1]
    assert "verifier queue" in last.evidence and "4 engines unsaturated" in last.evidence
    assert "add verifier replicas" in last.advice
    assert last.verifier is not None and last.verifier.queue_depth is not None
    assert last.verifier.queue_depth > 50


PHASE_BOUND = [
    pytest.param(
        (("waiting_for_rollouts", 10), ("training", 80), ("syncing_weights", 10)),
        BottleneckRole.TRAINER,
        "trainer trained 80%",
        id="trainer-bound",
    ),
    pytest.param(
        (("waiting_for_rollouts", 20), ("training", 30), ("syncing_weights", 50)),
        BottleneckRole.WEIGHT_SYNC,
        "trainer synced weights 50% of 15m, 50s per step",
        id="weight-sync-bound",
    ),
    pytest.param(
        (("generating", 40), ("training", 25), ("evaluating", 35)),
        BottleneckRole.ROLLOUT_CONCURRENCY,
        "trainer waited for rollouts 40%",
        id="colocated-generating-counts-as-rollout-evaluating-never-bounds",
    ),
]


@pytest.mark.parametrize(("phases", "role", "evidence"), PHASE_BOUND)
def test_the_largest_side_of_the_step_bounds_it(
    phases: tuple[tuple[str, float], ...], role: BottleneckRole, evidence: str
) -> None:
    job = Job(in_flight=constant(8), throughput=lambda c: 100 * c, phase=cycle(*phases))
    last = job.run(monitor(), HOUR)[-1]
    assert last.role is role
    assert evidence in last.evidence
    assert last.step_seconds == pytest.approx(100, rel=0.1)


def test_without_phase_counters_the_role_is_unknown_and_says_what_is_missing() -> None:
    job = Job(
        in_flight=constant(300),
        throughput=step_time_curve(0.01, 0.0002, 256),
        capacity=256,
        engines=2,
        phase=cycle(("training", 60)),
        trainer_pods=0,
    )
    last = job.run(monitor(), HOUR)[-1]
    assert last.role is BottleneckRole.UNKNOWN
    assert "rljob_trainer_phase_seconds_total" in last.evidence
    assert "2 of 2 engines saturated" in last.evidence
    assert "the engines are saturated" in last.advice


def test_a_new_trainer_covering_too_little_of_the_window_is_unknown() -> None:
    mon = monitor()
    for i in range(10):
        mon.observe_trainer("trainer-0", 1000 + 15 * i, {"training": 15.0 * i}, float(i))
    found = mon.evaluate(1000 + 15 * 9)
    assert found is not None
    assert found.role is BottleneckRole.UNKNOWN
    assert "span 15% of 15m" in found.evidence


def test_nothing_observed_gives_no_diagnosis() -> None:
    assert monitor().evaluate(1000.0) is None


def test_config_from_health_keeps_two_intervals() -> None:
    health = Health.model_validate(
        {
            "interval": "10m",
            "engineStall": {"timeout": "10m"},
            "bottleneck": {"window": "15m"},
        }
    )
    config = BottleneckConfig.from_health(health)
    assert (config.window, config.interval, config.bin_seconds) == (1200.0, 600.0, 400.0)
    assert BottleneckConfig.from_health(Health()).window == WINDOW


def _garbage_trainer(mon: BottleneckMonitor, t: float) -> None:
    mon.observe_trainer("trainer-0", t + 1, {"training": math.nan, "bogus": 5.0}, -3.0)
    mon.observe_trainer("trainer-0", t - 100, {"training": 1e6}, 1.0)  # out of order
    mon.observe_trainer("trainer-1", math.inf, {"training": 1.0}, None)
    mon.observe_trainer("trainer-2", t, {"training": -1.0, "syncing_weights": math.inf}, None)


def _garbage_engine(mon: BottleneckMonitor, t: float) -> None:
    for sample in (
        EngineSample(t=t + 1, generated_tokens_total=math.nan, running=1, waiting=0),
        EngineSample(t=t - 200, generated_tokens_total=1e9, running=500, waiting=500),
        EngineSample(t=t + 2, generated_tokens_total=5, running=-4, waiting=math.inf),
        EngineSample(t=t + 3, generated_tokens_total=5, running=3, waiting=0, kv_usage=7.0),
    ):
        mon.observe_engine("engine-0", sample)


def _garbage_verifier(mon: BottleneckMonitor, t: float) -> None:
    mon.observe_verifier("verifier-0", t, math.nan)
    mon.observe_verifier("verifier-0", t - 500, 1e6)
    mon.observe_verifier("verifier-1", t, -5.0)
    mon.note_verifier_latency(math.nan, -1.0)


GARBAGE = [
    pytest.param(_garbage_trainer, id="trainer-nan-negative-unknown-phase-out-of-order"),
    pytest.param(_garbage_engine, id="engine-nan-negative-out-of-order-kv-past-one"),
    pytest.param(_garbage_verifier, id="verifier-nan-negative-out-of-order"),
]


@pytest.mark.parametrize("inject", GARBAGE)
def test_garbage_never_crashes_nor_names_a_wrong_role(
    inject: Callable[[BottleneckMonitor, float], None],
) -> None:
    mon = monitor()
    job = Job(
        in_flight=constant(8),
        throughput=lambda c: 100 * c,
        phase=cycle(("waiting_for_rollouts", 10), ("training", 80), ("syncing_weights", 10)),
        verifiers=1,
    )
    results: list[Bottleneck] = []
    for until in range(600, 3600, 300):
        results += job.run(mon, until)
        inject(mon, job.t)
    assert results
    assert {r.role for r in results} <= {BottleneckRole.TRAINER, BottleneckRole.UNKNOWN}
    assert results[-1].role is BottleneckRole.TRAINER


def test_only_garbage_is_unknown_or_nothing() -> None:
    mon = monitor()
    for t in range(0, 1800, 15):
        _garbage_trainer(mon, float(t))
        _garbage_engine(mon, float(t))
    found = mon.evaluate(1800.0)
    assert found is None or found.role is BottleneckRole.UNKNOWN


def test_a_trainer_restart_counts_its_counters_from_zero() -> None:
    mon = monitor()
    totals = {"waiting_for_rollouts": 5000.0, "training": 20000.0}
    for i in range(120):
        t = 15.0 * i
        if i == 60:  # the restarted process starts over
            totals = {"waiting_for_rollouts": 0.0, "training": 0.0}
        mon.observe_trainer("trainer-0", t, dict(totals), None)
        totals["waiting_for_rollouts"] += 3.0
        totals["training"] += 12.0
    found = mon.evaluate(15.0 * 119)
    assert found is not None and found.role is BottleneckRole.TRAINER
    shares = {p.phase: p.share for p in found.phases}
    assert shares["training"] == pytest.approx(0.8, abs=0.02)


def test_gone_pods_are_forgotten() -> None:
    job = Job(in_flight=constant(8), throughput=lambda c: 100 * c, phase=cycle(("training", 60)))
    mon = monitor()
    job.run(mon, 1200)
    mon.retain(set())
    assert mon.evaluate(job.t) is None


def test_step_phase_seconds_and_the_role_change_are_exposed_for_metrics_and_events() -> None:
    mon = monitor()
    job = Job(
        in_flight=constant(8),
        throughput=lambda c: 100 * c,
        phase=cycle(("waiting_for_rollouts", 20), ("training", 80)),
    )
    job.run(mon, 1200)
    per_step = mon.step_phase_seconds()
    assert per_step["training"] == pytest.approx(80, rel=0.1)
    assert per_step["waiting_for_rollouts"] == pytest.approx(20, rel=0.1)
    assert mon.role is BottleneckRole.TRAINER
    assert mon.changed is None  # the first verdict was made several evaluations ago
