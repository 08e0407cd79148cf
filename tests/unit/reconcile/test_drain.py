"""Gated rollout engines drain before the operator replaces them: a RestartPod journals the
drain's start and deletes once drained, an in-turn restart stamps each turn's drain first and
its delete once drained, a role restart (policy or manual) goes in turn; a draining pod counts as
unavailable, a waiting drain asks for a pass soon, its start and end are said in Events, and an
Ungated job is as before."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from rljob.api import ActionKind, ActionPod, EngineState, FailureReason
from rljob.health.evaluation import finding
from rljob.reconcile.decide import Decision
from rljob.reconcile.drain import (
    DRAIN_RECHECK_SECONDS,
    DRAIN_STARTED,
    DRAINED,
    DrainEnd,
    drain_end,
)
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.serving import unavailable
from rljob.reconcile.steps import CrashPoint, PostEvent
from tests.unit.reconcile.test_decide import decide_now, journal, request_restart
from tests.unit.reconcile.test_in_turn import (
    IN_TURN_RULE,
    OLDEST_FIRST,
    carry_out,
    deleted,
    fleet_finding,
    fleet_world,
    replaced,
)
from tests.unit.reconcile.world import T0, World, example_job

GATED = {"weightSync": "Gated", "drainTimeout": "2m"}
ROLE_RULE = {"roles": ["rollout"], "onReasons": ["KVCacheDrift"], "action": "RestartRole"}
POD_RULE = {"roles": ["rollout"], "onReasons": ["KVCacheDrift"], "action": "RestartPod"}
VICTIM = OLDEST_FIRST[0]


def gated_world(*rules: dict[str, Any], mode: dict[str, str] = GATED, **kw: Any) -> World:
    w = fleet_world(*rules, **kw)
    w.body["spec"]["roles"]["rollout"].update(mode)
    return w


def drift(target: str = VICTIM) -> Any:
    return finding("kv_drift", target, FailureReason.KV_CACHE_DRIFT, f"{target} drifted", {})


def idle(name: str, at: dt.datetime, running: float = 0) -> EngineReading:
    return EngineReading(pod=name, at=at, running=running, generation=1)


def said(decision: Decision, reason: str) -> list[str]:
    return [
        s.event.message
        for s in decision.steps
        if isinstance(s, PostEvent) and s.event.reason == reason
    ]


def crash_points(decision: Decision) -> list[str]:
    return [s.name for s in decision.steps if isinstance(s, CrashPoint)]


def roster(decision: Decision) -> dict[str, EngineState]:
    roles = decision.plan.status.roles
    rollout = roles.rollout if roles is not None else None
    return {m.pod: m.state for m in (rollout.engines or [])} if rollout else {}


def seconds(n: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=n)


ENTRY = ActionPod(name="e", uid="uid-e", drain_started_at=T0)


@pytest.mark.parametrize(
    ("reading", "now", "expected"),
    [
        pytest.param(None, 60, None, id="no-reading-waits-for-the-timeout"),
        pytest.param(None, 120, DrainEnd(True, None, 120), id="no-reading-times-out"),
        pytest.param(idle("e", seconds(0.5)), 3, None, id="a-reading-too-soon-after-the-start"),
        pytest.param(idle("e", seconds(1)), 3, DrainEnd(False, 0, 3), id="idle-after-the-settle"),
        pytest.param(idle("e", seconds(5), 3), 60, None, id="still-running"),
        pytest.param(idle("e", seconds(5), 3), 121, DrainEnd(True, 3, 121), id="timed-out"),
        pytest.param(EngineReading("e", seconds(5)), 60, None, id="running-unread-waits"),
        pytest.param(idle("other", seconds(5)), 60, None, id="another-pods-reading"),
        pytest.param(EngineReading("e", seconds(0), running=0, stopped=True), 0,
                     DrainEnd(False, 0, 0, stopped=True), id="no-container-running-ends-at-once"),
    ],
)  # fmt: skip
def test_drain_end(reading: EngineReading | None, now: float, expected: DrainEnd | None) -> None:
    job = example_job()
    readings = (reading,) if reading is not None else ()
    assert drain_end(job, ENTRY, readings, seconds(now)) == expected


def test_a_gated_pod_restart_drains_then_deletes() -> None:
    w = gated_world(POD_RULE)

    first = decide_now(w, findings=(drift(),))
    action = first.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_POD
    assert [(p.name, p.drain_started_at) for p in action.pods or []] == [(VICTIM, T0)]
    assert not deleted(first), "no delete before the drain ended"
    assert roster(first)[VICTIM] == EngineState.DRAINING
    assert first.plan.requeue_after == DRAIN_RECHECK_SECONDS
    assert "drain:started" in crash_points(first)
    assert said(first, DRAIN_STARTED) == [
        f"{VICTIM} draining: the roster says draining; deleted once no request runs on it or "
        "after 2m (drainTimeout)"
    ]
    journal(w, first)
    w.advance(4)

    waiting = decide_now(w, engine_readings=(idle(VICTIM, seconds(3), running=2),))
    drained = decide_now(w, engine_readings=(idle(VICTIM, seconds(3)),))

    assert not deleted(waiting) and waiting.plan.status == w.job.status
    assert deleted(drained) == [VICTIM]
    assert said(drained, DRAINED) == [f"{VICTIM} drained: 0 running after 4s"]
    assert crash_points(drained)[-2:] == ["drain:pod-deleted", "pod-restart:pod-deleted"]


def test_a_drain_without_readings_ends_at_its_timeout() -> None:
    w = gated_world(POD_RULE)
    journal(w, decide_now(w, findings=(drift(),)))
    w.advance(119)
    assert not deleted(decide_now(w))
    w.advance(1)

    timed_out = decide_now(w, engine_readings=(idle(VICTIM, seconds(100), running=3),))

    assert deleted(timed_out) == [VICTIM]
    assert said(timed_out, DRAINED) == [
        f"{VICTIM} drain timed out after 2m with 3 running: deleted"
    ]


def test_a_crash_after_the_drain_began_keeps_its_deadline() -> None:
    """The journal holds the start: a new process (no memory) deletes at the same deadline."""
    w = gated_world(POD_RULE)
    journal(w, decide_now(w, findings=(drift(),)))
    w.advance(120)

    resumed = decide_now(w)

    assert deleted(resumed) == [VICTIM] and resumed.plan.status.restarts.total == 1  # type: ignore[union-attr]


def test_an_ungated_pod_restart_deletes_at_once() -> None:
    w = gated_world(POD_RULE, mode={})

    decision = decide_now(w, findings=(drift(),))

    assert decision.plan.status.in_flight is not None
    assert decision.plan.status.in_flight.pods == []
    assert deleted(decision) == [VICTIM]
    assert EngineState.DRAINING not in roster(decision).values()
    assert not said(decision, DRAIN_STARTED) and "drain:started" not in crash_points(decision)


def test_in_turn_each_engine_drains_before_its_delete_within_max_unavailable() -> None:
    w = gated_world(IN_TURN_RULE)
    first = decide_now(w, findings=(fleet_finding(),))
    pods = first.plan.status.in_flight.pods  # type: ignore[union-attr]
    assert [(p.name, p.drain_started_at, p.deleted_at) for p in pods or []][:2] == [
        (VICTIM, T0, None), (OLDEST_FIRST[1], None, None)
    ]  # fmt: skip
    assert not deleted(first) and roster(first)[VICTIM] == EngineState.DRAINING
    carry_out(w, first)

    waiting = decide_now(w)
    assert not deleted(waiting), "the drain waits; no second pod starts while one is down"
    assert waiting.plan.status == w.job.status
    assert waiting.plan.requeue_after is not None and waiting.plan.requeue_after <= 2

    drained = decide_now(w, engine_readings=(idle(VICTIM, w.now),))
    stamped = drained.plan.status.in_flight.pods[0]  # type: ignore[union-attr]
    assert stamped.deleted_at == w.now and deleted(drained) == [VICTIM]
    assert said(drained, DRAINED) == [f"{VICTIM} drained: 0 running after 1s"]
    assert VICTIM not in roster(drained), "stamped for its delete: it left the roster"
    carry_out(w, drained)

    assert not deleted(decide_now(w)), "its replacement is not back yet"
    replaced(w, VICTIM)
    nxt = decide_now(w)
    assert [p.name for p in nxt.plan.status.in_flight.pods or [] if p.drain_started_at] == [  # type: ignore[union-attr]
        VICTIM, OLDEST_FIRST[1]
    ]  # fmt: skip
    assert not deleted(nxt)


def test_a_draining_engine_counts_as_unavailable() -> None:
    w = gated_world(POD_RULE)
    before = unavailable(w.job, w.observed, "rollout")
    journal(w, decide_now(w, findings=(drift(),)))

    assert unavailable(w.job, w.observed, "rollout") == before + 1


def test_a_second_finding_waits_for_room_while_an_engine_drains() -> None:
    w = gated_world(POD_RULE, max_unavailable=2)
    first = decide_now(w, findings=(drift(),))
    journal(w, first)
    w.advance(1)

    later = decide_now(w, findings=(drift(OLDEST_FIRST[1]),))

    assert later.plan.status.in_flight == first.plan.status.in_flight, "one action at a time"


def test_a_policy_role_restart_of_gated_engines_goes_in_turn() -> None:
    w = gated_world(ROLE_RULE)

    decision = decide_now(w, findings=(drift(),))

    action = decision.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_ROLE_IN_TURN
    assert action.reason == FailureReason.KV_CACHE_DRIFT
    assert decision.plan.status.restarts.total == 1  # type: ignore[union-attr]
    assert [p.name for p in action.pods or [] if p.drain_started_at] == [VICTIM]


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        pytest.param(GATED, ActionKind.RESTART_ROLE_IN_TURN, id="gated-in-turn"),
        pytest.param({}, ActionKind.RESTART_ROLE, id="ungated-rolls-its-deployment"),
    ],
)
def test_a_manual_rollout_restart(mode: dict[str, str], kind: ActionKind) -> None:
    w = gated_world(mode=mode)
    request_restart(w, "rollout/n1")

    decision = decide_now(w)

    action = decision.plan.status.in_flight
    assert action is not None and (action.id, action.kind) == ("manual-n1", kind)
    assert decision.plan.status.restarts.total == 1  # type: ignore[union-attr]
    if kind == ActionKind.RESTART_ROLE_IN_TURN:
        assert [p.name for p in action.pods or [] if p.drain_started_at] == [VICTIM]
        (message,) = said(decision, "RestartRequested")
        assert message.startswith("restart in turn (each engine drained first) of ")


def test_a_pod_gone_while_draining_ends_the_restart() -> None:
    w = gated_world(POD_RULE)
    journal(w, decide_now(w, findings=(drift(),)))
    w.pods[VICTIM] = dataclasses.replace(w.pods[VICTIM], deleting=True)

    assert decide_now(w).plan.status.in_flight is None
