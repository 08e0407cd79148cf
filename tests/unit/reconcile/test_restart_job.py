"""RestartJob through decide(): a finding on any role, or a failed trainer attempt, restarts the
whole job as one journaled action: attempt + 1 (the old Job deleted, the next one created from
the newest checkpoint), every serving Deployment rolled with the action id, one restart counted,
one JobRestarted Event; it settles once the new Job exists and every roll landed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rljob.api import ActionKind, FailureAction, FailureReason, RoleName
from rljob.api.spec import FailurePolicy
from rljob.health.evaluation import KV_DRIFT, VERIFIER_LATENCY, finding
from rljob.reconcile.decide import Decision
from rljob.reconcile.journal import roles_to_roll, settle_journal
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.policy import Failure, choose_action, record_restart
from rljob.reconcile.steps import CrashPoint, DeleteObject, PostEvent, RollDeployment
from tests.unit.reconcile.test_decide import decide_now, fail_trainer, journal
from tests.unit.reconcile.test_decide import running_world as running_decided_world
from tests.unit.reconcile.world import T0, World, pod

EVERYTHING = {"action": "RestartJob"}  # every reason on every role: restart-everything
SERVING = ("rollout", "reference", "verifier")


def running_world(*rules: dict[str, Any]) -> World:
    """The demo job running, with a pod of each serving role (the targets of findings)."""
    w = running_decided_world(checkpoint=None, failurePolicy={"rules": list(rules)})
    for role in SERVING:
        w.pods[f"{role}-0"] = pod(f"{role}-0", role)
    return w


def drift(target: str = "rollout-0") -> Any:
    return finding(KV_DRIFT, target, FailureReason.KV_CACHE_DRIFT, "tok/s -30%", {})


def rolled(w: World, action_id: str, *roles: str) -> None:
    """The Deployments of `roles` show the roll's annotation (the patch landed)."""
    for key, child in w.children.items():
        if child.kind == "Deployment" and child.role in roles:
            w.children[key] = dataclasses.replace(child, restarted_at=action_id)


def carry_out(w: World, decision: Decision) -> None:
    """The journal write landed and the pass's deletes and applies ran."""
    journal(w, decision)
    for doomed in decision.plan.delete:
        key = (doomed.kind, doomed.name)
        w.children[key] = dataclasses.replace(w.children[key], deleting=True)
    for child in decision.plan.apply:
        w._apply(child.kind, child.name, child.role, child.spec_hash, child.body)


@pytest.mark.parametrize(
    ("finding_of", "target"),
    [
        pytest.param(drift, "rollout-0", id="an-engine-drift"),
        pytest.param(
            lambda target: finding(
                VERIFIER_LATENCY, target, FailureReason.VERIFIER_SLOW, "p99 3 s", {}
            ),
            "verifier-0",
            id="a-slow-verifier",
        ),
        pytest.param(
            lambda target: finding(
                "trainer_stall", target, FailureReason.TRAINER_STALLED, "no step", {}
            ),
            "trainer",
            id="a-stalled-trainer",
        ),
    ],
)
def test_a_finding_on_any_role_restarts_the_whole_job_as_one_action(
    finding_of: Any, target: str
) -> None:
    w = running_world(EVERYTHING)

    decision = decide_now(w, findings=(finding_of(target),))

    status = decision.plan.status
    assert status.in_flight is not None
    assert (status.in_flight.kind, status.in_flight.id) == (ActionKind.RESTART_JOB, "job-a2")
    assert status.attempt == 2
    assert status.restarts is not None and status.restarts.total == 1
    assert status.restarts.recent[-1].action == FailureAction.RESTART_JOB
    deleted = {s.name for s in decision.steps if isinstance(s, DeleteObject)}
    assert trainer_job_name(w.name, 1) in deleted, "the old attempt's Job goes"
    rolls = {s.name: s.nonce for s in decision.steps if isinstance(s, RollDeployment)}
    assert rolls == {f"{w.name}-{role}": "job-a2" for role in SERVING}
    (said,) = [s for s in decision.steps if isinstance(s, PostEvent)]
    assert (said.event.type, said.event.reason) == ("Warning", "JobRestarted")
    assert said.event.message.startswith("attempt 2: ")
    assert "restart the whole job" in said.event.message
    crashes = [s.name for s in decision.steps if isinstance(s, CrashPoint)]
    assert crashes[:2] == ["job-restart:journaled", "job-restart:old-job-deleted"]
    assert crashes.count("job-restart:rolled") == len(SERVING)


def test_a_failed_trainer_attempt_restarts_the_whole_job() -> None:
    w = running_world(EVERYTHING)
    fail_trainer(w)

    decision = decide_now(w)

    status = decision.plan.status
    assert status.in_flight is not None and status.in_flight.kind == ActionKind.RESTART_JOB
    assert status.attempt == 2
    assert status.attempts[0].end_reason == FailureReason.NCCL_TIMEOUT.value
    assert {s.name for s in decision.steps if isinstance(s, RollDeployment)} == {
        f"{w.name}-{role}" for role in SERVING
    }


def test_the_job_restart_settles_once_the_next_attempt_exists_and_every_roll_landed() -> None:
    w = running_world(EVERYTHING)
    carry_out(w, decide_now(w, findings=(drift(),)))
    w.gone()
    new_job = decide_now(w)
    carry_out(w, new_job)
    status = w.job.status
    assert any(c.kind == "Job" and c.attempt == 2 for c in w.observed.children)

    assert settle_journal(status, w.observed).in_flight is not None, "no roll landed yet"
    rolled(w, "job-a2", "rollout", "reference")
    assert roles_to_roll(status, w.observed) == [(f"{w.name}-verifier", "job-a2")]
    assert settle_journal(status, w.observed).in_flight is not None, "the verifier's is missing"
    rolled(w, "job-a2", "verifier")
    assert roles_to_roll(status, w.observed) == []
    assert settle_journal(status, w.observed).in_flight is None


def test_a_roll_already_landed_is_not_sent_again() -> None:
    w = running_world(EVERYTHING)
    decision = decide_now(w, findings=(drift(),))
    carry_out(w, decision)
    rolled(w, "job-a2", *SERVING)

    again = decide_now(w)

    assert not [s for s in again.steps if isinstance(s, RollDeployment)]
    assert again.plan.status.restarts == decision.plan.status.restarts, "counted once"


@pytest.mark.parametrize(
    ("role", "reason"),
    [
        pytest.param(RoleName.ROLLOUT, FailureReason.KV_CACHE_DRIFT, id="rollout"),
        pytest.param(RoleName.TRAINER, FailureReason.NCCL_TIMEOUT, id="trainer"),
    ],
)
def test_restart_job_neither_escalates_nor_turns_into_a_gang_restart(
    role: RoleName, reason: FailureReason
) -> None:
    policy = FailurePolicy.model_validate({"rules": [EVERYTHING], "maxRestarts": 10})
    failure = Failure(reason, role, target="p" if role != RoleName.TRAINER else None)
    ledger = None
    for _ in range(4):  # past ESCALATE_POD_AFTER and ESCALATE_ROLE_AFTER
        chosen = choose_action(failure, policy, ledger, T0)
        assert chosen.action == FailureAction.RESTART_JOB
        assert chosen.counts
        ledger = record_restart(ledger, chosen, T0, policy)
