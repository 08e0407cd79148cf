"""A pass against an in-memory Kube: nothing the pass decided happens before its journal write,
so a 409 on that write loses nothing (the finding waits, the detector keeps its state)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from rljob.adapters.kube import KubeError
from rljob.adapters.leadership import Leadership
from rljob.api import FailureReason
from rljob.health.evaluation import finding
from rljob.observability import (
    CHECKPOINT_SAVED,
    CHECKPOINT_STEP,
    JOB_SERIES,
    TRAINER_STEP,
    TRAINER_STEP_RATE,
)
from rljob.runtime import passes
from rljob.runtime.runtime import RLJOB_INDEX, Runtime, RuntimeOptions
from tests.unit.reconcile.world import World, example_body, pod

ENGINE = "grpo-demo-rollout-abc"


class Kube:
    """Answers like the API server; `conflicts` status writes answer 409 first."""

    def __init__(self, world: World, conflicts: int) -> None:
        self.world = world
        self.conflicts = conflicts
        self.deleted: list[str] = []
        self.events: list[str] = []

    async def patch_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        if self.conflicts:
            self.conflicts -= 1
            raise KubeError(409, "the object has been modified")
        body = copy.deepcopy(self.world.body)
        body["status"] = {**body.get("status", {}), **patch}
        return body

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str,
                     **_: Any) -> None:  # fmt: skip
        self.deleted.append(name)

    async def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        return body

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        if path.endswith("/events"):
            self.events.append(body["reason"])
        return {}


class Health:
    """The health loop's surface a pass uses."""

    def __init__(self) -> None:
        self.restarted: list[tuple[str, str | None]] = []
        self.diagnosis: Any = None

    def register(self, job: Any, pods: Any) -> None:
        pass

    def forget(self, key: Any) -> None:
        pass

    def note_restart(self, key: Any, role: object, pod: str | None, at: float) -> None:
        self.restarted.append((str(role), pod))

    def source_error(self, key: Any) -> str | None:
        return None

    def judging(self, key: Any) -> None:
        return None

    def source_for(self, job: Any) -> None:
        return None

    def engine_summaries(self, key: Any) -> None:
        return None

    def bottleneck(self, key: Any) -> Any:
        return self.diagnosis

    def engine_gauges(self, key: Any) -> dict[str, Any]:
        return {}

    def weight_gated(self, key: Any) -> bool:
        return False


@pytest.mark.parametrize("conflicts", [pytest.param(0, id="written"), pytest.param(1, id="409")])
async def test_a_finding_is_consumed_only_once_its_restart_is_journaled(conflicts: int) -> None:
    world = World(example_body())
    world.settle()
    world.ready()
    world.settle()
    world.pods[ENGINE] = pod(ENGINE, "rollout")
    kube, health = Kube(world, conflicts), Health()
    runtime = Runtime(kube, RuntimeOptions(), Leadership(None, None), health=health)  # type: ignore[arg-type]
    runtime.passes.observed = lambda key: world.observed
    body = copy.deepcopy(world.body)
    body["metadata"]["resourceVersion"] = "10"
    memory = runtime.memories.of(body["metadata"]["uid"], ("rl", "grpo-demo"))
    drift = finding("kv_drift", ENGINE, FailureReason.KV_CACHE_DRIFT, "down 35%", {})
    memory.findings = [drift]

    if conflicts:
        assert await runtime.run_pass(body) is not None  # a stale copy: retried soon
        assert memory.findings == [drift], "the finding waits for the pass that journals it"
        assert health.restarted == [] and kube.deleted == []
    await runtime.run_pass(body)

    assert memory.findings == []
    assert health.restarted == [("rollout", ENGINE)]
    assert kube.deleted == [ENGINE]
    assert kube.events.count("PodRestarted") == 1


async def test_nothing_of_a_deleted_rljob_remains_in_memory() -> None:
    world = World(example_body())
    world.settle()
    kube, health = Kube(world, 0), Health()
    runtime = Runtime(kube, RuntimeOptions(), Leadership(None, None), health=health)  # type: ignore[arg-type]
    runtime.passes.observed = lambda key: world.observed
    body = copy.deepcopy(world.body)
    await runtime.run_pass(body)
    assert body["metadata"]["uid"] in runtime.memories
    key = ("rl", "grpo-demo")
    for family in (CHECKPOINT_STEP, CHECKPOINT_SAVED, TRAINER_STEP, TRAINER_STEP_RATE):
        JOB_SERIES.set(key, family, 7.0)
    scraped = {s.name: s.labels for m in JOB_SERIES.collect() for s in m.samples}
    assert scraped["rljob_checkpoint_step"] == {"namespace": "rl", "job": "grpo-demo"}

    runtime.forget(body)

    assert len(runtime.memories) == 0
    assert len(runtime.workers) == 0
    assert key not in JOB_SERIES.values, "its checkpoint and step series go with it"


def test_a_new_monitor_restores_the_drift_state_a_previous_operator_saved_in_status() -> None:
    from rljob.adapters.metrics import SourceKey
    from rljob.api import parse_rljob
    from rljob.health.monitor import JobMonitor

    body = example_body()
    now = 1_800_000_000.0
    saved = {
        "pod": ENGINE,
        "role": "rollout",
        "detector": "kvDrift",
        "baselineTokensPerSecond": 1200.0,
        "warmedUpAt": "2027-01-15T07:00:00Z",
        "updatedAt": "2027-01-15T07:55:00Z",
    }
    body["status"] = {"health": {"engines": [saved]}}
    job = parse_rljob(body)

    monitor: JobMonitor[SourceKey] = JobMonitor("uid", ("rl", "grpo-demo"), job, now)

    restored = monitor.engine_summaries(now)
    assert [(s.pod, s.baseline_tokens_per_second) for s in restored] == [(ENGINE, 1200.0)]


async def test_a_standby_forgets_the_worker_of_an_rljob_a_relist_no_longer_shows() -> None:
    """A standby runs workers but no passes, so it has no memories: the prune after a re-list
    must forget its workers all the same (a watch gap sends no DELETED)."""
    world = World(example_body())
    runtime = Runtime(Kube(world, 0), RuntimeOptions(), Leadership(None, None), health=Health())  # type: ignore[arg-type]
    runtime.workers.submit(copy.deepcopy(world.body))
    runtime.bind_indexes({RLJOB_INDEX: {}})
    assert len(runtime.memories) == 0 and len(runtime.workers) == 1

    runtime.prune()

    assert len(runtime.workers) == 0


def _diagnosis(role: str, recommended: int | None = None) -> Any:
    from datetime import UTC, datetime

    from rljob.api.diagnosis import Bottleneck
    from rljob.vocabulary.enums import BottleneckRole

    at = datetime(2026, 11, 24, tzinfo=UTC)
    return Bottleneck(
        role=BottleneckRole(role),
        since=at,
        updated_at=at,
        window_seconds=900.0,
        recommended_concurrency=recommended,
    )


async def test_a_health_round_wakes_the_job_only_when_the_diagnosis_advice_moved() -> None:
    world = World(example_body())
    health = Health()
    runtime = Runtime(Kube(world, 0), RuntimeOptions(), Leadership(None, None), health=health)  # type: ignore[arg-type]
    key = ("rl", "grpo-demo")
    runtime.memories.of(world.body["metadata"]["uid"], key)
    woken: list[Any] = []
    runtime.workers.wake = lambda key, cause="": woken.append((key, cause))  # type: ignore[method-assign]
    rounds = [
        (None, 0),  # no diagnosis yet
        (_diagnosis("Rollout"), 1),  # the first one
        (_diagnosis("Rollout"), 1),  # the same advice
        (_diagnosis("RolloutConcurrency", 40), 2),  # another role
        (_diagnosis("RolloutConcurrency", 42), 2),  # 5%: not worth a write
        (_diagnosis("RolloutConcurrency", 51), 3),  # 28%
    ]
    for diagnosis, wakes in rounds:
        health.diagnosis = diagnosis
        await runtime._on_health(key, [])
        assert len(woken) == wakes, diagnosis


class NoStore:
    """A checkpoint store any use of which fails the test: nothing may reach a refused endpoint."""

    default_endpoint = None

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the pass used the checkpoint store ({name})")


class Recording(Kube):
    def __init__(self, world: World) -> None:
        super().__init__(world, 0)
        self.patches: list[dict[str, Any]] = []

    async def patch_status(self, namespace: str, name: str, patch: dict[str, Any],
                           resource_version: str | None = None) -> dict[str, Any]:  # fmt: skip
        self.patches.append(patch)
        return await super().patch_status(namespace, name, patch, resource_version)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(
            {"health": {"source": {"prometheus": {"url": "http://169.254.169.254/latest"}}}},
            "spec.health.source.prometheus.url",
            id="a-prometheus-url",
        ),
        pytest.param(
            {"checkpoint": {"uri": "s3://bucket/x", "endpoint": "http://10.0.0.1:9000"}},
            "spec.checkpoint.endpoint",
            id="an-s3-endpoint",
        ),
    ],
)
async def test_a_job_naming_what_the_platform_does_not_allow_is_refused_before_any_request(
    spec: dict[str, Any], field: str
) -> None:
    world = World(example_body())
    world.body["spec"].update(spec)
    kube, health = Recording(world), Health()
    registered: list[Any] = []
    health.register = lambda job, pods: registered.append(job)  # type: ignore[method-assign]
    runtime = Runtime(kube, RuntimeOptions(), Leadership(None, None), checkpoints=NoStore(),  # type: ignore[arg-type]
                      health=health)  # type: ignore[arg-type]  # fmt: skip
    runtime.passes.observed = lambda key: world.observed

    await runtime.run_pass(copy.deepcopy(world.body))

    (accepted,) = [c for p in kube.patches for c in p["conditions"] if c["type"] == "Accepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "NotAllowed")
    assert accepted["message"].startswith(f"{field}: ")
    assert registered == [] and kube.deleted == [] and kube.events == []


async def test_a_stale_body_does_not_write_the_same_status_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass on a body the watch has not refreshed yet decides the status it already wrote:
    the pass remembers the write by its digest and does not repeat it."""
    world = World(example_body())
    world.settle()
    world.ready()
    world.settle()
    monkeypatch.setattr(passes, "_now", lambda: world.now)
    kube, health = Kube(world, 0), Health()
    runtime = Runtime(kube, RuntimeOptions(), Leadership(None, None), health=health)  # type: ignore[arg-type]
    runtime.passes.observed = lambda key: world.observed
    writes: list[dict[str, Any]] = []
    patch_status = kube.patch_status

    async def counted(
        namespace: str, name: str, patch: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        writes.append(patch)
        return await patch_status(namespace, name, patch, resource_version)

    kube.patch_status = counted  # type: ignore[method-assign]
    stale = copy.deepcopy(world.body)
    stale.pop("status", None)  # the watch's copy from before any status was written
    await runtime.run_pass(copy.deepcopy(stale))
    await runtime.run_pass(copy.deepcopy(stale))
    memory = runtime.memories.by_key(("rl", "grpo-demo"))
    assert memory is not None and isinstance(memory.written, bytes)
    assert len(writes) == 1
