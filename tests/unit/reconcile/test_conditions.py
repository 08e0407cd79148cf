"""Conditions follow Kubernetes conventions: lastTransitionTime moves only when the status
flips, an unchanged condition is the same object, and other owners' conditions are kept."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from rljob.api import Condition, ConditionStatus, JobPhase, RLJobStatus
from rljob.reconcile import status_patch
from rljob.reconcile.conditions import ConditionState, merge_conditions, one_line
from tests.unit.reconcile.world import T0, World, example_body

LATER = T0 + dt.timedelta(hours=1)


def condition(kind: str, status: str, reason: str, message: str, at: dt.datetime) -> Condition:
    return Condition(
        type=kind,
        status=ConditionStatus(status),
        reason=reason,
        message=message,
        last_transition_time=at,
        observed_generation=1,
    )


@pytest.mark.parametrize(
    ("new", "transition", "same_object"),
    [
        pytest.param(("True", "AllRolesReady", "all ready"), T0, True, id="unchanged"),
        pytest.param(("True", "AllRolesReady", "other words"), T0, False, id="message-only"),
        pytest.param(("True", "OtherReason", "all ready"), T0, False, id="reason-only"),
        pytest.param(("False", "RolesNotReady", "all ready"), LATER, False, id="status-flip"),
    ],
)
def test_transition_time_moves_only_on_a_flip(
    new: tuple[str, str, str], transition: dt.datetime, same_object: bool
) -> None:
    old = condition("Ready", "True", "AllRolesReady", "all ready", T0)
    state = ConditionState("Ready", ConditionStatus(new[0]), new[1], new[2])
    (merged,) = merge_conditions([old], [state], LATER, 1)
    assert merged.last_transition_time == transition
    assert (merged is old) == same_object
    assert (merged.status.value, merged.reason, merged.message) == new


def test_new_generation_updates_observed_generation_but_not_the_time() -> None:
    old = condition("Ready", "True", "AllRolesReady", "all ready", T0)
    state = ConditionState("Ready", ConditionStatus.TRUE, "AllRolesReady", "all ready")
    (merged,) = merge_conditions([old], [state], LATER, 2)
    assert (merged.observed_generation, merged.last_transition_time) == (2, T0)


def test_conditions_of_other_owners_are_kept_after_the_managed_ones() -> None:
    checkpoint = condition("CheckpointReady", "True", "Validated", "v1 valid", T0)
    ready = condition("Ready", "False", "RolesNotReady", "0/1", T0)
    state = ConditionState("Ready", ConditionStatus.FALSE, "RolesNotReady", "0/1")
    assert merge_conditions([checkpoint, ready], [state], LATER, 1) == [ready, checkpoint]


def test_managed_condition_without_a_state_is_removed() -> None:
    failed = condition("Failed", "True", "Error", "boom", T0)
    assert merge_conditions([failed], [], LATER, 1) == []


def test_messages_are_one_line_and_bounded() -> None:
    assert one_line("a\n  b\tc ") == "a b c"
    long = one_line("x" * 5000)
    assert len(long) == 1024
    assert long.endswith("...")


def test_reconcile_keeps_transition_times_while_counts_change() -> None:
    world = World(example_body())
    world.step()
    ready_at = world.job.status.conditions[0].last_transition_time
    world.advance(60)
    key = ("Deployment", "grpo-demo-rollout")
    world.children[key] = dataclasses.replace(world.children[key], ready_replicas=2)
    status = world.step().status
    ready = status.conditions[0]
    assert (ready.type, ready.status, ready.message) == (
        "Ready",
        ConditionStatus.FALSE,
        "rollout 2/4, trainer 0/2, reference 0/1, verifier 0/2 ready",
    )
    assert ready.last_transition_time == ready_at
    world.advance(60)
    world.ready()
    status = world.step().status
    assert status.conditions[0].status == ConditionStatus.TRUE
    assert status.conditions[0].last_transition_time == T0 + dt.timedelta(seconds=120)


def test_status_patch_is_none_when_nothing_changed() -> None:
    world = World(example_body())
    world.step()
    status = world.job.status
    assert status_patch(status, RLJobStatus.model_validate(world.body["status"])) is None


def test_status_patch_is_the_full_status_with_nulls_for_removed_fields() -> None:
    old = RLJobStatus.model_validate(
        {
            "phase": "Running",
            "attempt": 1,
            "roles": {"rollout": {"desired": 1, "ready": 1}, "verifier": {"desired": 1}},
            "inFlight": {"id": "a", "kind": "RestartPod", "startedAt": "2026-03-01T12:00:00Z"},
        }
    )
    new = old.model_copy(
        update={
            "phase": JobPhase.SUSPENDED,
            "in_flight": None,
            "roles": old.roles.model_copy(update={"verifier": None}) if old.roles else None,
        }
    )
    patch = status_patch(old, new)
    assert patch is not None
    assert patch["phase"] == "Suspended"
    assert patch["attempt"] == 1
    assert patch["inFlight"] is None
    assert patch["roles"]["verifier"] is None
    # engines: null, as for any empty list an older operator may have stored.
    assert patch["roles"]["rollout"] == {"desired": 1, "ready": 1, "restarts": 0, "engines": None}


def test_status_patch_from_nothing() -> None:
    patch = status_patch(None, RLJobStatus(attempt=1))
    assert patch is not None and patch["attempt"] == 1
