"""The rollout engines' readings from the health loop to the passes (issue #17): both metrics
sources give each rollout pod its running count and generation, a pass gets the newest ones in
PassInputs.engine_readings, a Gated job is woken when one could move a drain or a gate, and a
reading reaches a pass within one health interval of the engine's gauge changing."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from aiohttp import web

from rljob.adapters.leadership import Leadership
from rljob.adapters.metrics import (
    Collected,
    DirectSource,
    PrometheusSource,
    Queries,
    SourceKey,
    SourceKind,
)
from rljob.api import RLJob, parse_rljob
from rljob.health.evaluation import Evaluation
from rljob.health.monitor import JobKey
from rljob.health.monitor_engines import EngineGauges
from rljob.health.profiles import (
    ENGINE_POLICY_GENERATION,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    Series,
)
from rljob.reconcile.engine_readings import EngineReading
from rljob.runtime.gather import Gatherer
from rljob.runtime.health_loop import HealthScheduler
from rljob.runtime.memory import JobMemory
from rljob.runtime.runtime import Runtime, RuntimeOptions, engine_readings
from tests.unit.reconcile.world import T0, World, example_body
from tests.unit.runtime.test_gather import Checkpoints
from tests.unit.runtime.test_passes import Health, Kube
from tests.unit.test_metrics_sources import Recorder, item, matrix, serve

KEY: JobKey = ("ns1", "j")
POD = "j-rollout-0"


def job(weight_sync: str = "Ungated", source: dict[str, Any] | None = None) -> RLJob:
    rollout = {"replicas": 1, "weightSync": weight_sync}
    health: dict[str, Any] = {"interval": "5s"}
    if source is not None:
        health["source"] = source
    return parse_rljob(
        {
            "apiVersion": "rljob.io/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": "j", "namespace": "ns1", "uid": "uid-j"},
            "spec": {
                "image": "img",
                "roles": {"rollout": rollout, "trainer": {"nodes": 1}},
                "health": health,
            },
        }
    )


class Pod:
    def __init__(self, name: str, role: str = "rollout") -> None:
        self.name, self.role, self.phase, self.ready = name, role, "Running", True


async def nothing(key: JobKey, evaluations: list[Evaluation]) -> None:
    return None


# ------------------------------------------------------------------ both sources

ENGINE_PAGE = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0
# TYPE rljob_engine_policy_generation gauge
rljob_engine_policy_generation 7.0
"""


def prometheus_answer(form: dict[str, str]) -> Any:
    """The running gauge and the generation of POD at t=95; no other series."""
    name = re.search(r'__name__="([^"]+)"', form["query"])
    values = {"vllm:num_requests_running": "0", "rljob_engine_policy_generation": "7"}
    metric = name.group(1) if name else ""
    if metric not in values:
        return matrix()
    return matrix(item(POD, [[95.0, values[metric]]]))


@pytest.mark.parametrize("kind", ["prometheus", "direct"])
async def test_each_source_gives_a_rollout_pod_its_reading(kind: SourceKind) -> None:
    recorder = Recorder(prometheus_answer)

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=ENGINE_PAGE, content_type="text/plain")

    async with serve({**recorder.routes(), "/metrics": page}) as url:
        address = url.removeprefix("http://")

        def source(key: SourceKey) -> PrometheusSource | DirectSource:
            if key.kind == "prometheus":
                return PrometheusSource(key.url)
            return DirectSource(lambda namespace, pod: address, clock=lambda: 95.0)

        spec = {"prometheus": {"url": url}} if kind == "prometheus" else {"direct": {}}
        scheduler = HealthScheduler(source, nothing, clock=lambda: 100.0)
        scheduler.register(job("Gated", spec), {"rollout": [Pod(POD)]})
        await scheduler.tick()
        gauges = scheduler.engine_gauges(KEY)
        gated = scheduler.weight_gated(KEY)
        scheduler.forget(KEY)
        forgotten = scheduler.engine_gauges(KEY)
        await scheduler.close()
    assert gauges == {POD: EngineGauges(95.0, 0.0, 7)}
    assert gated and forgotten == {}
    if kind == "prometheus":
        generation = [f["query"] for f in recorder.forms if "policy_generation" in f["query"]]
        selector = (
            '{__name__="rljob_engine_policy_generation", namespace=~"ns1", pod=~"j-rollout-0"}'
        )
        # The first round's backfill (a range query) and its instant query over the lookback.
        assert generation == [selector, f"{selector}[15000ms]"]


# ------------------------------------------------------------------ the passes' inputs


def test_readings_are_sorted_by_pod_with_utc_times() -> None:
    gauges = {
        "b": EngineGauges(1_800_000_000.5, 0.0, None),
        "a": EngineGauges(1_800_000_001.0, 3.0, 7),
    }
    at = dt.datetime(2027, 1, 15, 8, 0, tzinfo=dt.UTC)
    assert engine_readings(gauges) == (
        EngineReading("a", at + dt.timedelta(seconds=1), 3.0, 7),
        EngineReading("b", at + dt.timedelta(seconds=0.5), 0.0, None),
    )


async def test_every_pass_gets_the_jobs_latest_readings() -> None:
    world = World(example_body())
    memory = JobMemory(("rl", "grpo-demo"))
    memory.engine_readings = (EngineReading("grpo-demo-rollout-a", T0, 0.0, 3),)
    gatherer = Gatherer(kube=None, checkpoints=Checkpoints())  # type: ignore[arg-type]
    inputs = await gatherer.inputs(world.job, world.observed, memory, T0, None)
    assert inputs.engine_readings == memory.engine_readings


class EngineHealth(Health):
    """The health loop's surface, with the rollout readings and weight sync a round leaves."""

    def __init__(self, gated: bool) -> None:
        super().__init__()
        self.gauges: dict[str, EngineGauges] = {}
        self.gated = gated

    def engine_gauges(self, key: Any) -> dict[str, EngineGauges]:
        return self.gauges

    def weight_gated(self, key: Any) -> bool:
        return self.gated


ROUNDS: list[tuple[dict[str, EngineGauges], bool]] = [
    ({"e0": EngineGauges(5.0, 3.0, 7)}, True),  # a first generation: a gate may open
    ({"e0": EngineGauges(10.0, 2.0, 7)}, False),  # fewer requests: nothing to decide
    ({"e0": EngineGauges(15.0, 0.0, 7)}, True),  # drained: a drain can end
    ({"e0": EngineGauges(20.0, 0.0, 7)}, False),  # still drained: not every round
    ({"e0": EngineGauges(25.0, 0.0, 7), "e1": EngineGauges(25.0, 4.0, None)}, False),
    ({"e0": EngineGauges(30.0, 0.0, 7), "e1": EngineGauges(30.0, 4.0, 7)}, True),  # synced
    ({"e0": EngineGauges(35.0, 1.0, 8), "e1": EngineGauges(35.0, 4.0, 8)}, True),  # a push
    ({"e1": EngineGauges(40.0, 4.0, 8)}, False),  # e0 left
]


@pytest.mark.parametrize(
    "gated", [pytest.param(True, id="Gated"), pytest.param(False, id="Ungated")]
)
async def test_a_round_wakes_a_gated_job_only_when_a_reading_could_move_a_drain_or_a_gate(
    gated: bool,
) -> None:
    world = World(example_body())
    health = EngineHealth(gated)
    runtime = Runtime(Kube(world, 0), RuntimeOptions(), Leadership(None, None), health=health)  # type: ignore[arg-type]
    key = ("rl", "grpo-demo")
    memory = runtime.memories.of(world.body["metadata"]["uid"], key)
    woken: list[Any] = []
    runtime.workers.wake = lambda key, cause="": woken.append((key, cause))  # type: ignore[method-assign]
    for number, (gauges, wakes) in enumerate(ROUNDS):
        health.gauges = gauges
        before = len(woken)
        await runtime._on_health(key, [])
        assert len(woken) - before == (1 if wakes and gated else 0), f"round {number}"
        assert memory.engine_readings == engine_readings(gauges), "kept in both modes"


# ------------------------------------------------------------------ latency


class DrainingEngine:
    """A direct-like source (sampled when asked) of one engine whose requests end at `idle_at`."""

    kind: SourceKind = "direct"
    supports_history = False

    def __init__(self, idle_at: float) -> None:
        self.idle_at = idle_at

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        collected: Collected = {}
        for signal in queries:
            held = 0.0 if at >= self.idle_at else 5.0
            value = {REQUESTS_RUNNING: held, REQUESTS_WAITING: held}.get(signal.name, 1.0)
            if signal.name == ENGINE_POLICY_GENERATION:
                value = 7.0
            collected[signal] = {("ns1", POD): [Series((), ((at, value),))]}
        return collected

    async def history(self, queries: Queries, **_: float) -> Collected:
        return {signal: {} for signal in queries}

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("idle_at", [10.0, 12.3, 14.9])
async def test_a_pass_sees_a_drained_engine_within_one_health_interval(idle_at: float) -> None:
    clock = [0.0]
    seen: list[float] = []
    holder: list[HealthScheduler] = []

    async def on_round(key: JobKey, evaluations: list[Evaluation]) -> None:
        running = holder[0].engine_gauges(key)[POD].running
        if running == 0 and not seen:
            seen.append(clock[0])

    scheduler = HealthScheduler(
        lambda key: DrainingEngine(idle_at),
        on_round,
        clock=lambda: clock[0],
    )
    holder.append(scheduler)
    scheduler.register(job("Gated", {"direct": {}}), {"rollout": [Pod(POD)]})
    while clock[0] < 40.0 and not seen:
        clock[0] += 1.0  # the loop's tick
        await scheduler.tick()
    await scheduler.close()
    assert seen and 0 <= seen[0] - idle_at <= 5.0, (idle_at, seen)
