"""Engine slots (slotServices): every slot stays held by a serving engine, a draining or
unready engine lends its slots out before it gives them up (stamps before removals, before the
gate closes), a newcomer takes a slot back once its gate opened, and a joining engine behind the
serving generation gets the serving engine's weights copied in; nothing for a job without slots."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rljob.api import EngineMember, EngineState, RLJob
from rljob.api.status import ActionPod, InFlightAction, RolesStatus, RoleStatus
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.slots import SlotMove, WeightCopy, slot_moves, weight_copies
from rljob.reconcile.steps import SetPolicyCurrent
from tests.unit.reconcile.test_decide import decide_now
from tests.unit.reconcile.test_drain import POD_RULE, VICTIM, drift, gated_world
from tests.unit.reconcile.world import T0, example_job, pod

SLOTTED = {
    "engine": "sglang",
    "weightSync": "Gated",
    "generationFrom": "engine",
    "slotServices": True,
}


def slotted_job(replicas: int = 3, **rollout: Any) -> RLJob:
    job = example_job()
    body = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    body["spec"]["roles"]["rollout"].update(SLOTTED, replicas=replicas, **rollout)
    return RLJob.model_validate(body)


def engine(name: str, *slots: int, serving: bool = True, **fields: Any) -> ObservedPod:
    values: dict[str, Any] = {
        "ready": serving,
        "policy_current": serving,
        "ip": f"10.0.0.{len(name)}",
    }
    values.update(fields)
    return pod(name, "rollout", slots=frozenset(slots), **values)


def moves(
    job: RLJob,
    *pods: ObservedPod,
    draining: tuple[str, ...] = (),
    readings: tuple[EngineReading, ...] = (),
) -> list[str]:
    status = job.status
    if draining:
        entries = [ActionPod(name=p, uid=f"uid-{p}", drain_started_at=T0) for p in draining]
        action = InFlightAction(id="pod-x", kind="RestartPod", started_at=T0, pods=entries)
        status = status.model_copy(update={"in_flight": action})
    return [_said(m) for m in slot_moves(job, status, Observed(pods=pods), readings)]


def _said(move: SlotMove) -> str:
    return f"{'+' if move.held else '-'}{move.slot}:{move.pod}"


@pytest.mark.parametrize(
    ("pods", "draining", "expected"),
    [
        pytest.param((engine("a"), engine("b"), engine("c")), (),
                     ["+0:a", "+1:b", "+2:c"], id="first-pass-one-slot-each"),
        pytest.param((engine("a", 0), engine("b", 1), engine("c", 2)), (), [], id="steady"),
        pytest.param((engine("a", 0), engine("b", 1), engine("c", 2)), ("a",),
                     ["+0:b", "-0:a"], id="a-drain-lends-its-slot-first"),
        pytest.param((engine("b", 1, 0), engine("c", 2), engine("d")), (),
                     ["+1:d", "-1:b"], id="a-newcomer-takes-a-slot-from-the-lender"),
        pytest.param((engine("b", 1, 0), engine("c", 2), engine("d", serving=False)), (), [],
                     id="not-before-its-gate-opened"),
        pytest.param((engine("a", 0, serving=False), engine("b", 1), engine("c", 2)), (),
                     ["+0:b", "-0:a"], id="an-unready-holder-lends-its-slot"),
        pytest.param((engine("a", 0, serving=False), engine("b", 1, serving=False)), (), [],
                     id="nothing-serves-nothing-moves"),
        pytest.param((engine("a", 0), engine("b", 0, 1), engine("c", 2)), (),
                     ["-0:b"], id="a-slot-held-twice-stays-with-the-one-holding-fewer"),
        pytest.param((engine("a", 0, 5), engine("b", 1), engine("c", 2)), (),
                     ["-5:a"], id="a-slot-past-the-replicas-goes"),
        pytest.param((engine("a", 0), engine("b", 1), engine("c", 2, deleting=True)), (),
                     ["+2:a"], id="a-deleting-holder-keeps-its-label"),
    ],
)  # fmt: skip
def test_slots_move(
    pods: tuple[ObservedPod, ...], draining: tuple[str, ...], expected: list[str]
) -> None:
    assert moves(slotted_job(), *pods, draining=draining) == expected


def test_a_job_without_slots_moves_none() -> None:
    job = slotted_job(slotServices=False)
    assert slot_moves(job, job.status, Observed(pods=(engine("a"), engine("b")))) == ()


def reading(name: str, generation: int | None) -> EngineReading:
    return EngineReading(pod=name, at=T0, running=0, generation=generation)


@pytest.mark.parametrize(
    ("newcomer", "readings", "expected"),
    [
        pytest.param({}, {"a": 4, "b": 5}, [("b", "new", 5)], id="from-the-newest-serving"),
        pytest.param({}, {"a": 4, "b": 5, "new": 3}, [("b", "new", 5)], id="behind"),
        pytest.param({}, {"a": 4, "b": 5, "new": 5}, [], id="already-current"),
        pytest.param({"containers_ready": False}, {"a": 4, "b": 5}, [], id="server-not-up"),
        pytest.param({"ip": ""}, {"a": 4, "b": 5}, [], id="no-address"),
        pytest.param({}, {}, [], id="no-serving-engine-reports"),
        pytest.param({"policy_current": True}, {"a": 4, "b": 5}, [], id="gate-open"),
    ],
)  # fmt: skip
def test_weight_copies(
    newcomer: dict[str, Any], readings: dict[str, int], expected: list[tuple[str, str, int]]
) -> None:
    job = slotted_job(replicas=2)
    fields = {"containers_ready": True, **newcomer}
    pods = (engine("a", 0), engine("b", 1), engine("new", serving=False, **fields))
    found = weight_copies(
        job, job.status, Observed(pods=pods), tuple(reading(n, g) for n, g in readings.items())
    )
    assert [(c.source, c.target, c.generation) for c in found] == expected
    # On the port the engines' Services forward: the example's metrics.port.
    assert all(isinstance(c, WeightCopy) and c.port == 8000 for c in found)


def test_a_drain_lends_the_slot_before_the_gate_closes() -> None:
    """The journaled RestartPod's pass stamps the victim's slot on a peer, removes it from the
    victim, and only then closes the victim's gate: the slot's Service never lacks an endpoint."""
    w = gated_world(POD_RULE, mode={k: str(v) for k, v in SLOTTED.items() if k != "slotServices"})
    w.body["spec"]["roles"]["rollout"]["slotServices"] = True
    engines = sorted(name for name, p in w.pods.items() if p.role == "rollout")
    w.body["spec"]["roles"]["rollout"]["replicas"] = len(engines)
    for index, name in enumerate(engines):
        w.pods[name] = dataclasses.replace(
            w.pods[name], policy_current=True, slots=frozenset({index})
        )
    victim_slot = next(iter(w.pods[VICTIM].slots))
    decision = decide_now(w, findings=[drift()])
    order = [
        ("+" if s.held else "-", s.pod) if isinstance(s, SlotMove) else ("gate", s.pod)
        for s in decision.steps
        if isinstance(s, SlotMove) or (isinstance(s, SetPolicyCurrent) and not s.current)
    ]
    lent = [s for s in decision.steps if isinstance(s, SlotMove) and s.slot == victim_slot]
    assert [s.held for s in lent] == [True, False], order
    assert lent[0].pod != VICTIM and lent[1].pod == VICTIM, order
    assert order.index(("+", lent[0].pod)) < order.index(("gate", VICTIM)), order


LENT = (engine("b", 1, 0), engine("c", 2), engine("d"))


@pytest.mark.parametrize(
    ("generations", "expected"),
    [
        pytest.param({"b": 6, "c": 6, "d": 6}, ["+1:d", "-1:b"], id="current-takes-a-slot"),
        pytest.param({"b": 6, "c": 6, "d": 7}, ["+1:d", "-1:b"], id="ahead-takes-a-slot"),
        pytest.param({"b": 6, "c": 6, "d": 5}, [], id="a-sync-after-its-copy-waits"),
        pytest.param({"b": 6, "c": 6}, [], id="unread-waits"),
        pytest.param({}, ["+1:d", "-1:b"], id="nothing-read-anywhere"),
    ],
)  # fmt: skip
def test_a_slot_goes_only_to_an_engine_as_new_as_its_holders(
    generations: dict[str, int], expected: list[str]
) -> None:
    readings = tuple(reading(n, g) for n, g in generations.items())
    assert moves(slotted_job(), *LENT, readings=readings) == expected


def test_a_serving_engine_without_a_slot_behind_the_holders_is_copied_again() -> None:
    job = slotted_job()
    pods = tuple(dataclasses.replace(p, containers_ready=True) for p in LENT)
    readings = (reading("b", 6), reading("c", 6), reading("d", 5))
    found = weight_copies(job, job.status, Observed(pods=pods), readings)
    assert [(c.source, c.target, c.generation) for c in found] == [("b", "d", 6)]


def test_an_unheld_slot_goes_to_an_engine_as_new_as_the_holders() -> None:
    """c holds nothing and is behind b, so the slot its crashed holder left goes to b."""
    pods = (engine("b", 1), engine("c"), engine("x", 0, serving=False))
    readings = (reading("b", 6), reading("c", 5))
    assert moves(slotted_job(replicas=2), *pods, readings=readings) == ["+0:b", "-0:x"]


def test_no_copy_into_an_engine_stamped_for_its_delete() -> None:
    """An in-turn restart stamps a joining engine's delete: it is going, no copy is started
    (found by the model: tests/unit/model/test_slot_model.py)."""
    job = slotted_job(replicas=2)
    newcomer = engine("new", serving=False, containers_ready=True)
    entry = ActionPod(name="new", uid="uid-new", deleted_at=T0)
    action = InFlightAction(id="turn-x", kind="RestartRoleInTurn", started_at=T0, pods=[entry])
    status = job.status.model_copy(update={"in_flight": action})
    pods = (engine("a", 0), engine("b", 1), newcomer)
    readings = (reading("a", 4), reading("b", 4))
    assert weight_copies(job, status, Observed(pods=pods), readings) == ()


def test_a_holder_restarted_in_place_lends_its_slots() -> None:
    """Its container restarted behind a still-open gate: the pass that closes the gate lends
    its slot out first (found by the model)."""
    job = slotted_job(replicas=2)
    restarted = engine("a", 0, restart_count=1)
    members = [
        EngineMember(pod="a", state=EngineState.SERVING, restarts=0),
        EngineMember(pod="b", state=EngineState.SERVING, restarts=0),
    ]
    status = job.status.model_copy(
        update={"roles": RolesStatus(rollout=RoleStatus(engines=members))}
    )
    found = [_said(m) for m in slot_moves(job, status, Observed(pods=(restarted, engine("b", 1))))]
    assert found == ["+0:b", "-0:a"]
