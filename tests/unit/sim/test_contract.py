"""The operator reads the simulated pages as it reads real ones: pages rendered by the models,
parsed into series the way the metrics sources deliver them, turned into detector samples by
rljob.health.profiles."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models import EngineModel, TrainerModel, VerifierModel
from rljob.dev.sim.profiles import EngineProfile, TrainerProfile, VerifierProfile
from rljob.health.profiles import (
    SGLANG,
    TRAINER,
    VERIFIER,
    VLLM,
    EngineMetrics,
    Series,
    Signal,
    engine_samples,
    trainer_reading,
    verifier_samples,
)
from rljob.health.samples import EngineSample
from rljob.vocabulary.phases import WAITING_FOR_ROLLOUTS

T0 = 1_800_000_000.0


def collect(
    signals: Mapping[str, Signal], pages: Sequence[tuple[float, str]]
) -> dict[str, list[Series]]:
    """Series by signal name from (scrape time, page) pairs, as a metrics source returns them."""
    points: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]] = {}
    for t, page in pages:
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                for name, signal in signals.items():
                    if sample.name == signal.metric and signal.matches(sample.labels):
                        labels = tuple(sorted(sample.labels.items()))
                        points.setdefault(name, {}).setdefault(labels, []).append((t, sample.value))
    return {
        name: [Series(labels, tuple(pts)) for labels, pts in by_labels.items()]
        for name, by_labels in points.items()
    }


def scrape(
    model: EngineModel | TrainerModel | VerifierModel,
    seconds: int,
    faults: Callable[[float], Active] = lambda _: NO_FAULTS,
) -> list[tuple[float, str]]:
    pages = []
    for _ in range(seconds):
        t = model.t + 1
        model.advance(t, faults(t))
        pages.append((t, model.render()))
    return pages


def samples(metrics: EngineMetrics, pages: list[tuple[float, str]]) -> list[EngineSample]:
    return engine_samples(metrics, collect(metrics.signals(), pages), staleness=5.0)


@pytest.mark.parametrize(("metrics", "exporter"), [(VLLM, "vllm"), (SGLANG, "sglang")])
def test_engine_pages_become_the_detectors_samples(metrics: EngineMetrics, exporter: str) -> None:
    engine = EngineModel(EngineProfile(exporter=exporter, noise=0.0), "s", T0)
    saturated = samples(metrics, scrape(engine, 10))
    assert len(saturated) == 10 and all(s.saturated for s in saturated)
    rate = (saturated[-1].generated_tokens_total - saturated[0].generated_tokens_total) / 9
    assert rate == pytest.approx(800, abs=1)
    assert saturated[-1].prefix_hits_total is not None
    assert saturated[-1].kv_usage is not None and 0 < saturated[-1].kv_usage <= 1

    start = engine.t
    asleep = samples(metrics, scrape(engine, 5, lambda _: Active(sleep=(start, 1))))
    paused_at = engine.t
    paused = samples(metrics, scrape(engine, 5, lambda _: Active(pause=(paused_at, True))))
    stall_from = engine.t
    stalled = samples(metrics, scrape(engine, 5, lambda _: Active(stall_since=stall_from)))
    assert len({s.generated_tokens_total for s in stalled}) == 1
    if metrics is VLLM:
        assert all(s.sleeping is True and not s.serving and not s.pending for s in asleep)
        # vLLM cannot say it is paused: no requests in flight, not a stall
        assert all(s.serving and not s.pending for s in paused)
        assert all(s.serving and s.pending for s in stalled)
    else:  # SGLang asleep, paused or wedged logs no stats: its gauges stand still
        for quiet in (asleep, paused, stalled):
            assert len({s.gauges for s in quiet}) == 1

    unsaturated = samples(metrics, scrape(engine, 5, lambda _: Active(load=(start, 0, None))))
    assert all(s.serving and not s.saturated for s in unsaturated)


def test_trainer_page_becomes_a_trainer_reading() -> None:
    trainer = TrainerModel(TrainerProfile(), T0)
    pages = scrape(trainer, 1)
    reading = trainer_reading(TRAINER, collect(TRAINER.signals(), pages))
    assert reading is not None
    assert reading.phase == WAITING_FOR_ROLLOUTS
    assert reading.heartbeat_at == pytest.approx(T0 + 1)
    assert reading.step == 0 and reading.policy_generation == 0


def test_verifier_page_becomes_histogram_snapshots() -> None:
    verifier = VerifierModel(VerifierProfile(error_rate=0.1), "s", T0)
    snapshots = verifier_samples(VERIFIER, collect(VERIFIER.signals(), scrape(verifier, 3)), 5.0)
    assert len(snapshots) == 3
    last = snapshots[-1]
    assert last.buckets[-1][0] == float("inf") and last.buckets[-1][1] > 0
    assert last.errors_total == pytest.approx(0.1 * last.buckets[-1][1], abs=1)
