"""status.roles.<role>.restarts counts the restarts the ledger (status.restarts) counts for the
role, the policy's and the user-requested ones, so the roles' restarts add up to the total
`kubectl describe` shows next to them."""

from __future__ import annotations

import datetime as dt

import pytest

from rljob.api import (
    FailureAction,
    FailureReason,
    RestartRecord,
    RestartsStatus,
    RLJobStatus,
    RoleName,
)
from rljob.reconcile.policy import Decision
from rljob.reconcile.policy.ledger import History, record_requested_restart, record_restart
from rljob.reconcile.requests import RestartOrder, journal_manual_restart
from tests.unit.reconcile.world import T0, World, example_body, example_job

R = RoleName
A = FailureAction
Restart = tuple[RoleName, FailureAction, bool]  # (role, action, counted towards maxRestarts)


def decision(role: RoleName, action: FailureAction, counts: bool) -> Decision:
    target = f"{role}-0" if action == A.RESTART_POD else None
    return Decision(action, FailureReason.OOM_KILLED, role, target, counts, 0.0, "evidence")


def ledger_after(restarts: list[Restart]) -> RestartsStatus:
    """The ledger as the failure policy records `restarts`, one a minute."""
    policy = example_job().spec.failure_policy
    ledger = RestartsStatus()
    for minute, (role, action, counts) in enumerate(restarts):
        at = T0 + dt.timedelta(minutes=minute)
        ledger = record_restart(ledger, decision(role, action, counts), at, policy)
    return ledger


def role_restarts(ledger: RestartsStatus) -> dict[str, int]:
    """Each role's restarts in the status a pass writes over a running job with `ledger`."""
    world = World(example_body())
    world.step()
    world.ready()
    world.step()
    world.body["status"]["restarts"] = ledger.model_dump(mode="json", by_alias=True)
    roles = world.step().status.roles
    assert roles is not None
    return {role.value: getattr(roles, role.value).restarts for role in RoleName}


NONE = {"rollout": 0, "trainer": 0, "reference": 0, "verifier": 0}

RECORDED = [
    pytest.param([], NONE, id="no-restarts"),
    pytest.param(
        [(R.TRAINER, A.RESTART_TRAINER_GANG, True)] * 2,
        {**NONE, "trainer": 2},
        id="two-trainer-gang-restarts",
    ),
    pytest.param(
        [(R.ROLLOUT, A.RESTART_POD, True), (R.TRAINER, A.RESTART_TRAINER_GANG, True)],
        {**NONE, "rollout": 1, "trainer": 1},
        id="a-rollout-pod-then-a-trainer-gang",
    ),
    pytest.param(
        [(R.ROLLOUT, A.RESTART_ROLE_IN_TURN, False), (R.ROLLOUT, A.RESTART_POD, True)],
        {**NONE, "rollout": 2},
        id="rollout-in-turn-and-pod-restarts",
    ),
    pytest.param(
        [(R.VERIFIER, A.RESTART_ROLE, False), (R.REFERENCE, A.RESTART_POD, True)],
        {**NONE, "verifier": 1, "reference": 1},
        id="uncounted-role-restart-counts-for-its-role",
    ),
]


@pytest.mark.parametrize(("restarts", "expected"), RECORDED)
def test_each_role_counts_the_ledgers_restarts_of_it(
    restarts: list[Restart], expected: dict[str, int]
) -> None:
    ledger = ledger_after(restarts)

    counts = role_restarts(ledger)

    assert counts == expected
    assert sum(counts.values()) == ledger.total == len(restarts)
    assert ledger.by_role == {role: n for role, n in expected.items() if n}


def record(role: RoleName) -> RestartRecord:
    return RestartRecord(
        time=T0, role=role, reason=FailureReason.NCCL_TIMEOUT, action=A.RESTART_TRAINER_GANG
    )


OLDER_LEDGERS = [
    pytest.param(
        RestartsStatus(total=3, counted=3, recent=[record(R.TRAINER)] * 2 + [record(R.ROLLOUT)]),
        {**NONE, "trainer": 2, "rollout": 1},
        id="without-byRole-counted-from-recent",
    ),
    pytest.param(
        RestartsStatus(total=2, by_role={"trainer": 2}, recent=[record(R.ROLLOUT)]),
        {**NONE, "trainer": 2},
        id="byRole-wins-over-recent",
    ),
]


@pytest.mark.parametrize(("ledger", "expected"), OLDER_LEDGERS)
def test_a_ledger_written_before_by_role_is_counted_from_its_records(
    ledger: RestartsStatus, expected: dict[str, int]
) -> None:
    assert role_restarts(ledger) == expected


def test_the_next_restart_of_an_older_ledger_carries_its_counts_on() -> None:
    older = RestartsStatus(total=2, counted=2, recent=[record(R.TRAINER), record(R.ROLLOUT)])
    policy = example_job().spec.failure_policy

    ledger = record_restart(older, decision(R.TRAINER, A.RESTART_TRAINER_GANG, True), T0, policy)

    assert ledger.by_role == {"trainer": 2, "rollout": 1}
    assert sum(ledger.by_role.values()) == ledger.total == 3


@pytest.mark.parametrize("role", [R.VERIFIER, R.REFERENCE], ids=str)
def test_a_user_requested_restart_is_in_the_ledger_but_not_the_budget(role: RoleName) -> None:
    """kubectl rljob restart is a restart like the policy's in the total, the role's count and
    the recent records, with its reason; it uses none of the restart budget."""
    ledger = ledger_after([(R.TRAINER, A.RESTART_TRAINER_GANG, True)])
    job = example_job()
    job = job.model_copy(update={"status": RLJobStatus(attempt=1, restarts=ledger)})

    status = journal_manual_restart(
        job, RestartOrder(role, "n1"), World(example_body()).observed, T0
    )

    after = status.restarts or RestartsStatus()
    assert (after.total, after.counted, after.counted_at) == (2, 1, ledger.counted_at)
    assert after.by_reason == {"OOMKilled": 1, "RestartRequested": 1}
    assert role_restarts(after) == {**NONE, "trainer": 1, role.value: 1}
    assert (after.recent[-1].reason, after.recent[-1].action, after.recent[-1].counted) == (
        FailureReason.RESTART_REQUESTED,
        A.RESTART_ROLE,
        False,
    )
    assert after.recent[-1].message == "requested (n1)"


def test_the_policys_history_leaves_user_requested_restarts_out() -> None:
    """A user's restarts neither escalate nor delay the policy's own (its role restarts, its
    cooldown per role)."""
    ledger = record_requested_restart(None, R.VERIFIER, A.RESTART_ROLE, "n1", T0)

    history = History.of(ledger, T0 + dt.timedelta(minutes=1), 3600)

    assert ledger.total == 1
    assert (history.role_restarts(R.VERIFIER), history.last_restart("verifier", {})) == (0, None)
