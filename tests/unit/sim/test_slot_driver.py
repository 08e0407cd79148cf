"""The slime-like slot driver (rljob.dev.sim.slot_driver): addresses fixed at start, each
request and update routed as kube-proxy routes a ClusterIP (a ready endpoint; a request stays
on its pod), an update to an address without one failing the step and the trainer; SGLang's
POST /update_weights_from_disk on a simulated engine and its --weight-version at start; then
the registry running it through the control API."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from rljob.dev.kubeapi import KubeApi
from rljob.dev.sim.client import SimError
from rljob.dev.sim.driver_kube import KubeSlots
from rljob.dev.sim.drivers import Drivers
from rljob.dev.sim.models import EngineModel, TrainerModel
from rljob.dev.sim.profiles import EngineProfile, ProfileError, override
from rljob.dev.sim.slot_driver import (
    SlotAddress,
    SlotDriver,
    SlotSettings,
    checkpoint,
    ready_pods,
    ready_pods_by_selector,
)
from tests.unit.sim.test_app import NS, T0, Bed, make_pod

SETTINGS = SlotSettings(step_seconds=3.0, request_seconds=2.0, per_engine=2)
SLOTS = ("job1-rollout-0", "job1-rollout-1")
SGLANG_AT_0 = {"noise": 0, "exporter": "sglang", "start_weight_version": "0"}


def address(service: str) -> SlotAddress:
    return SlotAddress(service, f"{service}.{NS}.svc:8000")


class Cluster:
    """Engines by pod and the ready endpoints behind each Service; the lookups a driver gets
    count what they were asked."""

    def __init__(self, ready: Mapping[str, Sequence[str]], *pods: str) -> None:
        self.ready = {service: tuple(found) for service, found in ready.items()}
        self.engines = {pod: self.engine(pod) for pod in pods}
        self.asked: list[str] = []

    @staticmethod
    def engine(pod: str) -> EngineModel:
        return EngineModel(EngineProfile(noise=0.0, exporter="sglang", start_weight_version="0"),
                           pod, T0)  # fmt: skip

    def endpoints(self, service: str) -> tuple[str, ...]:
        self.asked.append(service)
        return self.ready.get(service, ())

    def driver(self, services: Sequence[str] = SLOTS) -> SlotDriver:
        addresses = [address(s) for s in services]
        return SlotDriver(SETTINGS, addresses, self.endpoints, self.engines.get, T0)

    def versions(self) -> dict[str, int]:
        return {pod: e.weights.generation for pod, e in self.engines.items()}


def run(driver: SlotDriver, start: float, end: float, step: float = 0.25) -> list[str]:
    """Ticks from start to end; returns what the trainer's process ended with, if anything."""
    failed, t = [], start
    while t <= end:
        outcome = driver.tick(t)
        if outcome.failed is not None:
            failed.append(outcome.failed)
        t += step
    return failed


def in_flight(engine: EngineModel, at: float) -> int:
    engine.weights.requests.settle(at)
    return engine.weights.requests.in_flight()


def test_the_addresses_are_fixed_at_start_and_never_re_read() -> None:
    cluster = Cluster({SLOTS[0]: ["e1"], SLOTS[1]: ["e2"]}, "e1", "e2", "e3")
    driver = cluster.driver()
    cluster.ready["job1-rollout-2"] = ("e3",)  # a Service that appeared after the start
    assert run(driver, T0, T0 + 7) == []
    assert set(cluster.asked) == set(SLOTS)
    assert [a.service for a in driver.addresses] == list(SLOTS)
    assert cluster.engines["e3"].weights.requests.sent == 0


def test_updates_reach_each_resolved_engine_every_step() -> None:
    cluster = Cluster({SLOTS[0]: ["e1"], SLOTS[1]: ["e2"]}, "e1", "e2")
    driver = cluster.driver()
    assert run(driver, T0, T0 + 6.5) == []
    assert (driver.generation, cluster.versions()) == (2, {"e1": 2, "e2": 2})
    answer = cluster.engines["e1"].weight_version("/model_info")
    assert answer == {"model_path": checkpoint(2), "weight_version": "2"}
    report = driver.report()
    assert (report["steps"], report["updates"], report["failed_updates"]) == (
        2, {"e1": 2, "e2": 2}, 0,
    )  # fmt: skip
    assert report["sent_stale"] == {}


def test_a_lent_slot_updates_its_engine_twice_without_a_failure() -> None:
    """During a repair both Services select the engine the victim's slot was lent to."""
    cluster = Cluster({SLOTS[0]: ["e1"], SLOTS[1]: ["e1"]}, "e1", "e2")
    driver = cluster.driver()
    assert run(driver, T0, T0 + 3) == []
    assert driver.report()["updates"] == {"e1": 2}
    assert cluster.versions() == {"e1": 1, "e2": 0}
    assert in_flight(cluster.engines["e1"], T0 + 3) == 2 * SETTINGS.per_engine


def test_a_request_stays_on_the_pod_it_was_sent_to_until_it_ends() -> None:
    cluster = Cluster({SLOTS[0]: ["e1"]}, "e1", "e2")
    driver = cluster.driver(SLOTS[:1])
    run(driver, T0, T0 + 0.5)  # two requests on e1, ending at +2
    cluster.ready[SLOTS[0]] = ("e2",)  # the slot moved: a new connection reaches e2
    run(driver, T0 + 0.75, T0 + 1.75)
    e1, e2 = cluster.engines["e1"], cluster.engines["e2"]
    assert (in_flight(e1, T0 + 1.75), e2.weights.requests.sent) == (2, 0)
    run(driver, T0 + 2, T0 + 2)  # they ended: their replacements go to e2
    assert (in_flight(e1, T0 + 2), in_flight(e2, T0 + 2)) == (0, 2)
    resolved = driver.report()["resolved"][SLOTS[0]]
    assert [pod for _, pod in resolved] == ["e1", "e2"]
    assert cluster.versions() == {"e1": 0, "e2": 0}  # no step yet


@pytest.mark.parametrize(
    ("ready", "engines", "why"),
    [
        pytest.param({SLOTS[0]: ["e1"]}, ("e1", "e2"), "no ready endpoint", id="no-endpoint"),
        pytest.param(
            {SLOTS[0]: ["e1"], SLOTS[1]: ["e9"]}, ("e1",), "its endpoint e9 did not answer",
            id="endpoint-gone",
        ),
    ],
)  # fmt: skip
def test_an_update_without_a_ready_endpoint_fails_the_step_and_the_process(
    ready: dict[str, list[str]], engines: tuple[str, ...], why: str
) -> None:
    cluster = Cluster(ready, *engines)
    driver = cluster.driver()
    failed = run(driver, T0, T0 + 3)
    assert len(failed) == 1 and "Connection refused" in failed[0], failed
    assert f"host='{SLOTS[1]}.{NS}.svc', port=8000" in failed[0]
    report = driver.report()
    assert (report["failed_updates"], report["restarts"]) == (1, 1)
    assert report["failures"] == [[T0 + 3, SLOTS[1], why]]
    assert driver.generation == SETTINGS.first_generation  # a new process counts from 0 again
    assert run(driver, T0 + 3.25, T0 + 5.75) == []  # its next step is a full step later


def test_without_a_count_an_address_keeps_its_engine_batch_and_queue_busy() -> None:
    """per_engine 0: saturated (max_running 64 plus 16 waiting), as the drift detector reads."""
    cluster = Cluster({SLOTS[0]: ["e1"]}, "e1")
    addresses = [address(SLOTS[0]), address(SLOTS[1])]
    settings = SlotSettings(per_engine=0)
    driver = SlotDriver(settings, addresses, cluster.endpoints, cluster.engines.get, T0)
    driver.tick(T0)
    assert in_flight(cluster.engines["e1"], T0) == 64 + 16
    assert driver.report()["refused_requests"] == 1  # the address without an endpoint


def test_a_request_to_an_engine_behind_the_driver_counts_as_stale() -> None:
    cluster = Cluster({SLOTS[0]: ["e1"]}, "e1", "e2")
    driver = cluster.driver(SLOTS[:1])
    run(driver, T0, T0 + 3)  # e1 at 1
    cluster.ready[SLOTS[0]] = ("e2",)  # e2 still at 0 takes the slot
    run(driver, T0 + 3.25, T0 + 5)
    assert driver.report()["sent_stale"] == {"e2": 2}


@pytest.mark.parametrize(
    ("slices", "ready"),
    [
        pytest.param([{"ready": True, "pod": "e1"}], ("e1",), id="ready"),
        pytest.param([{"ready": False, "pod": "e1"}], (), id="not-ready"),
        pytest.param([{"ready": None, "pod": "e1"}], ("e1",), id="unknown-reads-as-ready"),
        pytest.param([{"ready": True, "pod": "e1", "kind": "Node"}], (), id="not-a-pod"),
        pytest.param([{"ready": True, "pod": "e1", "service": "other"}], (), id="another-service"),
        pytest.param(
            [{"ready": True, "pod": "e2"}, {"ready": True, "pod": "e1"}], ("e1", "e2"),
            id="two-slices",
        ),
    ],
)  # fmt: skip
def test_ready_pods_come_from_the_endpoint_slices(
    slices: list[dict[str, Any]], ready: tuple[str, ...]
) -> None:
    def piece(ready: bool | None, pod: str, kind: str = "Pod", service: str = SLOTS[0]) -> Any:
        conditions = {} if ready is None else {"ready": ready}
        endpoint = {"conditions": conditions, "targetRef": {"kind": kind, "name": pod}}
        labels = {"kubernetes.io/service-name": service}
        return {"metadata": {"labels": labels}, "endpoints": [endpoint]}

    assert ready_pods([piece(**s) for s in slices], [SLOTS[0]]) == {SLOTS[0]: ready}


SLOT_SELECTOR = {"rljob.io/job": "job1", "rljob.io/role": "rollout", "rljob.io/slot-0": "held"}


def service(name: str = SLOTS[0], publish: bool = False, **selector: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": selector or SLOT_SELECTOR, "ports": [{"port": 8000}]}
    if publish:
        spec["publishNotReadyAddresses"] = True
    labels = {"rljob.io/job": "job1", "rljob.io/role": "rollout"}
    return {"metadata": {"name": name, "namespace": NS, "labels": labels}, "spec": spec}


def pod(name: str, *, ready: bool = True, slot: bool = True, **status: Any) -> dict[str, Any]:
    labels = dict(SLOT_SELECTOR) if slot else {"rljob.io/job": "job1", "rljob.io/role": "rollout"}
    namespace = status.pop("namespace", NS)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if status.pop("deleting", False):
        meta["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    body = {"phase": "Running", "podIP": "127.0.10.1", "conditions": conditions, **status}
    return {"metadata": meta, "status": body}


@pytest.mark.parametrize(
    ("pods", "svc", "ready"),
    [
        pytest.param([pod("e1")], service(), ("e1",), id="ready-holder"),
        pytest.param([pod("e1", slot=False)], service(), (), id="not-holding-the-slot"),
        pytest.param([pod("e1", ready=False)], service(), (), id="not-ready-behind-its-gate"),
        pytest.param([pod("e1", deleting=True)], service(), (), id="terminating"),
        pytest.param([pod("e1", phase="Succeeded")], service(), (), id="terminal"),
        pytest.param([pod("e1", podIP="")], service(), (), id="no-ip-yet"),
        pytest.param([pod("e1", namespace="other")], service(), (), id="another-namespace"),
        pytest.param([pod("e1", ready=False)], service(publish=True), ("e1",),
                     id="publishes-not-ready"),
        pytest.param([pod("e2"), pod("e1")], service(), ("e1", "e2"), id="lent-two-holders"),
    ],
)  # fmt: skip
def test_ready_pods_as_the_endpoint_slice_controller_would_publish_them(
    pods: list[dict[str, Any]], svc: dict[str, Any], ready: tuple[str, ...]
) -> None:
    assert ready_pods_by_selector([svc], pods) == {SLOTS[0]: ready}


class FakeApi:
    """GETs answered from lists by path; the paths asked."""

    def __init__(self, services: list[Any], pods: list[Any], slices: list[Any]) -> None:
        self.lists = {"/services": services, "/pods": pods, "/endpointslices": slices}
        self.asked: list[str] = []

    def get(self, path: str) -> dict[str, Any]:
        kind = "/" + path.split("?", maxsplit=1)[0].rsplit("/", 1)[-1]
        self.asked.append(kind)
        return {"items": self.lists[kind]}


def endpoint_slice(service: str, pod: str) -> dict[str, Any]:
    endpoint = {"conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": pod}}
    labels = {"kubernetes.io/service-name": service}
    return {"metadata": {"labels": labels}, "endpoints": [endpoint]}


@pytest.mark.parametrize(
    ("slices", "ready", "source"),
    [
        pytest.param([endpoint_slice(SLOTS[0], "e9")], {SLOTS[0]: ("e9",)}, "EndpointSlices",
                     id="a-cluster-with-endpoint-slices"),
        pytest.param([], {SLOTS[0]: ("e1",)}, "pods", id="the-bed-without-them"),
    ],
)  # fmt: skip
def test_kube_slots_read_the_slot_services_and_their_ready_endpoints(
    slices: list[Any], ready: dict[str, tuple[str, ...]], source: str
) -> None:
    services = [service(), service("job1-rollout-headless"), service("job1-rollout")]
    api = FakeApi(services, [pod("e1")], slices)
    slots = KubeSlots(cast(KubeApi, api))
    assert slots.slot_addresses(NS, "job1") == [address(SLOTS[0])]
    assert slots.ready_endpoints(NS, [SLOTS[0]]) == ready
    assert slots.ready_endpoints(NS, [SLOTS[0]]) == ready
    assert slots.sources == {NS: source}
    tail = ["/endpointslices"] if source == "EndpointSlices" else ["/services", "/pods"]
    assert api.asked[-len(tail) :] == tail  # the source chosen once is kept


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param({"step_seconds": 0}, "must be > 0", id="no-step"),
        pytest.param({"per_engine": 1.5}, "whole number", id="half-a-request"),
        pytest.param({"push_seconds": 1}, "unknown slot driver settings", id="unknown"),
    ],
)
def test_bad_slot_settings_are_refused(body: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        SlotSettings.parse(body)


# ---------------------------------------------------------------------- the engine's route

SUCCEEDED = "Succeeded to update model weights."
UPDATE = "/update_weights_from_disk"


@pytest.mark.parametrize(
    ("body", "status", "answer", "reports"),
    [
        pytest.param(
            {"model_path": "/ckpt/v3", "weight_version": "3"},
            200, {"success": True, "message": f"{SUCCEEDED} Weight version updated to 3."},
            {"model_path": "/ckpt/v3", "weight_version": "3"}, id="loaded",
        ),
        pytest.param(
            {"model_path": "/ckpt/v3"}, 200, {"success": True, "message": SUCCEEDED},
            {"model_path": "/ckpt/v3", "weight_version": "0"}, id="no-version-keeps-its-own",
        ),
        pytest.param(
            {"weight_version": "3"}, 400, {"success": False, "message": "model_path is required"},
            {"model_path": "sim-model", "weight_version": "0"}, id="no-model-path",
        ),
        pytest.param(
            {"model_path": "/ckpt/v3", "weight_version": "v3"}, 400, {"success": False},
            {"model_path": "sim-model", "weight_version": "0"}, id="not-a-whole-number",
        ),
        pytest.param(
            {"model_path": "/ckpt/v3", "weight_version": 3}, 400, {"success": False},
            {"model_path": "sim-model", "weight_version": "0"}, id="not-a-string",
        ),
        pytest.param(
            ["/ckpt/v3"], 400, {"success": False},
            {"model_path": "sim-model", "weight_version": "0"}, id="not-an-object",
        ),
    ],
)  # fmt: skip
def test_an_sglang_engine_updates_its_weights_from_disk(
    body: object, status: int, answer: dict[str, Any], reports: dict[str, str]
) -> None:
    engine = Cluster.engine("e1")
    got = engine.update_weights_from_disk(body)
    assert got is not None and got[0] == status
    assert answer.items() <= got[1].items() and got[1]["num_paused_requests"] == 0
    assert engine.weight_version("/model_info") == reports


def test_a_vllm_engine_has_no_update_from_disk() -> None:
    engine = EngineModel(EngineProfile(), "e1", T0)
    assert engine.update_weights_from_disk({"model_path": "/ckpt", "weight_version": "1"}) is None


@pytest.mark.parametrize(
    ("start", "reports", "generation"),
    [
        pytest.param("default", "default", 0, id="sglang-default"),
        pytest.param("0", "0", 0, id="weight-version-0"),
        pytest.param("5", "5", 5, id="weight-version-5"),
        pytest.param("rc-1", "rc-1", 0, id="not-a-number"),
    ],
)
def test_an_engine_reports_its_start_version_before_any_update(
    start: str, reports: str, generation: int
) -> None:
    profile = override(EngineProfile(exporter="sglang"), {"start_weight_version": start})
    engine = EngineModel(profile, "e1", T0)
    assert engine.weight_version("/model_info") == {
        "model_path": "sim-model", "weight_version": reports,
    }  # fmt: skip
    assert engine.weights.generation == generation


def test_an_empty_start_version_is_refused() -> None:
    with pytest.raises(ProfileError, match="start_weight_version"):
        override(EngineProfile(), {"start_weight_version": " "})


def _http(port: int, method: str, path: str, body: object = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw.startswith(b"{") else raw.decode()


@pytest.fixture
async def sglang_bed(tmp_path: Path) -> AsyncIterator[Bed]:
    bed = Bed(tmp_path)
    pod = make_pod("s1", "rollout", "u7")
    pod["metadata"]["annotations"]["sim.rljob.io/profile"] = json.dumps(SGLANG_AT_0)
    bed.pods.append(pod)
    await bed.app.start()
    await bed.app.sync()
    yield bed
    await bed.app.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_route_answers_over_http_as_sglang_does(sglang_bed: Bed) -> None:
    bed = sglang_bed
    port = bed.port("s1")

    async def http(path: str, body: object = None, to: int = port) -> tuple[int, Any]:
        return await asyncio.to_thread(_http, to, "GET" if body is None else "POST", path, body)

    assert await http("/model_info") == (200, {"model_path": "sim-model", "weight_version": "0"})
    update = {"model_path": "/ckpt/v1", "weight_version": "1"}
    status, answer = await http(UPDATE, update)
    assert (status, answer["success"]) == (200, True)
    assert await http("/model_info") == (200, update)
    status, answer = await http(UPDATE, {})
    assert (status, answer["success"]) == (400, False)
    assert (await http(UPDATE, update, to=bed.port("r1")))[0] == 404  # vLLM has no such route
    assert (await http("/metrics", {}))[0] == 405


# ---------------------------------------------------------------------- the registry


class FakeSlots:
    """The slot Services and EndpointSlices a test sets, and the trainers failed."""

    def __init__(self, ready: dict[str, tuple[str, ...]]) -> None:
        self.ready = ready
        self.address_reads = 0
        self.failed: list[tuple[str, str]] = []

    def slot_addresses(self, namespace: str, job: str) -> list[SlotAddress]:
        self.address_reads += 1
        return [address(s) for s in sorted(self.ready) if s.startswith(f"{job}-rollout-")]

    def ready_endpoints(
        self, namespace: str, services: Sequence[str]
    ) -> dict[str, tuple[str, ...]]:
        return {s: self.ready.get(s, ()) for s in services}

    def fail_process(self, namespace: str, pod: str, message: str) -> None:
        self.failed.append((f"{namespace}/{pod}", message))


@pytest.fixture
async def slotted(tmp_path: Path) -> AsyncIterator[tuple[Bed, FakeSlots]]:
    bed = Bed(tmp_path)
    slots = FakeSlots({SLOTS[0]: ("r1",), SLOTS[1]: ("r2",)})
    unused: Callable[..., Any] = lambda *_: pytest.fail("no roster for a slot driver")  # noqa: E731
    # The tick loop ticks once at the start; the test ticks by hand after.
    bed.app.drivers = Drivers(bed.app, unused, unused, slots, tick_seconds=3600)
    await bed.app.start()
    await bed.app.sync()
    yield bed, slots
    await bed.app.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_registry_runs_a_slot_driver_through_the_control_api(
    slotted: tuple[Bed, FakeSlots],
) -> None:
    bed, slots = slotted
    with pytest.raises(SimError, match="409"):
        await bed.call("start_slot_driver", namespace=NS, job="job2")
    started = await bed.call("start_slot_driver", namespace=NS, job="job1", per_engine=3)
    assert (started["addressing"], started["generation"]) == ("slots", 0)
    assert started["addresses"] == [f"{s}.{NS}.svc:8000" for s in SLOTS]
    assert bed.app.drivers is not None
    run_ = bed.app.drivers.runs[(NS, "job1")]
    await bed.app.drivers.tick(run_)
    assert (await bed.call("driver", namespace=NS, job="job1"))["sent"] == {"r1": 3, "r2": 3}
    bed.clock.now += 3  # the requests ended, a step is due
    await bed.app.drivers.tick(run_)
    report = await bed.call("driver", namespace=NS, job="job1")
    assert (report["steps"], report["updates"], report["failed_updates"]) == (
        1, {"r1": 1, "r2": 1}, 0,
    )  # fmt: skip
    assert report["sent"] == {"r1": 6, "r2": 6}
    trainer = bed.app.workloads[f"{NS}/t0"].model
    assert isinstance(trainer, TrainerModel) and trainer.generation == 1
    slots.ready[SLOTS[1]] = ()  # the slot's engine went away undrained, nothing lent
    bed.clock.now += 3
    await bed.app.drivers.tick(run_)
    report = await bed.call("driver", namespace=NS, job="job1")
    assert (report["failed_updates"], report["failed_trainer_pods"]) == (1, ["t0"])
    assert [pod for pod, _ in slots.failed] == [f"{NS}/t0"]
    assert "Connection refused" in slots.failed[0][1]
    assert slots.address_reads == 2  # the refused start and this one: never re-read
    assert await bed.call("stop_driver", namespace=NS, job="job1") is True
