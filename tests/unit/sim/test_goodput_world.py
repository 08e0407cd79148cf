"""What the goodput benchmark needs of the simulator (bench/goodput): a rank loading before its
first step, engines supplying no rollouts while they load, a JobSet's pods' attempt, and a
trainer that resumes on its own from the newest checkpoint in its store location."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from rljob.dev.sim.checkpoints import CheckpointSink
from rljob.dev.sim.coupling import couple
from rljob.dev.sim.httpserver import Listener
from rljob.dev.sim.models import EngineModel, Model, TrainerModel
from rljob.dev.sim.pods import parse_pod
from rljob.dev.sim.profiles import EngineProfile, TrainerProfile
from rljob.dev.sim.simulation import SimConfig, Simulation
from rljob.dev.sim.workload import Workload

T0 = 1_800_000_000.0
NS = "goodput-jobset"


def _pod(name: str, role: str, env: Mapping[str, str], labels: Mapping[str, str] = {}) -> Any:
    return {
        "metadata": {
            "namespace": NS,
            "name": name,
            "uid": f"uid-{name}",
            "labels": {
                "app.kubernetes.io/managed-by": "rljob-operator",
                "rljob.io/job": "rl",
                "rljob.io/role": role,
                **labels,
            },
        },
        "spec": {
            "containers": [
                {"name": "main", "env": [{"name": k, "value": v} for k, v in env.items()]}
            ]
        },
        "status": {"phase": "Running", "containerStatuses": [{"restartCount": 0}]},
    }


def _workload(name: str, role: str, model: Model, started: float) -> Workload:
    pod = parse_pod(_pod(name, role, {}))
    assert pod is not None
    return Workload(pod, cast(Listener, None), model, started)


def test_a_rank_loads_before_its_first_step() -> None:
    profile = TrainerProfile(load_seconds=2.0, wait_for_rollouts=1.0, step_seconds=1.0)
    trainer = TrainerModel(profile, T0, step=7)
    trainer.advance(T0 + 1.9)
    assert (trainer.phase.name, trainer.step) == ("starting", 7)
    trainer.advance(T0 + 4.1)  # 2 s loading, then a 2 s step
    assert trainer.step == 8


def test_an_engine_supplies_no_rollouts_while_it_loads() -> None:
    profile = TrainerProfile(couple_rollouts=True, tokens_per_step=800.0, engine_load_seconds=1.0)
    engine_profile = EngineProfile(throughput=800.0, noise=0.0)
    model = TrainerModel(profile, T0)
    trainer = _workload("t", "trainer", model, T0)
    old = _workload("e0", "rollout", EngineModel(engine_profile, "a", T0), T0)
    new = _workload("e1", "rollout", EngineModel(engine_profile, "b", T0), T0 + 10)
    couple(trainer, [trainer, old, new], T0 + 10.5)
    assert model.rollout_wait == pytest.approx(1.0)  # only the loaded engine supplies
    couple(trainer, [trainer, old, new], T0 + 11.5)
    assert model.rollout_wait == pytest.approx(0.5)


def test_a_jobsets_pod_takes_its_attempt_from_the_jobsets_restart_count() -> None:
    labels = {"jobset.sigs.k8s.io/restart-attempt": "2"}
    info = parse_pod(_pod("rl-trainer-0-0-x", "trainer", {}, labels))
    assert info is not None and info.attempt == 2
    both = parse_pod(_pod("t", "trainer", {}, {**labels, "rljob.io/attempt": "5"}))
    assert both is not None and both.attempt == 5  # the operator's label first


class _Sink:
    """A CheckpointSink's store half: the newest step it would read."""

    def __init__(self, step: int | None) -> None:
        self.step = step
        self.read: list[dict[str, str]] = []

    def wants(self, env: Mapping[str, str], index: int) -> bool:
        return False

    def newest_step(self, env: Mapping[str, str]) -> int | None:
        self.read.append(dict(env))
        return self.step

    def forget(self, instance: str) -> None:
        pass


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize(
    ("resume_from_store", "resume_step", "expected", "reads"),
    [
        pytest.param(True, None, 15, 1, id="resumes-from-the-newest-checkpoint"),
        pytest.param(True, "10", 10, 0, id="the-operators-resume-step-wins"),
        pytest.param(False, None, 0, 0, id="off-by-default"),
    ],
)
async def test_a_trainer_resumes_on_its_own_from_its_store(
    tmp_path: Path, resume_from_store: bool, resume_step: str | None, expected: int, reads: int
) -> None:
    env = {
        "RLJOB_SIM_PROFILE": json.dumps({"resume_from_store": resume_from_store}),
        "RLJOB_CHECKPOINT_URI": "s3://bucket/goodput",
        "RLJOB_NAMESPACE": NS,
        "RLJOB_NAME": "rl",
    }
    if resume_step is not None:
        env["RLJOB_RESUME_STEP"] = resume_step
    sink = _Sink(15)
    config = SimConfig(control_port=0, targets_file=tmp_path / "targets.json")
    sim = Simulation(config, list, clock=lambda: T0, sink=cast(CheckpointSink, sink))
    await sim.apply_pods([_pod("rl-trainer-0-0-x", "trainer", env)])
    try:
        [workload] = sim.workloads.values()
        assert cast(TrainerModel, workload.model).step == expected
        assert len(sink.read) == reads
    finally:
        for workload in sim.workloads.values():
            await workload.listener.close()


def test_a_pod_without_the_operators_attempt_writes_under_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rljob.sdk

    seen: list[int | None] = []

    class Writer:
        @classmethod
        def from_env(cls, env: Mapping[str, str], **kwargs: Any) -> Any:
            seen.append(kwargs.get("attempt"))
            raise RuntimeError("enough")

    monkeypatch.setattr(rljob.sdk, "CheckpointWriter", Writer)
    sink = CheckpointSink({"RLJOB_S3_ENDPOINT": "http://127.0.0.1:1"})
    try:
        for env, attempt in (({}, 3), ({"RLJOB_ATTEMPT": "4"}, 3), ({}, None)):
            with pytest.raises(RuntimeError):
                sink._write("i", dict(env), 5, 1, 8, attempt=attempt)
    finally:
        sink.close()
    assert seen == [3, None, 0]  # the pod's attempt, the operator's variable, else 0


def test_the_profile_fields_default_to_off() -> None:
    profile = TrainerProfile()
    assert (profile.load_seconds, profile.engine_load_seconds) == (0.0, 0.0)
    assert not profile.resume_from_store
    assert dataclasses.replace(profile, load_seconds=1.0).load_seconds == 1.0
