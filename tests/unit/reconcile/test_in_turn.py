"""RestartRoleInTurn through decide(): journaled and counted once with the role's pods oldest
first, one delete per turn within maxUnavailable, resumed after a crash without a second turn,
pods gone on their own skipped, settled with one Event once the role is ready, and the other
actions (manual restarts, trainer failures, suspend) waiting for it or ending it."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from rljob.api import ActionKind, EngineState, FailureReason, JobPhase
from rljob.api.status import JOURNAL_FORMAT
from rljob.health.evaluation import finding
from rljob.reconcile.decide import Decision
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.in_turn import (
    RESTARTED_IN_TURN,
    RESTARTING_IN_TURN,
    ROLE_READY_STEP,
)
from rljob.reconcile.steps import DeleteObject, PostEvent, SetPolicyCurrent
from rljob.reconcile.unfinished import PREEMPTED_IN_TURN
from tests.unit.reconcile.test_decide import (
    decide_now,
    fail_trainer,
    journal,
    request_restart,
    running_world,
)
from tests.unit.reconcile.world import T0, World, pod

IN_TURN_RULE = {"onReasons": ["FleetKVCacheFragmentation"], "action": "RestartRoleInTurn"}
ROLLOUT = "grpo-demo-rollout"
ENGINES = 4  # examples/rljob-demo.yaml: rollout replicas 4, maxUnavailable 1
# Created out of name order, so that oldest first is not alphabetical.
AGES = {"d": 0, "b": 1, "a": 2, "c": 3}  # minutes after T0
OLDEST_FIRST = [f"{ROLLOUT}-{n}" for n in sorted(AGES, key=AGES.__getitem__)]


def fleet_world(*rules: dict[str, Any], max_unavailable: int = 1) -> World:
    w = running_world()
    w.body["spec"]["failurePolicy"]["rules"] = list(rules)
    w.body["spec"]["roles"]["rollout"]["maxUnavailable"] = max_unavailable
    for suffix, minutes in AGES.items():
        name = f"{ROLLOUT}-{suffix}"
        w.pods[name] = pod(name, "rollout", created_at=T0 + dt.timedelta(minutes=minutes))
    return w


def fleet_finding(target: str = f"{ROLLOUT}-a") -> Any:
    message = "every rollout engine (4) is slower than its model expects at the load it is offered"
    return finding("kv_drift", target, FailureReason.FLEET_KV_CACHE_FRAGMENTATION, message, {})


def deleted(decision: Decision) -> list[str]:
    return [s.name for s in decision.steps if isinstance(s, DeleteObject) and s.kind == "Pod"]


def events(decision: Decision, reason: str) -> list[PostEvent]:
    return [s for s in decision.steps if isinstance(s, PostEvent) and s.event.reason == reason]


def carry_out(w: World, decision: Decision) -> None:
    """The journal written, then the decided deletes: the pods are terminating."""
    journal(w, decision)
    for name in deleted(decision):
        w.pods[name] = dataclasses.replace(w.pods[name], deleting=True, ready=False)
    w.advance(1)


def replaced(w: World, name: str, *, ready: bool = True) -> str:
    """The terminating pod is gone and its Deployment's replacement runs (ready or not)."""
    w.pods.pop(name)
    new = f"{name}-new"
    w.pods[new] = pod(new, "rollout", ready=ready, created_at=w.now)
    return new


def started(w: World) -> Decision:
    decision = decide_now(w, findings=(fleet_finding(),))
    carry_out(w, decision)
    return decision


def test_the_fleet_finding_is_reported_by_default() -> None:
    w = fleet_world()

    decision = decide_now(w, findings=(fleet_finding(),))

    assert decision.plan.status.in_flight is None and not deleted(decision)
    (report,) = decision.reports
    assert report[1].reason == "FleetKVCacheFragmentation"
    assert "a new detector reports by default" in report[1].message


@pytest.mark.parametrize(
    ("named", "listed"),
    [
        pytest.param(None, OLDEST_FIRST, id="a-finding-naming-no-engines-takes-the-role"),
        pytest.param(f"{ROLLOUT}-a {ROLLOUT}-d", [f"{ROLLOUT}-d", f"{ROLLOUT}-a"],
                     id="the-engines-it-named-oldest-first"),
        pytest.param(f"{ROLLOUT}-b {ROLLOUT}-gone", [f"{ROLLOUT}-b"],
                     id="a-named-engine-gone-since-is-skipped"),
    ],
)  # fmt: skip
def test_the_fleet_finding_restarts_only_the_engines_it_named(
    named: str | None, listed: list[str]
) -> None:
    """Engines still warming up or in their cooldown are not judged, so the finding does not name
    them: restarting them as well would repeat a repair inside its cooldown."""
    w = fleet_world(IN_TURN_RULE)
    fleet = fleet_finding()
    if named is not None:
        fleet = dataclasses.replace(fleet, evidence={"engines": named})

    action = decide_now(w, findings=(fleet,)).plan.status.in_flight

    assert action is not None and [p.name for p in action.pods or []] == listed


def test_journaled_and_counted_once_with_the_pods_oldest_first() -> None:
    w = fleet_world(IN_TURN_RULE)

    decision = decide_now(w, findings=(fleet_finding(),))

    status = decision.plan.status
    action = status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_ROLE_IN_TURN
    assert [p.name for p in action.pods or []] == OLDEST_FIRST
    assert [p.name for p in action.pods or [] if p.deleted_at] == OLDEST_FIRST[:1]
    ledger = status.restarts
    assert ledger is not None and (ledger.total, ledger.counted) == (1, 1), "one budget entry"
    assert ledger.recent[-1].action == "RestartRoleInTurn"
    assert deleted(decision) == OLDEST_FIRST[:1], "the first turn goes in the same write"
    assert decision.restarted == ("rollout", OLDEST_FIRST[0])
    (announced,) = events(decision, RESTARTING_IN_TURN)
    assert announced.event.message.endswith(f"in turn, oldest first: {', '.join(OLDEST_FIRST)}")
    (restarting,) = [c for c in status.conditions if c.type == "Restarting"]
    assert restarting.reason == "FleetKVCacheFragmentation"
    assert restarting.message.endswith(": Deleted 1/4")


def test_every_pod_in_turn_within_max_unavailable_then_one_event() -> None:
    w = fleet_world(IN_TURN_RULE)
    turns = [deleted(started(w))]
    for _ in range(ENGINES * 3):
        decision = decide_now(w)
        # Each turn's pod goes and comes back ready before the next turn is taken.
        assert len([p for p in w.pods.values() if p.deleting or not p.ready]) <= 1
        carry_out(w, decision)
        if deleted(decision):
            turns.append(deleted(decision))
        for name in [n for n, p in w.pods.items() if p.deleting]:
            replaced(w, name)
        if w.job.status.in_flight is None:
            break
        assert w.job.status.restarts is not None and w.job.status.restarts.total == 1

    assert turns == [[name] for name in OLDEST_FIRST]
    assert w.job.status.in_flight is None
    posted = events(decision, RESTARTED_IN_TURN)
    assert posted and posted[0].event.message.endswith(", ".join(OLDEST_FIRST))


def test_no_second_turn_while_the_first_pod_is_down() -> None:
    w = fleet_world(IN_TURN_RULE)
    started(w)

    terminating = decide_now(w)
    carry_out(w, terminating)
    replacement = replaced(w, OLDEST_FIRST[0], ready=False)
    starting = decide_now(w)

    assert not deleted(terminating) and not deleted(starting)
    w.pods[replacement] = dataclasses.replace(w.pods[replacement], ready=True)
    assert deleted(decide_now(w)) == OLDEST_FIRST[1:2]


def test_a_crash_between_the_journal_and_the_delete_resumes_that_delete_only() -> None:
    w = fleet_world(IN_TURN_RULE)
    journal(w, decide_now(w, findings=(fleet_finding(),)))  # the process died before deleting

    resumed = decide_now(w)

    assert deleted(resumed) == OLDEST_FIRST[:1], "the same pod, not the next one"
    assert resumed.plan.status == w.job.status, "no new turn, no second count"
    assert resumed.restarted is None


@pytest.mark.parametrize(
    ("change", "next_turn"),
    [
        pytest.param({"ready": False}, f"{ROLLOUT}-a", id="a-pod-serving-nothing-needs-no-room"),
        pytest.param({"deleting": True}, None, id="a-pod-going-on-its-own-is-skipped"),
    ],
)
def test_pods_not_serving_while_the_first_turn_runs(
    change: dict[str, Any], next_turn: str | None
) -> None:
    w = fleet_world(IN_TURN_RULE)
    started(w)
    w.pods[f"{ROLLOUT}-a"] = dataclasses.replace(w.pods[f"{ROLLOUT}-a"], **change)

    decision = decide_now(w)

    assert deleted(decision) == ([next_turn] if next_turn else [])


def test_pods_gone_on_their_own_are_skipped_and_named() -> None:
    w = fleet_world(IN_TURN_RULE)
    started(w)
    for name in OLDEST_FIRST[:3]:  # the first by our turn, two more by someone else
        w.pods.pop(name)
        w.pods[f"{name}-new"] = pod(f"{name}-new", "rollout", created_at=w.now)

    decision = decide_now(w)
    assert deleted(decision) == OLDEST_FIRST[3:]
    carry_out(w, decision)
    replaced(w, OLDEST_FIRST[3])
    ready = decide_now(w)

    assert ready.plan.status.in_flight is not None
    assert ready.plan.status.in_flight.step == ROLE_READY_STEP
    (done,) = events(ready, RESTARTED_IN_TURN)
    assert done.event.message.endswith(
        f": {OLDEST_FIRST[0]}, {OLDEST_FIRST[3]}; not restarted (gone before their turn): "
        f"{', '.join(OLDEST_FIRST[1:3])}"
    )
    journal(w, ready)
    settled = decide_now(w)
    assert settled.plan.status.in_flight is None
    assert [e.name for e in events(settled, RESTARTED_IN_TURN)] == [done.name], "said again"


def test_two_at_once_with_max_unavailable_two() -> None:
    w = fleet_world(IN_TURN_RULE, max_unavailable=2)
    started(w)

    second = decide_now(w)
    carry_out(w, second)
    third = decide_now(w)

    assert deleted(second) == OLDEST_FIRST[1:2]
    assert not deleted(third), "two of four down: maxUnavailable 2"


def test_a_finding_right_after_it_settles_is_cooled_down() -> None:
    w = fleet_world(IN_TURN_RULE)
    w.body["status"]["restarts"] = {
        "total": 1,
        "counted": 1,
        "recent": [{"time": w.now.isoformat(), "role": "rollout", "reason":
                    "FleetKVCacheFragmentation", "action": "RestartRoleInTurn"}],
    }  # fmt: skip
    w.advance(30)  # within the demo's kvDrift.cooldown of 1m

    decision = decide_now(w, findings=(fleet_finding(),))

    assert decision.plan.status.in_flight is None
    assert "cooldown" in decision.reports[0][1].message


def test_a_manual_restart_waits_for_it() -> None:
    w = fleet_world(IN_TURN_RULE)
    started(w)
    request_restart(w, "rollout/n1")

    decision = decide_now(w)

    action = decision.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_ROLE_IN_TURN
    assert decision.plan.status.last_restart_request is None


def test_a_failed_trainer_ends_it_without_failing_the_job() -> None:
    """Once its decided deletes were sent, the trainer's repair goes first: waiting behind the
    remaining turns would hold the costliest repair behind the cheapest for as long as they take."""
    w = fleet_world(IN_TURN_RULE)
    started(w)
    w.advance(5)
    fail_trainer(w)

    decision = decide_now(w)

    assert decision.plan.status.phase != JobPhase.FAILED
    assert decision.plan.status.attempt == 2
    action = decision.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_TRAINER_GANG
    (message,) = preemption(decision)
    assert "trainer attempt 1 failed" in message and "Gated" not in message


def test_suspended_midway_it_takes_no_more_turns_and_settles_once_the_pods_are_gone() -> None:
    w = fleet_world(IN_TURN_RULE)
    started(w)
    w.edit(suspend=True)

    suspended = decide_now(w)
    assert not deleted(suspended)
    for name in list(w.pods):
        if name.startswith(ROLLOUT):
            w.pods.pop(name)
    gone = decide_now(w)

    assert gone.plan.status.in_flight is not None
    assert gone.plan.status.in_flight.step == ROLE_READY_STEP
    (done,) = events(gone, RESTARTED_IN_TURN)
    assert "not restarted (gone before their turn)" in done.event.message


def test_an_entry_of_a_newer_format_is_left_alone() -> None:
    """A downgraded operator neither deletes for nor settles an in-turn entry it cannot read."""
    w = fleet_world(IN_TURN_RULE)
    journal(w, decide_now(w, findings=(fleet_finding(),)))
    w.body["status"]["inFlight"]["format"] = JOURNAL_FORMAT + 1
    for name in OLDEST_FIRST:
        w.pods.pop(name)  # even with every listed pod gone

    decision = decide_now(w)

    assert not deleted(decision) and not events(decision, RESTARTED_IN_TURN)
    assert decision.plan.status.in_flight == w.job.status.in_flight
    assert [event.reason for _, event in decision.reports] == ["JournalFormatUnknown"]


# -- a trainer failure during a Gated in-turn restart of the rollout ------------------------------

GATED = {"weightSync": "Gated", "drainTimeout": "2m"}
FIRST, REST = OLDEST_FIRST[0], OLDEST_FIRST[1:]


def gated_started(w: World, *, manual: bool = False) -> None:
    """A Gated in-turn restart of the rollout whose first engine drains (journaled)."""
    w.body["spec"]["roles"]["rollout"].update(GATED)
    if manual:
        request_restart(w, "rollout/n1")
    carry_out(w, decide_now(w, findings=() if manual else (fleet_finding(),)))


def first_replaced_awaiting_its_gate(w: World) -> None:
    """The first engine drained and was deleted; its replacement waits for the trainer."""
    gated_started(w)
    carry_out(w, decide_now(w, engine_readings=(idle(FIRST, w.now),)))
    replaced(w, FIRST, ready=False)


def idle(name: str, at: dt.datetime) -> EngineReading:
    return EngineReading(pod=name, at=at, running=0, generation=1)


def preemption(decision: Decision) -> list[str]:
    return [event.message for _, event in decision.reports if event.reason == PREEMPTED_IN_TURN]


DRAINING_LEFT = f"{', '.join(OLDEST_FIRST)} ({FIRST} stopped draining)"
GANG = ActionKind.RESTART_TRAINER_GANG


@pytest.mark.parametrize(
    ("begin", "after", "kind", "attempt", "restarts", "left"),
    [
        pytest.param(gated_started, 5, GANG, 2, 2, DRAINING_LEFT,
                     id="a-draining-engine-stops-draining"),
        pytest.param(first_replaced_awaiting_its_gate, 5, GANG, 2, 2, ", ".join(REST),
                     id="a-replacement-awaits-the-trainers-weights"),
        pytest.param(partial(gated_started, manual=True), 5, GANG, 2, 2, DRAINING_LEFT,
                     id="a-manual-rollout-restart-in-turn"),  # the user's restart is one too
        pytest.param(gated_started, 0, None, 1, 1, DRAINING_LEFT,
                     id="within-the-backoff-it-ends-and-the-trainer-waits"),
        pytest.param(started, 5, GANG, 2, 2, ", ".join(REST), id="ungated-it-ends-too"),
    ],
)  # fmt: skip
def test_a_failed_trainer_preempts_a_gated_in_turn_restart(
    begin: Callable[[World], object],
    after: float,
    kind: ActionKind | None,
    attempt: int,
    restarts: int,
    left: str | None,
) -> None:
    """Its replacements turn Ready only once the trainer's driver pushed them weights: waiting
    for them would be a deadlock. The pass that sees the failure ends it (counted, backoff and
    FailJob apply as ever); Ungated too, once its decided deletes were sent."""
    w = fleet_world(IN_TURN_RULE)
    begin(w)
    w.advance(after)
    fail_trainer(w)

    decision = decide_now(w)

    status = decision.plan.status
    assert status.phase != JobPhase.FAILED
    assert (status.in_flight.kind if status.in_flight else None, status.attempt) == (kind, attempt)
    assert status.restarts is not None and status.restarts.total == restarts
    if left is None:
        assert not preemption(decision)
        return
    (message,) = preemption(decision)
    assert message.endswith(f"not restarted: {left}")
    assert not deleted(decision), "its pods not yet taken are left running"
    engines = status.roles.rollout.engines if status.roles and status.roles.rollout else None
    assert EngineState.DRAINING not in [m.state for m in engines or []]


STALL = finding("trainer_stall", "trainer", FailureReason.TRAINER_STALLED, "no heartbeat", {})
REPORT_STALLS = {"roles": ["trainer"], "onReasons": ["TrainerStalled"], "action": "Report"}


@pytest.mark.parametrize(
    ("begin", "rules", "findings", "asked", "ended", "why"),
    [
        pytest.param(first_replaced_awaiting_its_gate, [], (STALL,), None, True,
                     "the trainer's TrainerStalled finding goes first",
                     id="a-stalled-trainer-ends-a-gated-one"),
        pytest.param(first_replaced_awaiting_its_gate, [], (), "trainer/unstick", True,
                     "a trainer restart was requested (unstick)",
                     id="a-manual-trainer-restart-ends-a-gated-one"),
        pytest.param(started, [], (STALL,), None, True,
                     "the trainer's TrainerStalled finding goes first", id="ungated-too"),
        pytest.param(first_replaced_awaiting_its_gate, [REPORT_STALLS], (STALL,), None, False,
                     None, id="a-finding-only-reported-ends-nothing"),
        pytest.param(first_replaced_awaiting_its_gate, [], (), "rollout/again", False, None,
                     id="a-manual-rollout-restart-waits-for-it"),
        pytest.param(gated_started, [], (STALL,), None, False, None,
                     id="a-drained-engine's-delete-goes-first"),
    ],
)  # fmt: skip
def test_a_repair_of_the_trainer_ends_it(
    begin: Callable[[World], object],
    rules: list[dict[str, Any]],
    findings: tuple[Any, ...],
    asked: str | None,
    ended: bool,
    why: str | None,
) -> None:
    """A hung trainer never pushes the weights a Gated replacement waits for, so a stalled
    trainer the policy restarts, or a manual trainer restart, ends the restart in turn as a
    failed attempt does, in the write that journals the gang restart."""
    w = fleet_world(*rules, IN_TURN_RULE)
    begin(w)
    w.advance(5)
    if asked is not None:
        request_restart(w, asked)

    readings = (idle(FIRST, w.now),) if begin is gated_started else ()
    decision = decide_now(w, findings=findings, engine_readings=readings)

    action = decision.plan.status.in_flight
    assert action is not None
    assert (action.kind == GANG) is ended
    assert (decision.plan.status.attempt == 2) is ended
    if not ended:
        assert not preemption(decision)
        return
    (message,) = preemption(decision)
    assert why is not None and why in message


def timed_out_events(decision: Decision) -> list[str]:
    return [e.message for _, e in decision.reports if e.reason == "RoleRestartTimedOut"]


@pytest.mark.parametrize(
    ("minutes", "ended"),
    [
        pytest.param(29, False, id="within-actiontimeout-it-waits"),
        pytest.param(30, True, id="after-actiontimeout-without-a-turn-it-ends"),
    ],
)
def test_a_replacement_that_never_turns_ready_ends_it_after_actiontimeout(
    minutes: int, ended: bool
) -> None:
    """Every wait of an action is bounded: the role never gets room for the next turn while the
    first replacement stays Pending, so it ends, said in a Warning naming the pods left."""
    w = fleet_world(IN_TURN_RULE)
    started(w)
    new = replaced(w, FIRST, ready=False)
    w.pods[new] = dataclasses.replace(w.pods[new], phase="Pending", node="",
                                      unschedulable_message="0/8 nodes are available")  # fmt: skip
    w.advance(minutes * 60 - 1)

    decision = decide_now(w)

    action = decision.plan.status.in_flight
    assert (action is None) is ended
    if ended:
        (message,) = timed_out_events(decision)
        assert message.endswith(f"no turn taken and the role not ready for 30m (actionTimeout); "
                                f"not restarted: {', '.join(REST)}")  # fmt: skip
    else:
        assert not timed_out_events(decision)


def test_a_drain_under_way_is_bounded_by_drain_timeout_not_actiontimeout() -> None:
    w = fleet_world(IN_TURN_RULE)
    w.body["spec"]["roles"]["rollout"].update(weightSync="Gated", drainTimeout="45m")
    carry_out(w, decide_now(w, findings=(fleet_finding(),)))
    w.advance(40 * 60)

    draining = decide_now(w, engine_readings=(EngineReading(FIRST, w.now, 3, 1),))

    assert draining.plan.status.in_flight is not None and not timed_out_events(draining)


def test_a_roll_whose_role_never_turns_ready_ends_after_actiontimeout() -> None:
    w = fleet_world()
    request_restart(w, "rollout/n1")
    rolled = decide_now(w)
    journal(w, rolled)
    action = rolled.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_ROLE
    w.advance(30 * 60)

    decision = decide_now(w)

    assert decision.plan.status.in_flight is None
    (message,) = timed_out_events(decision)
    assert "not ready 30m (actionTimeout) after its roll" in message


def test_preempted_within_the_backoff_the_gang_restart_follows_it() -> None:
    w = fleet_world(IN_TURN_RULE)
    gated_started(w)
    fail_trainer(w)
    held = decide_now(w)
    journal(w, held)
    w.advance(1)

    later = decide_now(w)

    assert held.plan.status.in_flight is None and preemption(held)
    action = later.plan.status.in_flight
    assert action is not None and action.kind == GANG and later.plan.status.attempt == 2
    assert not preemption(later), "said once"


@pytest.mark.parametrize(
    ("fail", "failed", "held"),
    [
        pytest.param({"exit_code": 93}, True, False, id="exit-93-fails-the-job"),
        pytest.param(None, False, True, id="its-failed-rank-not-seen-yet-waits"),
    ],
)  # fmt: skip
def test_the_policy_decides_a_preempting_failure_as_ever(
    fail: dict[str, Any] | None, failed: bool, held: bool
) -> None:
    w = fleet_world(IN_TURN_RULE, {"onExitCodes": [93], "action": "FailJob"})
    gated_started(w)
    w.advance(5)
    if fail is not None:
        w.fail_rank(1, 0, reason="Error", message="bad reward config", **fail)
    w.finish_job(1, failed=True, failed_at=w.now)

    decision = decide_now(w)

    status = decision.plan.status
    assert (status.phase == JobPhase.FAILED) == failed and status.attempt == 1
    assert bool(preemption(decision)) == (not held)
    if held:
        action = status.in_flight
        assert action is not None and action.kind == ActionKind.RESTART_ROLE_IN_TURN
        assert decision.plan.requeue_after is not None and decision.plan.requeue_after <= 1


def test_a_pod_whose_turn_came_is_deleted_before_the_preemption() -> None:
    """Its delete is fenced by the journal: sent in the pass that stamped it (or resumed), and
    only once the pod is seen going does the failure end the restart."""
    w = fleet_world(IN_TURN_RULE)
    gated_started(w)
    w.advance(5)
    fail_trainer(w)

    drained = decide_now(w, engine_readings=(idle(FIRST, w.now),))
    carry_out(w, drained)
    ended = decide_now(w)

    assert deleted(drained) == [FIRST] and not preemption(drained)
    action = drained.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_ROLE_IN_TURN
    (message,) = preemption(ended)
    assert message.endswith(f"not restarted: {', '.join(REST)}")
    assert ended.plan.status.in_flight is not None
    assert ended.plan.status.in_flight.kind == GANG


def test_a_gated_in_turn_restart_whose_role_is_ready_settles_first() -> None:
    w = fleet_world(IN_TURN_RULE)
    first_replaced_awaiting_its_gate(w)
    for name in list(w.pods):  # every engine restarted and ready: nothing waits on the trainer
        if name in OLDEST_FIRST:
            replaced(w, name)
    w.pods = {n: dataclasses.replace(p, ready=True) for n, p in w.pods.items()}
    w.advance(5)
    fail_trainer(w)

    ready = decide_now(w)
    journal(w, ready)
    settled = decide_now(w)

    assert ready.plan.status.in_flight is not None
    assert ready.plan.status.in_flight.step == ROLE_READY_STEP
    assert events(ready, RESTARTED_IN_TURN) and not preemption(ready)
    assert settled.plan.status.in_flight is not None
    assert settled.plan.status.in_flight.kind == GANG and not preemption(settled)


def test_an_engine_that_stopped_draining_gets_its_gate_back_by_its_reading() -> None:
    """The drain closed its gate (NotReady, out of its Service); once the failure ended the
    restart it is an engine awaiting its gate like any other, reopened on its reading."""
    w = fleet_world(IN_TURN_RULE)
    gated_started(w)
    w.pods[FIRST] = dataclasses.replace(w.pods[FIRST], ready=False, policy_current=False)
    w.advance(5)
    fail_trainer(w)
    journal(w, decide_now(w))

    reopened = decide_now(w, engine_readings=(idle(FIRST, w.now),))

    gates = [s for s in reopened.steps if isinstance(s, SetPolicyCurrent)]
    assert [(s.pod, s.current) for s in gates] == [(FIRST, True)]


def leak_finding(engines: str | None) -> Any:
    evidence: dict[str, str | float] = {"engines": engines} if engines is not None else {}
    message = "idle with 40 % of its KV cache held by no request"
    return finding("kv_leak", f"{ROLLOUT}-a", FailureReason.KV_CACHE_LEAK, message, evidence)


@pytest.mark.parametrize(
    ("engines", "kind", "listed"),
    [
        pytest.param(None, ActionKind.RESTART_POD, None, id="one-engine-restarts-alone"),
        pytest.param(" ".join(OLDEST_FIRST), ActionKind.RESTART_ROLE_IN_TURN, OLDEST_FIRST,
                     id="every-engine-restarts-in-turn-oldest-first"),
    ],
)  # fmt: skip
def test_a_cause_every_engine_has_restarts_the_role_in_turn_by_default(
    engines: str | None, kind: ActionKind, listed: list[str] | None
) -> None:
    """The built-in RestartPod of an engine cause, on a finding naming the whole role: one
    in-turn restart, counted once, rather than four pod restarts racing for maxUnavailable."""
    decision = decide_now(fleet_world(), findings=(leak_finding(engines),))

    action = decision.plan.status.in_flight
    assert action is not None and action.kind == kind
    assert deleted(decision) == [f"{ROLLOUT}-a" if listed is None else listed[0]]
    if listed is not None:
        assert [p.name for p in action.pods or []] == listed
        ledger = decision.plan.status.restarts
        assert ledger is not None and ledger.recent[-1].action == "RestartRoleInTurn"
