"""The rljob.io/policy-current gate: a pass sets it on each live Gated rollout engine that
reports the job's current policy generation and is not gated yet; never for Ungated jobs,
draining or leaving pods, stale or unread generations."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rljob.reconcile.decide import Decision
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.gate import GATE_RECHECK_SECONDS
from rljob.reconcile.progress import ProgressReading
from rljob.reconcile.steps import MarkPolicyCurrent
from tests.unit.reconcile.test_decide import decide_now, journal
from tests.unit.reconcile.test_drain import POD_RULE, VICTIM, drift, gated_world
from tests.unit.reconcile.world import T0, World, pod

NEW = "grpo-demo-rollout-new"


def joining(w: World, **fields: Any) -> None:
    w.pods[NEW] = pod(NEW, "rollout", ready=False, **fields)


def marks(decision: Decision) -> list[MarkPolicyCurrent]:
    return [s for s in decision.steps if isinstance(s, MarkPolicyCurrent)]


def reading(generation: int | None, name: str = NEW) -> EngineReading:
    return EngineReading(pod=name, at=T0, running=0, generation=generation)


@pytest.mark.parametrize(
    ("mode", "policy", "generation", "fields", "marked"),
    [
        pytest.param({"weightSync": "Gated"}, 7, 7, {}, True, id="current"),
        pytest.param({"weightSync": "Gated"}, 7, 8, {}, True, id="newer-than-the-status"),
        pytest.param({"weightSync": "Gated"}, None, 0, {}, True, id="no-policy-generation-yet"),
        pytest.param({"weightSync": "Gated"}, 7, 6, {}, False, id="stale"),
        pytest.param({"weightSync": "Gated"}, 7, None, {}, False, id="unread"),
        pytest.param({"weightSync": "Gated"}, 7, 7, {"policy_current": True}, False,
                     id="already-set"),
        pytest.param({"weightSync": "Gated"}, 7, 7, {"deleting": True}, False, id="deleting"),
        pytest.param({"weightSync": "Gated"}, 7, 7, {"phase": "Failed"}, False, id="ended"),
        pytest.param({}, 7, 7, {}, False, id="ungated-has-no-gate"),
    ],
)  # fmt: skip
def test_the_gate_is_set_for_a_current_engine(
    mode: dict[str, str],
    policy: int | None,
    generation: int | None,
    fields: dict[str, Any],
    marked: bool,
) -> None:
    w = gated_world(mode=mode)
    w.body["status"]["policyGeneration"] = policy
    joining(w, **fields)

    decision = decide_now(w, engine_readings=(reading(generation),))

    expected = [MarkPolicyCurrent(NEW, f"uid-{NEW}", generation or 0)] if marked else []
    assert marks(decision) == expected


@pytest.mark.parametrize(
    ("status_generation", "trainer_generation", "engine_generation", "marked"),
    [
        pytest.param(None, 5, 0, False, id="command-line-weights-while-the-trainer-is-at-5"),
        pytest.param(None, 5, 5, True, id="pushed-to-the-trainer's-generation"),
        pytest.param(3, 5, 4, False, id="newer-than-the-lagging-status-but-behind-the-trainer"),
        pytest.param(6, 5, 5, False, id="status-newer-than-a-stale-trainer-reading"),
    ],
)
def test_current_means_the_newest_generation_known(
    status_generation: int | None, trainer_generation: int, engine_generation: int, marked: bool
) -> None:
    """status.policyGeneration is refreshed every 5 minutes at most (None before the first):
    the gate compares against the trainer's latest reading when it is newer."""
    w = gated_world(mode={"weightSync": "Gated"})
    w.body["status"]["policyGeneration"] = status_generation
    joining(w)

    decision = decide_now(
        w,
        engine_readings=(reading(engine_generation),),
        progress=ProgressReading(policy_generation=trainer_generation),
    )

    assert bool(marks(decision)) == marked


@pytest.mark.parametrize(
    ("serving_generation", "engine_generation", "marked"),
    [
        pytest.param(4, 0, False, id="behind-the-serving-engines"),
        pytest.param(4, 4, True, id="level-with-the-serving-engines"),
        pytest.param(None, 0, True, id="no-serving-engine-reports"),
    ],
)
def test_without_a_trainer_reading_current_means_level_with_the_serving_engines(
    serving_generation: int | None, engine_generation: int, marked: bool
) -> None:
    w = gated_world(mode={"weightSync": "Gated"})
    w.body["status"]["policyGeneration"] = None
    serving = [n for n, p in w.pods.items() if p.role == "rollout" and p.ready]
    for name in serving:
        w.pods[name] = pod(name, "rollout", policy_current=True)
    joining(w)
    readings = [reading(serving_generation, name) for name in serving]

    decision = decide_now(w, engine_readings=(reading(engine_generation), *readings))

    assert bool(marks(decision)) == marked


def test_a_draining_engine_is_not_gated_again() -> None:
    w = gated_world(POD_RULE)
    w.pods[VICTIM] = dataclasses.replace(w.pods[VICTIM], ready=False)
    journal(w, decide_now(w, findings=(drift(),)))

    decision = decide_now(w, engine_readings=(reading(9, VICTIM),))

    assert VICTIM not in [m.pod for m in marks(decision)]


@pytest.mark.parametrize(
    ("mode", "current", "requeue"),
    [
        pytest.param({"weightSync": "Gated"}, False, GATE_RECHECK_SECONDS, id="awaiting-gate"),
        pytest.param({"weightSync": "Gated"}, True, None, id="gated-already"),
        pytest.param({}, False, None, id="ungated"),
    ],
)
def test_a_pass_comes_back_while_an_engine_awaits_its_gate(
    mode: dict[str, str], current: bool, requeue: float | None
) -> None:
    w = gated_world(mode=mode)
    for name, each in list(w.pods.items()):
        if each.role == "rollout":
            w.pods[name] = pod(name, "rollout", policy_current=True)
    joining(w, policy_current=current)

    assert decide_now(w).plan.requeue_after == requeue
