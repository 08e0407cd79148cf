"""The simulated engines' operating-point series: each version's page serves the request length
and decode latency histograms (vLLM) or finish-time counters and the latency histogram (SGLang)
as upstream names them, they never go down, and sampled by the engine's profile (directly or
through Ray) they give back the profile's mean lengths and the model's per-token latency."""

from __future__ import annotations

import math
import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.gang import through_ray
from rljob.dev.sim.models import EngineModel
from rljob.dev.sim.profiles import EngineProfile
from rljob.health.profiles import ENGINE_PROFILES, EngineMetrics, engine_samples
from rljob.health.profiles.workloads import ray_exported
from rljob.health.samples import EngineSample
from tests.unit.health.test_operating_point_signals import FIELDS
from tests.unit.sim.test_contract import collect

T0 = 1_800_000_000.0
TPOT = "vllm:time_per_output_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
LENGTHS = ("vllm:request_prompt_tokens", "vllm:request_generation_tokens")


def families(engine: EngineModel) -> dict[str, str]:
    """Family name -> type of the engine's page."""
    return {f.name: f.type for f in text_string_to_metric_families(engine.render())}


@pytest.mark.parametrize(
    ("exporter", "version", "served", "absent"),
    [
        pytest.param("vllm", "0.8", (*LENGTHS, TPOT), (ITL,), id="vllm-0.8-time-per-output-token"),
        pytest.param(
            "vllm", "0.10", (*LENGTHS, TPOT), (ITL,), id="vllm-0.10-time-per-output-token"
        ),
        pytest.param("vllm", "0.11.1", (*LENGTHS, TPOT, ITL), (), id="vllm-0.11-both-names"),
        *(
            pytest.param(
                "sglang",
                version,
                ("sglang:inter_token_latency_seconds",),
                (),
                id=f"sglang-{version}",
            )
            for version in ("no-realtime", "realtime-prefill-decode", "realtime")
        ),
    ],
)
def test_each_version_serves_its_histograms(
    exporter: str, version: str, served: tuple[str, ...], absent: tuple[str, ...]
) -> None:
    engine = EngineModel(EngineProfile(exporter=exporter, version=version), "s", T0)
    engine.advance(T0 + 20)
    found = families(engine)
    assert all(found.get(name) == "histogram" for name in served), found
    assert not any(name in found for name in absent)
    if exporter == "sglang":
        assert found["sglang:num_requests"] == "counter"
    for family in text_string_to_metric_families(engine.render()):
        if family.type != "histogram":
            continue
        buckets = [s.value for s in family.samples if s.name.endswith("_bucket")]
        (count,) = [s.value for s in family.samples if s.name.endswith("_count")]
        assert buckets == sorted(buckets) and buckets[-1] == count > 0
        # vLLM's single-process client writes _created; SGLang's multiprocess collector none.
        assert (f"{family.name}_created" in found) is (exporter == "vllm")


@pytest.mark.parametrize("exporter", ["vllm", "sglang"])
def test_operating_point_series_never_decrease_under_random_faults(exporter: str) -> None:
    rng = random.Random(11)
    engine = EngineModel(EngineProfile(exporter=exporter), "s", T0)
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for _ in range(120):
        t = engine.t + rng.uniform(0.01, 5)
        faults = rng.choice(
            [
                Active(),
                Active(drifts=((engine.t, rng.uniform(0, 0.9), rng.uniform(0, 60)),)),
                Active(sleep=(engine.t, 1)),
                Active(stall_since=engine.t),
                Active(pause=(engine.t, True)),
                Active(load=(engine.t, 0, None)),
            ]
        )
        engine.advance(t, faults)
        for family in text_string_to_metric_families(engine.render()):
            if family.type != "histogram" and family.name != f"{exporter}:num_requests":
                continue
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                assert sample.value >= last.get(key, 0.0), key
                last[key] = sample.value
    assert last


def sampled(
    engine: EngineModel, seconds: int, profile: EngineMetrics, faults: Active = NO_FAULTS
) -> list[EngineSample]:
    pages = []
    for _ in range(seconds):
        engine.advance(engine.t + 1, faults)
        pages.append((engine.t, engine.render()))
    return engine_samples(profile, collect(profile.signals(), pages), staleness=5.0)


def means(first: EngineSample, last: EngineSample) -> tuple[float, float, float]:
    """Mean prompt and generation length of the requests finished in between, and the mean
    seconds per generated token of one sequence."""

    def delta(field: str) -> float:
        before, after = getattr(first, field), getattr(last, field)
        assert before is not None and after is not None, field
        return float(after - before)

    finished = delta("finished_requests_total")
    return (
        delta("finished_prompt_tokens_total") / finished,
        delta("finished_generation_tokens_total") / finished,
        delta("token_latency_seconds_total") / delta("token_latency_count_total"),
    )


@pytest.mark.parametrize(
    ("exporter", "version"),
    [
        pytest.param("vllm", "0.8", id="vllm-0.8-reads-time-per-output-token"),
        pytest.param("vllm", "0.11.1", id="vllm-0.11-reads-inter-token-latency"),
        pytest.param("sglang", "no-realtime", id="sglang-no-realtime"),
        pytest.param("sglang", "realtime", id="sglang-realtime"),
    ],
)
def test_sampled_operating_point_is_the_models(exporter: str, version: str) -> None:
    profile = EngineProfile(
        exporter=exporter, version=version, noise=0.0, prompt_length=300, generation_length=500
    )
    engine = EngineModel(profile, "s", T0)
    found = sampled(engine, 60, ENGINE_PROFILES[exporter])
    prompt, generation, latency = means(found[0], found[-1])
    assert (prompt, generation) == (300, 500)
    # 64 sequences sharing 800 tokens/s: one token per sequence every 0.08 s.
    assert latency == pytest.approx(64 / 800, rel=0.01)


@pytest.mark.parametrize(
    ("cache_symptoms", "running", "latency"),
    [(True, 32, 0.08), (False, 64, 0.16)],
    ids=["fragmenting-batch-shrinks", "slow-step-latency-grows"],
)
def test_a_drifting_engine_loses_batch_or_step_speed(
    cache_symptoms: bool, running: float, latency: float
) -> None:
    # A fragmenting cache (cache symptoms) holds half the sequences, each as fast as before;
    # an engine slowing without them keeps its batch and takes twice as long a token.
    engine = EngineModel(EngineProfile(noise=0.0, cache_symptoms=cache_symptoms), "s", T0)
    healthy = sampled(engine, 20, ENGINE_PROFILES["vllm"])
    drifting = sampled(engine, 20, ENGINE_PROFILES["vllm"], Active(drifts=((T0, 0.5, 0.0),)))
    assert means(healthy[0], healthy[-1])[2] == pytest.approx(0.08, rel=0.01)
    assert means(drifting[0], drifting[-1])[2] == pytest.approx(latency, rel=0.01)
    assert drifting[-1].running == running
    assert drifting[-1].running + drifting[-1].waiting > running


def test_through_ray_the_page_gives_the_same_operating_point() -> None:
    engine = EngineModel(EngineProfile(noise=0.0), "s", T0)
    engine.advance(T0 + 30)
    page = engine.render()
    direct = ENGINE_PROFILES["vllm"]
    ray = ray_exported(direct)
    (as_engine,) = engine_samples(direct, collect(direct.signals(), [(T0 + 30, page)]), 5.0)
    (as_ray,) = engine_samples(
        ray, collect(ray.signals(), [(T0 + 30, through_ray(page, "w1"))]), 5.0
    )
    assert all(getattr(as_engine, field) is not None for field in FIELDS)
    assert [getattr(as_ray, f) for f in FIELDS] == [getattr(as_engine, f) for f in FIELDS]
    assert as_engine.finished_requests_total == math.floor(engine.finished)
