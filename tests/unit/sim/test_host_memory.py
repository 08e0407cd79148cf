"""The simulated engines' host memory (rljob.dev.host_memory): a base, the weights while asleep
at level 1, the batch's state, and the `memory_growth` fault's leak, which a restart clears.
Only a page standing for the SDK's vLLM plugin serves it (as rljob_engine_process_tree_resident_
bytes, which the operator reads as the process tree's memory); no stock vLLM or SGLang page
carries it or any cAdvisor series."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.api.roles import GangEngines
from rljob.dev.engine_physics import Driver, MemoryGrowth, PhysicalEngine, PhysicalProfile
from rljob.dev.host_memory import GIB, PROCESS_TREE_METRIC, WEIGHT_BYTES, HostMemory, grown
from rljob.dev.sim.faults import NO_FAULTS, Active, FaultError, RuleBook, parse_injection
from rljob.dev.sim.gang import on_page
from rljob.dev.sim.models import EngineModel
from rljob.dev.sim.profiles import EngineProfile
from rljob.health.profiles import engine_metrics, engine_samples
from rljob.health.profiles.workloads import MEMORY_WORKING_SET_METRIC, PROCESS_TREE_RSS_METRIC
from rljob.health.samples import PROCESS_TREE_MEMORY, WORKING_SET_MEMORY
from tests.unit.sim.test_contract import collect

T0 = 1_800_000_000.0
HOUR = 3600.0
NS = "team-a"


def names(page: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(page) for s in f.samples}


def test_the_sim_names_the_gauge_the_operator_reads() -> None:
    assert PROCESS_TREE_METRIC == PROCESS_TREE_RSS_METRIC


@pytest.mark.parametrize("exporter", ["vllm", "sglang"])
def test_only_a_plugin_page_carries_host_memory(exporter: str) -> None:
    engine = EngineModel(EngineProfile(exporter=exporter), "s", T0)
    engine.advance(T0 + 30)
    stock = names(engine.render())
    assert PROCESS_TREE_METRIC not in stock
    assert MEMORY_WORKING_SET_METRIC not in stock  # no fake cAdvisor series on an engine page
    assert PROCESS_TREE_METRIC in names(engine.render(plugin=True))


def test_memory_follows_sleep_load_and_the_leak() -> None:
    engine = EngineModel(EngineProfile(noise=0.0), "s", T0)
    engine.advance(T0 + 60)
    awake = engine.memory
    assert 40 * GIB <= awake <= 40 * GIB + 64 * 2**20 + 0.5 * GIB  # base + batch + noise
    engine.advance(T0 + 120, Active(sleep=(T0 + 60, 1)))
    assert engine.memory - awake == pytest.approx(WEIGHT_BYTES, abs=0.6 * GIB)
    engine.advance(T0 + 180, Active(sleep=(T0 + 60, 2)))  # level 2 keeps no host copy
    assert engine.memory < awake + 0.5 * GIB
    leak = Active(memory_growth=(T0 + 180, 2.0))
    engine.advance(T0 + 180 + 3 * HOUR, leak)
    assert engine.memory - awake == pytest.approx(6 * GIB, abs=0.5 * GIB)
    fresh = EngineModel(EngineProfile(noise=0.0), "s#1", T0 + 4 * HOUR)  # a restart
    fresh.advance(T0 + 4 * HOUR + 60, NO_FAULTS)
    assert fresh.memory < awake + 0.5 * GIB
    assert engine.state()["host_memory_bytes"] == round(engine.memory)


def test_a_plugin_page_becomes_the_process_tree_reading() -> None:
    profile = engine_metrics(GangEngines.model_validate({"exporter": "plugin"}))
    engines = [EngineModel(EngineProfile(noise=0.0, engine="0"), f"s{i}", T0) for i in range(2)]
    pages = []
    for index, engine in enumerate(engines):
        engine.advance(T0 + 30, Active(memory_growth=(T0, 1.0)))
        pages.append((T0 + 30, on_page(engine.render(plugin=True), index)))
    series = collect(profile.signals(), pages)
    (sample,) = engine_samples(profile, series, staleness=5.0)
    assert sample.memory_signal == PROCESS_TREE_MEMORY
    assert sample.memory_bytes == pytest.approx(sum(round(e.memory) for e in engines))


def test_the_memory_growth_fault() -> None:
    book = RuleBook()
    rule, _ = book.add(
        parse_injection({"namespace": NS, "pod": "p", "kind": "memory_growth", "gib_per_hour": 3}),
        100.0,
        {"u1#0"},
    )
    assert rule.as_json()["gib_per_hour"] == 3.0
    assert not rule.survive_restart  # the process's own: a fresh one starts clean
    active = book.resolve(
        instance="u1#0", namespace=NS, pod="p", job="j", role="rollout", started=0.0
    )
    assert active.memory_growth == (100.0, 3.0)
    assert active.memory_grown(100.0 + HOUR) == pytest.approx(3 * GIB)
    restarted = book.resolve(
        instance="u1#1", namespace=NS, pod="p", job="j", role="rollout", started=500.0
    )
    assert restarted.memory_grown(500.0 + HOUR) == 0.0
    for bad, message in (({}, "gib_per_hour is required"), ({"gib_per_hour": -1}, "between")):
        with pytest.raises(FaultError, match=message):
            parse_injection({"namespace": NS, "pod": "p", "kind": "memory_growth", **bad})
    with pytest.raises(FaultError, match="does not take"):
        parse_injection(
            {
                "namespace": NS,
                "job": "j",
                "role": "verifier",
                "kind": "memory_growth",
                "gib_per_hour": 1,
            }
        )


def test_the_model_is_the_base_the_weights_the_batch_and_the_leak() -> None:
    memory = HostMemory(noise_bytes=0.0)
    rng = random.Random(0)
    assert memory.reading(rng, sleep_level=0, running=0, grown=0) == 40 * GIB
    assert memory.reading(rng, sleep_level=1, running=0, grown=0) == 40 * GIB + WEIGHT_BYTES
    assert memory.reading(rng, sleep_level=0, running=512, grown=GIB) == 42 * GIB
    assert grown(2.0, None, 10.0) == 0.0
    assert grown(2.0, 0.0, HOUR / 2) == GIB


def test_physical_engines_read_the_same_model_as_their_pods_working_set() -> None:
    sync = PhysicalProfile(driver=Driver(kind="sync"))
    leaking = replace(sync, memory_growth=MemoryGrowth(start=HOUR, gib_per_hour=2.0))
    pinned = replace(sync, memory_pinned_from=HOUR)
    engines = {
        name: PhysicalEngine(profile, seed=0)
        for name, profile in (("sync", sync), ("leaking", leaking), ("pinned", pinned))
    }
    readings: dict[str, dict[str, list[float]]] = {name: {} for name in engines}
    for t in range(30, int(4 * HOUR) + 1, 30):
        for name, engine in engines.items():
            sample = engine.sample(float(t))
            assert sample is not None and sample.memory_signal == WORKING_SET_MEMORY
            assert sample.memory_bytes is not None
            state = "asleep" if sample.sleeping else f"awake-{t // int(HOUR)}"
            readings[name].setdefault(state, []).append(sample.memory_bytes)
    healthy = readings["sync"]
    assert min(healthy["asleep"]) - min(healthy["awake-3"]) == pytest.approx(
        WEIGHT_BYTES, abs=0.5 * GIB
    )
    assert min(healthy["awake-0"]) == pytest.approx(min(healthy["awake-3"]), abs=0.5 * GIB)
    grew = min(readings["leaking"]["awake-3"]) - min(healthy["awake-3"])
    assert grew == pytest.approx(4 * GIB, abs=0.6 * GIB)  # 2 GiB/h, 2 to 3 h after its start
    kept = min(readings["pinned"]["awake-3"]) - min(healthy["awake-3"])
    assert kept == pytest.approx(WEIGHT_BYTES, abs=0.5 * GIB)  # once, not per sleep
    assert max(readings["pinned"]["asleep"]) < max(healthy["asleep"]) + 0.5 * GIB
