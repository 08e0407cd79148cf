"""The rljob.io/policy-current gate: a pass sets it True on each live Gated rollout engine that
reports at least its roster member's required generation (the target when it joined: the
trainer's live generation, else the newest of status and the serving engines; with
generationFrom engine, what the serving engines report now, to which a joining member is
rebased), and False while it drains or after its container restarted in place; never for
Ungated jobs, deleting or ended pods, stale or unread generations."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from rljob.api import EngineMember, EngineState
from rljob.reconcile.decide import Decision
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.gate import GATE_RECHECK_SECONDS
from rljob.reconcile.progress import ProgressReading
from rljob.reconcile.steps import CrashPoint, SetPolicyCurrent
from tests.unit.reconcile.test_decide import decide_now, journal
from tests.unit.reconcile.test_drain import POD_RULE, VICTIM, drift, gated_world, roster
from tests.unit.reconcile.world import T0, World, pod

NEW = "grpo-demo-rollout-new"
GATED = {"weightSync": "Gated"}
FROM_ENGINE = {"weightSync": "Gated", "generationFrom": "engine"}


def joining(w: World, **fields: Any) -> None:
    w.pods[NEW] = pod(NEW, "rollout", ready=False, **fields)


def gates(decision: Decision) -> list[SetPolicyCurrent]:
    return [s for s in decision.steps if isinstance(s, SetPolicyCurrent)]


def opened(decision: Decision, name: str = NEW) -> bool:
    return any(g.pod == name and g.current for g in gates(decision))


def closed(decision: Decision, name: str) -> list[str]:
    return [g.reason for g in gates(decision) if g.pod == name and not g.current]


def reading(generation: int | None, name: str = NEW) -> EngineReading:
    return EngineReading(pod=name, at=T0, running=0, generation=generation)


def member(decision: Decision, name: str = NEW) -> EngineMember:
    roles = decision.plan.status.roles
    engines = roles.rollout.engines if roles is not None and roles.rollout is not None else None
    return next(m for m in engines or [] if m.pod == name)


def previous_roster(w: World, *members: EngineMember) -> None:
    """The roster the last pass wrote (status.roles.rollout.engines)."""
    rollout = w.body["status"].setdefault("roles", {}).setdefault("rollout", {})
    rollout.update(desired=4, ready=4)
    rollout["engines"] = [m.model_dump(mode="json", by_alias=True) for m in members]


@pytest.mark.parametrize(
    ("mode", "policy", "generation", "fields", "marked"),
    [
        pytest.param(GATED, 7, 7, {}, True, id="current"),
        pytest.param(GATED, 7, 8, {}, True, id="newer-than-the-status"),
        pytest.param(GATED, None, 0, {}, True, id="no-policy-generation-yet"),
        pytest.param(GATED, 7, 6, {}, False, id="stale"),
        pytest.param(GATED, 7, None, {}, False, id="unread"),
        pytest.param(GATED, 7, 7, {"policy_current": True}, False, id="already-set"),
        pytest.param(GATED, 7, 7, {"deleting": True}, False, id="deleting"),
        pytest.param(GATED, 7, 7, {"phase": "Failed"}, False, id="ended"),
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

    expected = [SetPolicyCurrent(NEW, f"uid-{NEW}", True, generation=generation)]
    assert gates(decision) == (expected if marked else [])


@pytest.mark.parametrize(
    ("status_generation", "trainer_generation", "engine_generation", "marked"),
    [
        pytest.param(None, 5, 0, False, id="command-line-weights-while-the-trainer-is-at-5"),
        pytest.param(None, 5, 5, True, id="pushed-to-the-trainer's-generation"),
        pytest.param(3, 5, 4, False, id="newer-than-the-lagging-status-but-behind-the-trainer"),
        pytest.param(6, 5, 5, True,
                     id="resume-from-an-older-checkpoint:-the-live-generation-passes-"
                        "although-status-says-higher"),
        pytest.param(6, None, 5, False, id="no-trainer-reading:-status-is-the-target"),
    ],
)  # fmt: skip
def test_a_newcomer_s_target_is_the_trainer_s_live_generation(
    status_generation: int | None,
    trainer_generation: int | None,
    engine_generation: int,
    marked: bool,
) -> None:
    """status.policyGeneration is refreshed every 5 minutes at most: the trainer's live reading,
    the current attempt's, is the target when there is one."""
    w = gated_world(mode=GATED)
    w.body["status"]["policyGeneration"] = status_generation
    joining(w)

    decision = decide_now(
        w,
        engine_readings=(reading(engine_generation),),
        progress=ProgressReading(policy_generation=trainer_generation),
    )

    assert opened(decision) == marked
    expected = trainer_generation if trainer_generation is not None else status_generation
    assert member(decision).required_generation == expected


@pytest.mark.parametrize(
    ("serving_generation", "engine_generation", "marked"),
    [
        pytest.param(4, 0, False, id="behind-the-serving-engines"),
        pytest.param(4, 4, True, id="level-with-the-serving-engines"),
        pytest.param(None, 0, True, id="no-serving-engine-reports"),
    ],
)
def test_without_a_trainer_reading_the_target_is_level_with_the_serving_engines(
    serving_generation: int | None, engine_generation: int, marked: bool
) -> None:
    w = gated_world(mode=GATED)
    w.body["status"]["policyGeneration"] = None
    serving = [n for n, p in w.pods.items() if p.role == "rollout" and p.ready]
    for name in serving:
        w.pods[name] = pod(name, "rollout", policy_current=True)
    joining(w)
    readings = [reading(serving_generation, name) for name in serving]

    decision = decide_now(w, engine_readings=(reading(engine_generation), *readings))

    assert opened(decision) == marked


@pytest.mark.parametrize(
    ("required", "trainer", "engine", "marked", "kept"),
    [
        pytest.param(5, 7, 5, True, 5, id="push-slower-than-a-step-still-passes"),
        pytest.param(5, 7, 4, False, 5, id="below-its-own-target"),
        pytest.param(None, 7, 5, False, 7, id="nothing-known-when-it-joined:-this-pass's-target"),
        pytest.param(None, None, 0, True, None, id="nothing-known-yet:-any-generation"),
        pytest.param(120, 100, 100, True, 100,
                     id="lowered-while-joining-after-a-resume-from-an-older-checkpoint"),
        pytest.param(120, None, 100, False, 120, id="kept-while-the-new-attempt-is-unread"),
    ],
)  # fmt: skip
def test_a_member_keeps_the_target_fixed_when_it_joined(
    required: int | None, trainer: int | None, engine: int, marked: bool, kept: int | None
) -> None:
    """Fixed, so a push slower than a step still passes; lowered while it joins when the trainer's
    current attempt is below it (resumed from an older checkpoint), so it stays reachable."""
    w = gated_world(mode=GATED)
    w.body["status"]["policyGeneration"] = None
    joining(w)
    previous_roster(w, EngineMember(pod=NEW, state=EngineState.JOINING,
                                    required_generation=required))  # fmt: skip

    decision = decide_now(
        w,
        engine_readings=(reading(engine),),
        progress=ProgressReading(policy_generation=trainer),
    )

    assert opened(decision) == marked
    assert member(decision).required_generation == kept


def _serving(w: World, name: str, restarts: int, **fields: Any) -> None:
    """A Gated engine as its gate left it (True unless `fields` say otherwise)."""
    values = {"policy_current": True, "restart_count": restarts, **fields}
    known = w.pods.get(name)
    w.pods[name] = dataclasses.replace(known, **values) if known else pod(name, "rollout", **values)


def test_an_in_place_restart_closes_the_gate_and_refixes_the_target() -> None:
    w = gated_world(mode=GATED)
    previous_roster(w, EngineMember(pod=NEW, state=EngineState.SERVING, required_generation=3))
    _serving(w, NEW, restarts=1)
    live = ProgressReading(policy_generation=8)

    restarted = decide_now(w, engine_readings=(reading(3),), progress=live)

    assert closed(restarted, NEW) == ["ContainerRestarted"]
    assert not opened(restarted)
    rejoining = member(restarted)
    assert (rejoining.state, rejoining.required_generation, rejoining.restarts) == (
        EngineState.JOINING, 8, 0,
    )  # fmt: skip

    journal(w, restarted)  # the gate write was lost: the next pass sends it again
    assert closed(decide_now(w, engine_readings=(reading(3),), progress=live), NEW)

    _serving(w, NEW, restarts=1, policy_current=False, ready=False)  # the gate is False now
    counted = decide_now(w, engine_readings=(reading(3),), progress=live)
    assert closed(counted, NEW) == []
    assert (member(counted).restarts, member(counted).required_generation) == (1, 8)
    assert not opened(counted), "its command-line weights are not the target"

    journal(w, counted)
    pushed = decide_now(w, engine_readings=(reading(8),), progress=ProgressReading(9))
    assert opened(pushed), "the push of the target it rejoined at lets it in"


def test_only_a_reading_of_the_restarted_container_opens_its_gate() -> None:
    """The gate closed for an in-place restart stays shut on the old container's reading (the
    health loop keeps it while the new container reports nothing): only a reading taken after
    the container started, of the target generation, opens it."""
    w = gated_world(mode=GATED)
    previous_roster(w, EngineMember(pod=NEW, state=EngineState.SERVING, generation=8,
                                    required_generation=8))  # fmt: skip
    before_crash = EngineReading(NEW, T0 - dt.timedelta(seconds=10), running=0, generation=8)
    live = ProgressReading(policy_generation=8)
    _serving(w, NEW, restarts=1, ready=False, container_running=False, started_at=None)
    crashed = decide_now(w, engine_readings=(before_crash,), progress=live)
    assert closed(crashed, NEW) == ["ContainerRestarted"] and not opened(crashed)

    journal(w, crashed)
    w.advance(2)
    _serving(w, NEW, restarts=1, policy_current=False)  # the gate write landed; still down
    assert not opened(decide_now(w, engine_readings=(before_crash,), progress=live))

    w.advance(20)
    _serving(w, NEW, restarts=1, policy_current=False, container_running=True, started_at=w.now)
    stale = decide_now(w, engine_readings=(before_crash,), progress=live)
    assert not opened(stale), "a reading of the process before the restart opens nothing"
    assert member(stale).state == EngineState.JOINING

    w.advance(5)
    fresh = EngineReading(NEW, w.now, running=0, generation=8)
    assert opened(decide_now(w, engine_readings=(fresh,), progress=live))


def test_a_restart_of_a_pod_whose_gate_is_false_closes_nothing() -> None:
    w = gated_world(mode=GATED)
    previous_roster(w, EngineMember(pod=NEW, state=EngineState.JOINING, required_generation=3))
    joining(w, restart_count=2)

    decision = decide_now(w, progress=ProgressReading(policy_generation=6))

    assert closed(decision, NEW) == []
    assert (member(decision).restarts, member(decision).required_generation) == (2, 6)


def test_an_ungated_restart_only_counts() -> None:
    w = gated_world(mode={})
    previous_roster(w, EngineMember(pod=NEW, state=EngineState.SERVING))
    _serving(w, NEW, restarts=1)

    decision = decide_now(w, progress=ProgressReading(policy_generation=6))

    assert gates(decision) == []
    assert (member(decision).restarts, member(decision).required_generation) == (1, None)


def test_a_drain_closes_the_gate_after_its_journal_and_until_it_is_seen_false() -> None:
    w = gated_world(POD_RULE)
    _serving(w, VICTIM, restarts=0)

    started = decide_now(w, findings=(drift(),))

    steps = list(started.steps)
    close = SetPolicyCurrent(VICTIM, f"uid-{VICTIM}", False, reason="Draining")
    assert close in steps
    assert steps.index(CrashPoint("drain:started")) < steps.index(close)
    journal(w, started)

    assert closed(decide_now(w), VICTIM) == ["Draining"], "resent while still True"

    _serving(w, VICTIM, restarts=0, policy_current=False, ready=False)  # NotReady, draining
    later = decide_now(w, engine_readings=(reading(9, VICTIM),))
    assert VICTIM not in [g.pod for g in gates(later)]
    assert roster(later)[VICTIM] == EngineState.DRAINING


def test_a_draining_engine_is_not_gated_again() -> None:
    w = gated_world(POD_RULE)
    w.pods[VICTIM] = dataclasses.replace(w.pods[VICTIM], ready=False)
    journal(w, decide_now(w, findings=(drift(),)))

    decision = decide_now(w, engine_readings=(reading(9, VICTIM),))

    assert VICTIM not in [g.pod for g in gates(decision)]


@pytest.mark.parametrize(
    ("mode", "current", "requeue"),
    [
        pytest.param(GATED, False, GATE_RECHECK_SECONDS, id="awaiting-gate"),
        pytest.param(GATED, True, None, id="gated-already"),
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


@pytest.mark.parametrize(
    ("mode", "source", "watched", "said"),
    [
        pytest.param(GATED, None, True, True, id="gated-without-a-source"),
        pytest.param(GATED, "prometheus http://prom:9090", True, False, id="gated-with-a-source"),
        pytest.param({}, None, True, False, id="ungated-without-a-source"),
        pytest.param(GATED, None, False, False, id="not-watched:-suspended-or-finished"),
        pytest.param(FROM_ENGINE, None, True, False, id="gated-reading-the-engines-themselves"),
    ],
)
def test_a_gate_that_can_never_open_is_said_in_degraded(
    mode: dict[str, str], source: str | None, watched: bool, said: bool
) -> None:
    """The gate opens only on a generation the engine reports, read from the job's metrics
    source: with none, no engine can ever turn Ready, and Degraded names the gate."""
    w = gated_world(mode=mode)
    joining(w)

    decision = decide_now(w, watched=watched, signals_source=source)

    degraded = next(c for c in decision.plan.status.conditions if c.type == "Degraded")
    assert (degraded.reason == "PolicyGateWithoutSignals") is said
    assert ("rljob.io/policy-current" in degraded.message) is said
    assert not opened(decision)


@pytest.mark.parametrize(
    ("containers_ready", "ready"),
    [(True, 5), (False, 4)],
    ids=["waiting-only-for-weights-counts-as-ready", "containers-not-ready-do-not-count"],
)
def test_ready_counts_a_gated_engine_that_waits_only_for_its_weights(
    containers_ready: bool, ready: int
) -> None:
    w = gated_world()
    joining(w, containers_ready=containers_ready)
    roles = decide_now(w).plan.status.roles
    assert roles is not None and roles.rollout is not None
    assert roles.rollout.ready == ready


def _serving_report(w: World, *generations: int | None) -> list[EngineReading]:
    """The world's serving engines (gate True) reporting `generations`, one each, in order."""
    serving = sorted(n for n, p in w.pods.items() if p.role == "rollout" and p.ready)
    for name in serving:
        w.pods[name] = pod(name, "rollout", policy_current=True)
    return [reading(g, name) for name, g in zip(serving, generations, strict=False)]


@pytest.mark.parametrize(
    ("status_generation", "trainer_generation", "serving", "engine", "marked", "required"),
    [
        pytest.param(57, None, 1, 1, True, 1,
                     id="the-driver's-counter-started-over:-status's-memory-is-not-the-target"),
        pytest.param(None, 9, 3, 3, True, 3,
                     id="the-trainer's-gauge-counts-something-else:-not-the-target"),
        pytest.param(None, None, 4, 3, False, 4, id="behind-the-serving-engines"),
        pytest.param(57, 57, None, 0, True, None,
                     id="no-serving-engine-reports:-any-generation"),
    ],
)  # fmt: skip
def test_from_the_engine_the_target_is_what_serving_engines_report_now(
    status_generation: int | None,
    trainer_generation: int | None,
    serving: int | None,
    engine: int,
    marked: bool,
    required: int | None,
) -> None:
    w = gated_world(mode=FROM_ENGINE)
    w.body["status"]["policyGeneration"] = status_generation
    readings = _serving_report(w, *[serving] * 4)
    joining(w)

    decision = decide_now(
        w,
        engine_readings=(reading(engine), *readings),
        progress=ProgressReading(policy_generation=trainer_generation),
    )

    assert opened(decision) == marked
    assert member(decision).required_generation == required


@pytest.mark.parametrize(
    ("mode", "serving", "engine", "marked", "required"),
    [
        pytest.param(FROM_ENGINE, (1, 1, 1, 1), 1, True, 1,
                     id="every-serving-engine-restarted-its-count:-rebased-to-it"),
        pytest.param(FROM_ENGINE, (2, 1, 2, 1), 2, True, 2,
                     id="rebased-to-the-newest-the-serving-engines-report"),
        pytest.param(FROM_ENGINE, (1, 57, 1, 1), 1, False, 57,
                     id="one-still-serves-the-old-count:-kept"),
        pytest.param(FROM_ENGINE, (None, None, None, None), 1, False, 57,
                     id="no-serving-engine-reports:-kept"),
        pytest.param(FROM_ENGINE, (60, 60, 60, 60), 57, True, 57,
                     id="the-count-moved-on:-its-own-target-still-passes"),
        pytest.param(GATED, (1, 1, 1, 1), 1, False, 57,
                     id="from-metrics-status's-generation-keeps-it"),
    ],
)  # fmt: skip
def test_a_joining_member_is_rebased_when_the_driver_s_counter_starts_over(
    mode: dict[str, str],
    serving: tuple[int | None, ...],
    engine: int,
    marked: bool,
    required: int,
) -> None:
    """slime counts weight versions from 0 in each process: after a trainer restart its engines
    report 1 again, and a newcomer that joined at 57 would wait until the count climbed back."""
    w = gated_world(mode=mode)
    w.body["status"]["policyGeneration"] = 57
    readings = _serving_report(w, *serving)
    joining(w)
    previous_roster(w, EngineMember(pod=NEW, state=EngineState.JOINING,
                                    required_generation=57))  # fmt: skip

    decision = decide_now(w, engine_readings=(reading(engine), *readings))

    assert opened(decision) == marked
    assert member(decision).required_generation == required
