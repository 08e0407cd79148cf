"""The rollout roster: members from the observed rollout pods (leaving ones out), their state
from the journal and readiness, their generation carried over until their state or address
changes; written into status.roles.rollout.engines by every pass."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from rljob.api import ActionKind, ActionPod, ActionTarget, EngineMember, EngineState, RoleName
from rljob.api import InFlightAction as Action
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.roster import engine_roster
from tests.unit.reconcile.test_decide import decide_now, running_world
from tests.unit.reconcile.world import T0, example_job, pod

J, S, D = EngineState.JOINING, EngineState.SERVING, EngineState.DRAINING


def engine(name: str, **fields: Any) -> ObservedPod:
    return pod(name, "rollout", ip=f"10.0.0.{ord(name[-1])}", **fields)


def in_turn(*entries: ActionPod) -> Action:
    target = ActionTarget(role=RoleName.ROLLOUT, name="grpo-demo-rollout")
    return Action(id="turn-rollout-1", kind=ActionKind.RESTART_ROLE_IN_TURN, target=target,
                  started_at=T0, pods=list(entries))  # fmt: skip


def reading(name: str, generation: int | None) -> EngineReading:
    return EngineReading(pod=name, at=T0, running=0, generation=generation)


def member(name: str, state: EngineState, generation: int | None = None) -> EngineMember:
    return EngineMember(pod=name, address=f"10.0.0.{ord(name[-1])}", state=state,
                        generation=generation)  # fmt: skip


DRAIN = ActionPod(name="e-b", uid="uid-e-b", drain_started_at=T0)
DELETED = ActionPod(name="e-b", uid="uid-e-b", drain_started_at=T0, deleted_at=T0)


@pytest.mark.parametrize(
    ("pods", "action", "readings", "previous", "expected"),
    [
        pytest.param([engine("e-b"), engine("e-a", ready=False)], None, [], None,
                     [member("e-a", J), member("e-b", S)], id="ready-serves-others-join-by-name"),
        pytest.param([engine("e-a"), engine("e-b")], in_turn(DRAIN), [], None,
                     [member("e-a", S), member("e-b", D)], id="drain-stamped-is-draining"),
        pytest.param([engine("e-a"), engine("e-b")], in_turn(DELETED), [], None,
                     [member("e-a", S)], id="stamped-for-its-delete-has-left"),
        pytest.param([engine("e-a"), engine("e-b", deleting=True), engine("e-c", phase="Failed"),
                      pod("v-a", "verifier")], None, [], None,
                     [member("e-a", S)], id="deleting-terminal-and-other-roles-are-no-members"),
        pytest.param([engine("e-a")], None, [reading("e-a", 7)], None,
                     [member("e-a", S, 7)], id="a-new-member-takes-its-reading"),
        pytest.param([engine("e-a")], None, [reading("e-a", 9)], [member("e-a", S, 7)],
                     [member("e-a", S, 7)], id="same-state-keeps-its-generation"),
        pytest.param([engine("e-a")], None, [reading("e-a", 9)], [member("e-a", J, 7)],
                     [member("e-a", S, 9)], id="a-state-change-reads-it-again"),
        pytest.param([engine("e-a")], None, [reading("e-a", 9)],
                     [EngineMember(pod="e-a", address="10.9.9.9", state=S, generation=7)],
                     [member("e-a", S, 9)], id="an-address-change-reads-it-again"),
        pytest.param([engine("e-a")], None, [], [member("e-a", J, 7)],
                     [member("e-a", S)], id="no-reading-no-generation"),
        pytest.param([], None, [], [member("e-a", S, 7)], [], id="nobody-left"),
    ],
)  # fmt: skip
def test_roster(
    pods: list[ObservedPod],
    action: Action | None,
    readings: list[EngineReading],
    previous: list[EngineMember] | None,
    expected: list[EngineMember],
) -> None:
    job = example_job()
    job = job.model_copy(update={"status": job.status.model_copy(update={"in_flight": action})})
    assert engine_roster(job, Observed(pods=tuple(pods)), tuple(readings), previous) == expected


def test_no_rollout_role_no_roster() -> None:
    job = example_job()
    roles = job.spec.roles.model_copy(update={"rollout": None})
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"roles": roles})})
    assert engine_roster(job, Observed(pods=(engine("e-a"),)), (), None) is None


def test_a_pass_writes_it_into_the_rollout_role_status() -> None:
    w = running_world()
    w.pods["grpo-demo-rollout-x"] = engine("grpo-demo-rollout-x")
    later = EngineReading(pod="grpo-demo-rollout-x", at=T0 + dt.timedelta(seconds=1), generation=3)
    decision = decide_now(w, engine_readings=(later,))
    roles = decision.plan.status.roles
    rollout = roles.rollout if roles is not None else None
    assert rollout is not None
    assert [(m.pod, m.state, m.generation) for m in rollout.engines or []] == [
        ("grpo-demo-rollout-x", S, 3)
    ]


def gated_job(policy_generation: int | None) -> Any:
    job = example_job()
    rollout = job.spec.roles.rollout
    assert rollout is not None
    roles = job.spec.roles.model_copy(
        update={"rollout": rollout.model_copy(update={"weight_sync": "Gated"})}
    )
    status = job.status.model_copy(update={"policy_generation": policy_generation})
    return job.model_copy(
        update={"spec": job.spec.model_copy(update={"roles": roles}), "status": status}
    )


def was(state: EngineState, required: int | None, restarts: int = 0) -> EngineMember:
    return EngineMember(pod="e-a", address="10.0.0.97", state=state,
                        required_generation=required, restarts=restarts)  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "previous", "trainer", "expected"),
    [
        pytest.param({"ready": False}, None, None, was(J, 4), id="joins-at-the-status-target"),
        pytest.param({"ready": False}, None, 2, was(J, 2), id="joins-at-the-trainer's-live-one"),
        pytest.param({}, was(S, 3), 9, was(S, 3), id="keeps-its-target-while-it-stays"),
        pytest.param({"ready": False}, was(J, None), 9, was(J, 9),
                     id="nothing-known-when-it-joined:-this-pass's-target"),
        pytest.param({"policy_current": True}, was(S, None), 9, was(S, None),
                     id="passed-its-gate-with-nothing-required:-nothing-filled-in-later"),
        pytest.param({"ready": False, "restart_count": 1}, was(J, 3), 9, was(J, 9, 1),
                     id="a-restart-behind-a-closed-gate-counts-and-refixes"),
        pytest.param({"policy_current": True, "restart_count": 1}, was(S, 3), 9, was(J, 9, 0),
                     id="a-restart-behind-an-open-gate-joins-its-count-held-until-it-closes"),
    ],
)  # fmt: skip
def test_a_gated_member_s_required_generation(
    fields: dict[str, Any],
    previous: EngineMember | None,
    trainer: int | None,
    expected: EngineMember,
) -> None:
    observed = Observed(pods=(engine("e-a", **fields),))
    previous_list = [previous] if previous is not None else None
    assert engine_roster(gated_job(4), observed, (), previous_list, trainer) == [expected]
