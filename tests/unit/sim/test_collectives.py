"""A trainer gang with a rank lost with its node: the lost rank unreachable, the ranks left hung
from the loss (their step and heartbeat frozen), and each aborted once by the NCCL watchdog after
its timeout; the app wires it to the node list and the rank failer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rljob.dev.sim.app import SimulatorApp
from rljob.dev.sim.collectives import Collectives
from rljob.dev.sim.faults import Active
from rljob.dev.sim.models import TrainerModel
from rljob.dev.sim.pods import PodInfo
from rljob.dev.sim.simulation import SimConfig
from tests.unit.sim.test_app import Clock, make_pod

T0 = 1_800_000_000.0
NS = "team-a"


def rank(index: int, node: str, attempt: int = 1, job: str = "job1") -> PodInfo:
    return PodInfo(NS, f"{job}-t{attempt}-{index}", f"u{job}{attempt}{index}", job, "trainer", 0,
                   True, False, attempt=attempt, completion_index=index, node=node)  # fmt: skip


GANG = [rank(0, "n0"), rank(1, "n1")]
OTHER_JOB = rank(0, "n2", job="job2")


@pytest.mark.parametrize(
    ("lost_nodes", "lost", "hung"),
    [
        pytest.param(set(), set(), set(), id="nothing-lost"),
        pytest.param({"n1"}, {"job1-t1-1"}, {"job1-t1-0"}, id="a-rank-lost-hangs-the-other"),
        pytest.param({"n9"}, set(), set(), id="a-node-without-a-rank"),
        pytest.param({"n2"}, {"job2-t1-0"}, set(), id="another-job's-rank-hangs-only-its-gang"),
    ],
)
def test_a_lost_rank_hangs_its_gang(lost_nodes: set[str], lost: set[str], hung: set[str]) -> None:
    collectives = Collectives(watchdog_seconds=60)
    ranks = [*GANG, OTHER_JOB]

    collectives.observe(ranks, lost_nodes, T0)

    faults = {pod.name: collectives.faults(pod, Active()) for pod in ranks}
    assert {name for name, f in faults.items() if f.unreachable} == lost
    assert {name for name, f in faults.items() if f.hang_since == T0} == hung


def test_the_watchdog_aborts_each_rank_left_once_after_its_timeout() -> None:
    collectives = Collectives(watchdog_seconds=60)
    collectives.observe(GANG, {"n1"}, T0)

    assert collectives.expired(GANG, T0 + 59) == []
    assert [p.name for p in collectives.expired(GANG, T0 + 60)] == ["job1-t1-0"]
    assert collectives.expired(GANG, T0 + 120) == [], "once"


def test_a_new_attempt_starts_unhung() -> None:
    collectives = Collectives(watchdog_seconds=60)
    collectives.observe(GANG, {"n1"}, T0)
    next_attempt = [rank(0, "n0", attempt=2), rank(1, "n2", attempt=2)]

    collectives.observe(next_attempt, {"n1"}, T0 + 30)

    assert all(collectives.faults(p, Active()) == Active() for p in next_attempt)
    assert collectives.hung == {}, "the old gang, gone, is forgotten"


def _rank_pod(index: int, node: str) -> dict[str, Any]:
    pod = make_pod(f"t{index}", "trainer", f"ut{index}")
    pod["metadata"]["labels"]["rljob.io/attempt"] = "1"
    pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = str(index)
    pod["spec"]["nodeName"] = node
    pod["status"]["podIP"] = f"127.0.9.{index + 1}"
    pod["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 0}]
    return pod


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[tuple[SimulatorApp, Clock, list[str], set[str]]]:
    clock, failed, lost = Clock(), [], set[str]()
    pods = [_rank_pod(0, "n0"), _rank_pod(1, "n1")]
    config = SimConfig(control_port=0, targets_file=tmp_path / "t.json", nccl_watchdog_seconds=30)
    app = SimulatorApp(
        config,
        lambda: json.loads(json.dumps(pods)),
        clock=clock,
        lost_nodes=lambda: set(lost),
        fail_rank=lambda namespace, pod: failed.append(f"{namespace}/{pod}"),
    )
    await app.start()
    await app.sync()
    yield app, clock, failed, lost
    await app.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_app_hangs_the_gang_and_fails_its_ranks_by_the_watchdog(
    app: tuple[SimulatorApp, Clock, list[str], set[str]],
) -> None:
    sim, clock, failed, lost = app
    clock.now += 10
    lost.add("n1")
    await sim.sync()
    survivor = sim.workloads[f"{NS}/t0"]
    assert isinstance(survivor.model, TrainerModel)
    clock.now += 20
    sim.advance(survivor)
    step, beat = survivor.model.step, survivor.model.heartbeat

    clock.now += 9
    await sim._watchdogs()
    assert failed == [] and sim.faults_of(sim.workloads[f"{NS}/t1"]).unreachable
    clock.now += 1
    await sim._watchdogs()
    sim.advance(survivor)

    assert failed == [f"{NS}/t0"], "the watchdog fails the rank left, never the lost one"
    assert (survivor.model.step, survivor.model.heartbeat) == (step, beat), "frozen while hung"
    assert [e["event"] for e in sim.events if e["pod"].endswith("/t1")][-1] == "rank-lost"
