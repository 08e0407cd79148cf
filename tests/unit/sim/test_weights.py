"""Simulated engines' weights and a driver's requests on them (issue #17): the generation an
engine serves and exports, the running gauge a driver's requests cap, and the requests lost
when the engine process goes away."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.sim.client import SimError
from rljob.dev.sim.faults import Active
from rljob.dev.sim.models import EngineModel
from rljob.dev.sim.profiles import EngineProfile
from rljob.dev.sim.weights import ENGINE_POLICY_GENERATION, EngineRequests, EngineWeights
from tests.unit.sim.test_app import NS, T0, Bed, make_pod

ON_SESSION_LOOP = pytest.mark.asyncio(loop_scope="session")  # the app fixtures' loop


def _page(model: EngineModel) -> dict[str, float]:
    return {
        s.name: s.value
        for family in text_string_to_metric_families(model.render())
        for s in family.samples
        if not s.labels.get("sleep_state")
    }


@pytest.mark.parametrize(
    ("sends", "at", "in_flight", "completed"),
    [
        pytest.param([(0.0, 3.0, 2)], 2.9, 2, 0, id="running-before-their-end"),
        pytest.param([(0.0, 3.0, 2)], 3.0, 0, 2, id="done-at-their-end"),
        pytest.param([(0.0, 3.0, 1), (1.0, 3.0, 1)], 3.5, 1, 1, id="only-the-earlier-ended"),
        pytest.param([(1.0, 1.0, 1), (0.0, 5.0, 1)], 2.5, 1, 1, id="ends-out-of-send-order"),
    ],
)
def test_requests_end_after_their_duration(
    sends: list[tuple[float, float, int]], at: float, in_flight: int, completed: int
) -> None:
    requests = EngineRequests()
    for now, seconds, count in sends:
        requests.send(now, seconds, count)
    requests.settle(at)
    assert (requests.in_flight(), requests.completed) == (in_flight, completed)
    assert requests.sent == sum(count for _, _, count in sends)


def test_an_abandoned_engine_loses_the_requests_not_yet_ended() -> None:
    requests = EngineRequests()
    requests.send(0.0, 1.0, 3)
    requests.send(0.5, 4.0, 2)
    assert requests.abandon(2.0) == 2
    assert (requests.in_flight(), requests.completed) == (0, 3)


@pytest.mark.parametrize(
    ("driven", "held", "model", "gauges"),
    [
        pytest.param(False, 0, (64.0, 16.0), (64.0, 16.0), id="undriven-the-model-says"),
        pytest.param(True, 200, (64.0, 16.0), (64.0, 16.0), id="driven-past-a-batch"),
        pytest.param(True, 70, (64.0, 16.0), (64.0, 6.0), id="few-waiting"),
        pytest.param(True, 5, (64.0, 16.0), (5.0, 0.0), id="draining"),
        pytest.param(True, 0, (64.0, 16.0), (0.0, 0.0), id="drained-or-not-yet-sent-to"),
    ],
)
def test_a_driven_engine_shows_only_the_driver_requests(
    driven: bool, held: int, model: tuple[float, float], gauges: tuple[float, float]
) -> None:
    weights = EngineWeights(driven=driven)
    weights.requests.send(0.0, 10.0, held)
    assert weights.served(*model) == gauges


def test_an_engine_page_exports_its_generation_and_the_driver_running_gauge() -> None:
    model = EngineModel(EngineProfile(noise=0.0), "e1", T0)
    model.advance(T0 + 5)
    assert _page(model)[ENGINE_POLICY_GENERATION] == 0.0  # the weights on its command line
    assert _page(model)["vllm:num_requests_running"] == 64.0
    model.weights.push(7)
    model.weights.driven = True
    model.weights.requests.send(T0 + 5, 2.0, 3)
    page = _page(model)
    assert (page[ENGINE_POLICY_GENERATION], page["vllm:num_requests_running"]) == (7.0, 3.0)
    model.advance(T0 + 8)
    assert _page(model)["vllm:num_requests_running"] == 0.0  # the requests ended: drained


SIM_MODEL = {"model_path": "sim-model"}


@pytest.mark.parametrize(
    ("exporter", "path", "pushed", "answer"),
    [
        pytest.param("sglang", "/model_info", 0, {**SIM_MODEL, "weight_version": "default"},
                     id="sglang-before-a-push"),
        pytest.param("sglang", "/model_info", 7, {**SIM_MODEL, "weight_version": "7"},
                     id="sglang-pushed"),
        pytest.param("sglang", "/get_weight_version", 7, None, id="sglang-deprecated-route"),
        pytest.param("vllm", "/weight_info", 7, {"weight_version": "7"}, id="vllm-dev-mode"),
        pytest.param("vllm", "/model_info", 7, None, id="vllm-has-no-model-info"),
    ],
)  # fmt: skip
def test_an_engine_answers_its_weight_version_on_its_own_route(
    exporter: str, path: str, pushed: int, answer: dict[str, str] | None
) -> None:
    model = EngineModel(EngineProfile(exporter=exporter), "e1", T0)
    if pushed:
        model.weights.push(pushed)
    assert model.weight_version(path) == answer


def test_without_an_exporter_the_page_has_no_generation_gauge() -> None:
    model = EngineModel(EngineProfile(noise=0.0, generation_gauge=False), "e1", T0)
    model.advance(T0 + 5)
    assert ENGINE_POLICY_GENERATION not in _page(model)


@pytest.fixture
async def bed(tmp_path: Path) -> AsyncIterator[Bed]:
    bed = Bed(tmp_path)
    await bed.app.start()
    await bed.app.sync()
    yield bed
    await bed.app.close()


@ON_SESSION_LOOP
async def test_a_push_sets_the_generation_and_a_deleted_engine_loses_its_requests(
    bed: Bed,
) -> None:
    pushed = await bed.call("push_weights", 4, namespace=NS, pod="r1")
    assert pushed == {"pushed": [f"{NS}/r1"], "generation": 4}
    assert (await bed.scrape("r1"))[ENGINE_POLICY_GENERATION] == 4.0
    with pytest.raises(SimError, match="404"):
        await bed.call("push_weights", 4, namespace=NS, pod="t0")  # a trainer has none
    engine = bed.app.workloads[f"{NS}/r1"].model
    assert isinstance(engine, EngineModel)
    engine.weights.requests.send(bed.clock.now, 3.0, 5)
    bed.clock.now += 1
    bed.pods = [p for p in bed.pods if p["metadata"]["name"] != "r1"]
    bed.pods.append(make_pod("r1b", "rollout", "u9"))
    await bed.app.sync()
    assert bed.app.lost.of(NS, "job1") == {"r1": 5}
    newcomer = bed.app.workloads[f"{NS}/r1b"].model
    assert isinstance(newcomer, EngineModel) and newcomer.weights.generation == 0
    lost = [e for e in bed.app.events if e["event"] == "requests-lost"]
    assert [(e["pod"], e["lost"]) for e in lost] == [(f"{NS}/r1", 5)]


@ON_SESSION_LOOP
async def test_a_restarted_engine_container_loses_its_requests_and_weights(bed: Bed) -> None:
    engine = bed.app.workloads[f"{NS}/r2"].model
    assert isinstance(engine, EngineModel)
    engine.weights.push(3)
    engine.weights.requests.send(bed.clock.now, 3.0, 2)
    bed.pods[1] = make_pod("r2", "rollout", "u2", restarts=1)
    await bed.app.sync()
    restarted = bed.app.workloads[f"{NS}/r2"].model
    assert isinstance(restarted, EngineModel) and restarted.weights.generation == 0
    assert bed.app.lost.of(NS, "job1") == {"r2": 2}


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("deletion_asked_after", "lost"),
    [
        pytest.param(1.0, 4, id="terminating-seen-late-loses-what-ran-at-the-sigterm"),
        pytest.param(None, 0, id="gone-without-a-deletion-seen-loses-what-runs-at-the-poll"),
    ],
)
@ON_SESSION_LOOP
async def test_a_terminating_engine_loses_the_requests_in_flight_when_its_deletion_was_asked(
    bed: Bed, deletion_asked_after: float | None, lost: int
) -> None:
    """The kubelet's SIGTERM ends a vLLM server's requests at once (vllm/entrypoints/launcher.py
    serve_http): a poll that sees the terminating pod later must not let them finish."""
    engine = bed.app.workloads[f"{NS}/r1"].model
    assert isinstance(engine, EngineModel)
    engine.weights.requests.send(bed.clock.now, 3.0, 4)
    pod = next(p for p in bed.pods if p["metadata"]["name"] == "r1")
    if deletion_asked_after is None:
        bed.pods.remove(pod)
    else:
        grace = 30
        asked = bed.clock.now + deletion_asked_after
        pod["metadata"]["deletionTimestamp"] = _rfc3339(asked + grace)
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
    bed.clock.now += 5  # the poll comes after every request would have ended
    await bed.app.sync()
    assert f"{NS}/r1" not in bed.app.workloads
    assert bed.app.lost.of(NS, "job1").get("r1", 0) == lost


@pytest.mark.parametrize(
    ("idle_for", "running"),
    [
        pytest.param(20.0, 5.0, id="frozen-until-its-idle-log"),
        pytest.param(31.0, 0.0, id="idle-log-after-30s-shows-none-running"),
    ],
)
def test_a_drained_sglang_engine_logs_its_gauges_when_idle(idle_for: float, running: float) -> None:
    """SGLang's idle scheduler logs its gauges every 30 s (scheduler_runtime_checker_mixin.py
    @008e7b87, _maybe_log_idle_metrics): a drain of it reads 0 running then, not never."""
    engine = EngineModel(EngineProfile(exporter="sglang"), "s", T0)
    engine.weights.driven = True
    engine.weights.requests.send(T0, 10.0, 5)
    engine.advance(T0 + 5)
    assert _page(engine)["sglang:num_running_reqs"] == 5.0
    engine.advance(T0 + 10 + idle_for)  # its requests ended at T0 + 10; none sent since
    assert _page(engine)["sglang:num_running_reqs"] == running


@pytest.mark.parametrize("mode", ["paused", "stalled"])
def test_a_paused_or_wedged_sglang_engine_keeps_its_page_past_the_idle_log(mode: str) -> None:
    """Only an idle scheduler logs every 30 s: paused or wedged, SGLang logs nothing at all."""
    engine = EngineModel(EngineProfile(exporter="sglang"), "s", T0)
    for second in range(1, 6):
        engine.advance(T0 + second)
    frozen = engine.render()
    faults = Active(pause=(T0 + 5, True)) if mode == "paused" else Active(stall_since=T0 + 5)
    for second in range(6, 60):
        engine.advance(T0 + second, faults)
    assert engine.render() == frozen


@ON_SESSION_LOOP
async def test_an_engine_a_driver_saw_leave_loses_its_requests_then_and_once(bed: Bed) -> None:
    """The driver's word that an engine left (its deletion was asked) ends its requests at once;
    the poll that later finds the pod gone finds none left to lose."""
    engine = bed.app.workloads[f"{NS}/r1"].model
    assert isinstance(engine, EngineModel)
    engine.weights.requests.send(bed.clock.now, 3.0, 4)
    bed.app.end_requests(f"{NS}/r1", bed.clock.now + 1)
    bed.app.end_requests(f"{NS}/gone", bed.clock.now + 1)  # not attached: nothing to do
    bed.pods = [p for p in bed.pods if p["metadata"]["name"] != "r1"]
    bed.clock.now += 5
    await bed.app.sync()
    assert bed.app.lost.of(NS, "job1") == {"r1": 4}
    lost = [e["lost"] for e in bed.app.events if e["event"] == "requests-lost"]
    assert lost == [4]
