"""A rollout pod with no container running is read, at the pass, as stopped with nothing
running and no generation; a reading taken before the pod's container (re)started is dropped;
other readings are left as the health loop gave them."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from rljob.reconcile.engine_readings import EngineReading, with_stopped_engines
from rljob.reconcile.observed import ObservedPod
from tests.unit.reconcile.world import T0, pod

NOW = T0 + dt.timedelta(seconds=30)
OLD = EngineReading("r0", T0, running=4, generation=7)


def _down(name: str, role: str = "rollout", *, deleting: bool = False) -> ObservedPod:
    return dataclasses.replace(pod(name, role), container_running=False, deleting=deleting)


@pytest.mark.parametrize(
    ("pods", "readings", "expected"),
    [
        pytest.param([pod("r0", "rollout")], (OLD,), (OLD,), id="running-pod-keeps-its-reading"),
        pytest.param([_down("r0")], (OLD,),
                     (EngineReading("r0", NOW, running=0, stopped=True),),
                     id="down-pod-is-stopped-with-no-generation"),
        pytest.param([pod("r0", "rollout", started_at=T0 + dt.timedelta(seconds=1))], (OLD,), (),
                     id="a-reading-before-the-container-restarted-is-dropped"),
        pytest.param([pod("r0", "rollout", started_at=T0)], (OLD,), (OLD,),
                     id="a-reading-at-the-container-start-is-kept"),
        pytest.param([_down("r1")], (OLD,),
                     (OLD, EngineReading("r1", NOW, running=0, stopped=True)),
                     id="down-pod-without-a-reading"),
        pytest.param([_down("t0", "trainer")], (), (), id="a-trainer-pod-is-not-an-engine"),
        pytest.param([_down("r0", deleting=True)], (OLD,), (OLD,), id="a-deleting-pod-is-left"),
    ],
)  # fmt: skip
def test_with_stopped_engines(
    pods: list[ObservedPod],
    readings: tuple[EngineReading, ...],
    expected: tuple[EngineReading, ...],
) -> None:
    assert with_stopped_engines(readings, pods, NOW) == expected
