"""A coupled trainer waits for its job's rollouts: tokens per step over the engines' throughput
at their concurrency, plus the verifiers' delay; profile changes through the control API move
its time into or out of waiting_for_rollouts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rljob.dev.sim.app import SimulatorApp
from rljob.dev.sim.client import SimClient
from rljob.dev.sim.coupling import MAX_WAIT_SECONDS, rollout_wait
from rljob.dev.sim.models import TrainerModel, knee_truth
from rljob.dev.sim.profiles import EngineProfile, override
from rljob.dev.sim.simulation import SimConfig

# The app's listeners run on the session loop (the project's fixture loop scope): so do the tests.
on_the_session_loop = pytest.mark.asyncio(loop_scope="session")
NS = "team-a"
T0 = 1_800_000_000.0
ENGINE = {"concurrency": 8, "knee": 64, "throughput": 800, "noise": 0}
TRAINER = {"couple_rollouts": True, "step_seconds": 5, "checkpoint_every": 1000}


@pytest.mark.parametrize(
    ("rates", "delays", "wait"),
    [
        pytest.param([], [], None, id="no-engines-the-profiles-wait"),
        pytest.param([1000.0, 1000.0], [], 8.0, id="two-engines"),
        pytest.param([1000.0, 1000.0], [1.0, 3.0], 10.0, id="plus-the-verifiers-mean-delay"),
        pytest.param([0.0], [], MAX_WAIT_SECONDS, id="engines-all-stopped"),
    ],
)
def test_rollout_wait(rates: list[float], delays: list[float], wait: float | None) -> None:
    assert rollout_wait(16000, rates, delays) == wait


def pod(name: str, role: str, profile: dict[str, Any], job: str = "job1") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": NS,
            "name": name,
            "uid": f"uid-{name}",
            "labels": {
                "app.kubernetes.io/managed-by": "rljob-operator",
                "rljob.io/job": job,
                "rljob.io/role": role,
            },
            "annotations": {"sim.rljob.io/profile": json.dumps(profile)},
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running", "containerStatuses": [{"restartCount": 0}]},
    }


class Clock:
    now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[SimulatorApp]:
    pods = [
        pod("r1", "rollout", ENGINE),
        pod("r2", "rollout", ENGINE),
        pod("v1", "verifier", {}),
        pod("t0", "trainer", TRAINER),
        pod("other-r1", "rollout", {"noise": 0}, job="job2"),
    ]
    config = SimConfig(control_port=0, targets_file=tmp_path / "targets.json")
    app = SimulatorApp(config, lambda: pods, clock=Clock())
    await app.start()
    await app.sync()
    yield app
    await app.close()


def trainer(app: SimulatorApp) -> TrainerModel:
    model = app.workloads[f"{NS}/t0"].model
    assert isinstance(model, TrainerModel)
    return model


def waiting_share(app: SimulatorApp, seconds: int) -> float:
    """Share of the next `seconds` the trainer spends waiting for rollouts."""
    clock = app.clock
    assert isinstance(clock, Clock)
    model = trainer(app)
    before = model.phase_seconds.totals(clock.now)
    for _ in range(seconds):
        clock.now += 1
        app.advance_all()
    after = model.phase_seconds.totals(clock.now)
    waited = after["waiting_for_rollouts"] - before["waiting_for_rollouts"]
    return waited / seconds


@on_the_session_loop
async def test_the_wait_follows_the_engines_concurrency_and_the_verifiers_queue(
    app: SimulatorApp,
) -> None:
    assert app.control is not None
    client = SimClient(f"http://127.0.0.1:{app.control.port}")
    app.advance_all()
    under = knee_truth(override(EngineProfile(), ENGINE)).throughput(8)  # 219 tokens/s each
    verifier = 0.2 * 1.1331  # the default verifier's mean latency, nothing queued
    assert trainer(app).rollout_wait == pytest.approx(16384 / (2 * under) + verifier, rel=1e-3)
    wait = 16384 / (2 * under) + verifier
    assert waiting_share(app, 600) == pytest.approx(wait / (wait + 5), abs=0.02)  # 0.88

    await asyncio.to_thread(
        client.set_profile, {"concurrency": 64}, namespace=NS, job="job1", role="rollout"
    )
    app.advance_all()
    assert trainer(app).rollout_wait == pytest.approx(16384 / 1600 + verifier, rel=1e-3)
    wait = 16384 / 1600 + verifier
    assert waiting_share(app, 600) == pytest.approx(wait / (wait + 5), abs=0.02)  # 0.68

    await asyncio.to_thread(
        client.set_profile,
        {"slowdown": 10, "workers": 8, "max_queue": 200},
        namespace=NS,
        job="job1",
        role="verifier",
    )
    slow_verifier = waiting_share(app, 600)
    assert slow_verifier > 0.9  # the queue's wait: (200 - 8) / 3.5 a second = 55 s
    assert trainer(app).rollout_wait == pytest.approx(10.24 + 2.27 + 192 / 3.52, rel=0.02)


@on_the_session_loop
async def test_an_uncoupled_trainer_keeps_its_profiles_wait(app: SimulatorApp) -> None:
    assert app.control is not None
    client = SimClient(f"http://127.0.0.1:{app.control.port}")
    await asyncio.to_thread(client.set_profile, {"couple_rollouts": False}, namespace=NS, pod="t0")
    model = trainer(app)
    model.rollout_wait = None
    app.advance_all()
    assert model.rollout_wait is None
    assert waiting_share(app, 70) == pytest.approx(2 / 7, abs=0.03)  # 2 s of every 7
