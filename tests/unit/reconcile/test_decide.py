"""decide(): one pass's whole decision. Each test here is a defect the action engine had when the
decision was spread over the runtime: actions interacting wrongly, each tested alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rljob.api import ActionKind, FailureReason, JobPhase
from rljob.api.status import JOURNAL_FORMAT
from rljob.health.evaluation import finding
from rljob.reconcile.attempt_start import AttemptGathered
from rljob.reconcile.decide import Decision, decide
from rljob.reconcile.inputs import PassInputs
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.nodes import NodeState
from rljob.reconcile.steps import DeleteObject, PostEvent, RollDeployment
from tests.unit.reconcile.world import T0, World, example_body, pod

NCCL = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)"


def running_world(**spec: Any) -> World:
    body = example_body()
    body["spec"].update(spec)
    w = World(body)
    w.settle()
    w.ready()
    w.settle()
    return w


def decide_now(w: World, **inputs: Any) -> Decision:
    return decide(w.job, w.observed, PassInputs(now=w.now, **inputs))


def journal(w: World, decision: Decision) -> None:
    """The guarded status write succeeded: the decided status is the job's status."""
    w.body["status"] = decision.plan.status.model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def fail_trainer(w: World, attempt: int = 1) -> None:
    w.fail_rank(attempt, 0, exit_code=1, reason="Error", message=NCCL)
    w.finish_job(attempt, failed=True)


def request_restart(w: World, value: str) -> None:
    w.body["metadata"].setdefault("annotations", {})["rljob.io/restart-request"] = value


def test_a_manual_trainer_restart_waits_for_a_journaled_gang_restart() -> None:
    w = running_world()
    fail_trainer(w)
    first = decide_now(w)
    journal(w, first)
    assert w.job.status.attempt == 2
    request_restart(w, "trainer/n1")

    second = decide_now(w)

    assert second.plan.status.attempt == 2, "the manual request must not skip attempt 2"
    assert second.plan.status.last_restart_request is None, "it waits, not handled yet"


def test_a_manual_trainer_restart_is_journaled_then_carried_out() -> None:
    w = running_world()
    request_restart(w, "trainer/n1")

    decision = decide_now(w)

    action = decision.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_TRAINER_GANG
    assert action.id == "manual-n1"
    assert decision.plan.status.attempt == 2
    assert decision.plan.status.restarts is not None
    assert decision.plan.status.restarts.counted == 0, "a user's restart is not budgeted"


def test_a_manual_serving_restart_is_journaled_before_the_roll() -> None:
    w = running_world()
    request_restart(w, "rollout/n2")

    decision = decide_now(w)

    action = decision.plan.status.in_flight
    assert action is not None and action.kind == ActionKind.RESTART_ROLE
    assert decision.plan.status.last_restart_request is not None
    rolls = [s for s in decision.steps if isinstance(s, RollDeployment)]
    assert rolls and rolls[0].nonce == action.id


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("trainer-stalled-budget-spent", id="trainer-stalled-budget-spent"),
        pytest.param("serving-exit-code-rule", id="serving-exit-code-93-rule"),
    ],
)
def test_a_decided_fail_job_ends_the_job_and_stops_the_trainer(source: str) -> None:
    w = running_world(failurePolicy={"maxRestarts": 0})
    inputs: dict[str, Any] = {}
    if source == "trainer-stalled-budget-spent":
        stalled = finding("trainer_stall", "trainer", FailureReason.TRAINER_STALLED, "stale", {})
        inputs["findings"] = (stalled,)
    else:
        w.body["spec"]["failurePolicy"]["rules"] = [{"onExitCodes": [93], "action": "FailJob"}]
        crashed = pod("grpo-demo-rollout-x", "rollout", exit_code=93, restart_count=2)
        w.pods[crashed.name] = crashed
        evaluation = finding("restarts", crashed.name, FailureReason.CRASH_LOOP, "exit 93", {})
        inputs["crashes"] = ((crashed, evaluation),)

    decision = decide_now(w, **inputs)

    assert decision.plan.status.phase == JobPhase.FAILED
    assert any(e.reason == "FailJob" for e in decision.events)
    trainer = trainer_job_name(w.name, 1)
    deleted = [s.name for s in decision.steps if isinstance(s, DeleteObject)]
    assert trainer in deleted, "the hung trainer must give its GPUs back"


def test_a_trainer_failure_while_a_pod_restart_is_in_flight_waits_for_it() -> None:
    w = running_world()
    rollout = pod("grpo-demo-rollout-abc", "rollout")
    w.pods[rollout.name] = rollout
    drift = finding("kv_drift", rollout.name, FailureReason.KV_CACHE_DRIFT, "down 35%", {})
    journal(w, decide_now(w, findings=(drift,)))
    assert w.job.status.in_flight is not None
    fail_trainer(w)

    decision = decide_now(w)

    assert decision.plan.status.phase != JobPhase.FAILED
    w.pods.pop(rollout.name)  # the restarted pod is gone: the journal settles
    journal(w, decide_now(w))
    w.advance(600)  # past the backoff the pod restart's counted restart set
    after = decide_now(w)
    assert after.plan.status.in_flight is not None
    assert after.plan.status.in_flight.kind == ActionKind.RESTART_TRAINER_GANG


def test_stall_findings_on_several_engines_respect_max_unavailable() -> None:
    w = running_world()
    engines = [pod(f"grpo-demo-rollout-{i}", "rollout") for i in range(3)]
    for engine in engines:
        w.pods[engine.name] = engine
    w.pods[engines[0].name] = dataclasses.replace(engines[0], ready=False, deleting=True)
    stall = finding("engine_stall", engines[1].name, FailureReason.ENGINE_STALLED, "flat", {})

    decision = decide_now(w, findings=(stall,))

    assert decision.plan.status.in_flight is None, "one engine is already unavailable"
    assert decision.reports and "maxUnavailable" in decision.reports[0][1].message
    assert decision.consumed == "finding"


@pytest.mark.parametrize(
    ("node_state", "force_deleted"),
    [
        pytest.param(NodeState("Gone"), True, id="node-gone"),
        pytest.param(NodeState("Unknown", T0, out_of_service=True), True,
                     id="node-unreachable-and-out-of-service"),
        pytest.param(NodeState("NotReady", T0, out_of_service=True), True,
                     id="node-not-ready-and-out-of-service"),
        pytest.param(NodeState("Unknown", T0), False, id="node-unreachable-may-still-run-it"),
        pytest.param(NodeState("NotReady", T0), False, id="node-not-ready-kubelet-alive"),
        pytest.param(NodeState("Ready"), False, id="node-ready-rank-still-saving"),
        pytest.param(NodeState("Ready", out_of_service=True), False,
                     id="out-of-service-but-ready-again"),
        pytest.param(NodeState("Unread"), False, id="node-unreadable"),
    ],
)  # fmt: skip
def test_old_ranks_stuck_terminating_are_force_deleted_only_where_nothing_runs_them(
    node_state: NodeState, force_deleted: bool
) -> None:
    """Ready Unknown alone is not enough: a partitioned kubelet may still run the rank."""
    w = running_world(failurePolicy={"teardownTimeout": "30s"})
    fail_trainer(w)
    journal(w, decide_now(w))
    stuck = f"{trainer_job_name(w.name, 1)}-1"
    w.pods[stuck] = dataclasses.replace(w.pods[stuck], deleting=True)
    w.advance(31)

    decision = decide_now(w, node_states={"gpu-1": node_state})

    forced = [s for s in decision.steps if isinstance(s, DeleteObject) and s.name == stuck]
    assert bool(forced) == force_deleted
    if forced:
        assert forced[0].grace_period_seconds == 0
    said = {s.event.reason for s in decision.steps if isinstance(s, PostEvent)}
    assert ("PodForceDeleted" in said) == force_deleted
    assert ("TrainerTeardownStuck" in said) == (not force_deleted)


@pytest.mark.parametrize(
    ("in_flight", "restarts_total"),
    [
        pytest.param(
            {"id": "gang-a2", "kind": "RestartTrainerGang", "reason": "NCCLTimeout",
             "step": "Journaled", "startedAt": "2026-03-01T12:00:00Z",
             "target": {"role": "trainer", "name": "grpo-demo-trainer-a1", "uid": "old"}},
            1, id="gang-restart",
        ),
        pytest.param(
            {"id": "role-rollout-1", "kind": "RestartRole", "reason": "OOMKilled",
             "step": "Journaled", "startedAt": "2026-03-01T12:00:00Z",
             "target": {"role": "rollout", "name": "grpo-demo-rollout"}},
            1, id="role-roll",
        ),
    ],
)  # fmt: skip
def test_a_journal_written_by_the_previous_release_is_resumed(
    in_flight: dict[str, Any], restarts_total: int
) -> None:
    # The exact shape the operator wrote before decide() existed: an upgrade mid-action must
    # finish the action, not repeat or drop it.
    w = running_world()
    if in_flight["kind"] == "RestartTrainerGang":
        fail_trainer(w)
        w.body["status"]["attempt"] = 2
    w.body["status"]["inFlight"] = in_flight
    w.body["status"]["restarts"] = {"total": restarts_total, "counted": restarts_total}

    decision = decide_now(w)

    status = decision.plan.status
    assert status.in_flight is not None and status.in_flight.id == in_flight["id"]
    assert status.restarts is not None and status.restarts.total == restarts_total
    if in_flight["kind"] == "RestartTrainerGang":
        old = trainer_job_name(w.name, 1)
        assert old in [s.name for s in decision.steps if isinstance(s, DeleteObject)]
        assert status.attempt == 2
    else:
        rolls = [s for s in decision.steps if isinstance(s, RollDeployment)]
        assert [r.nonce for r in rolls] == ["role-rollout-1"]


def test_a_journal_of_a_newer_format_is_left_alone_and_said() -> None:
    """An operator downgraded mid-action neither settles nor replaces what it cannot read."""
    w = running_world()
    started = w.now.isoformat().replace("+00:00", "Z")
    newer = {"id": "roll-x", "kind": "RestartRole", "startedAt": started, "format": 2,
             "target": {"role": "rollout", "name": f"{w.name}-rollout"}}  # fmt: skip
    w.body["status"]["inFlight"] = newer
    request_restart(w, "trainer/n1")

    decision = decide_now(w)

    status = decision.plan.status
    assert status.in_flight is not None and status.in_flight.format == 2
    assert status.last_restart_request is None and status.attempt == 1
    assert [event.reason for _, event in decision.reports] == ["JournalFormatUnknown"]


def test_new_journal_entries_carry_the_current_format() -> None:
    w = running_world()
    fail_trainer(w)
    action = decide_now(w).plan.status.in_flight
    assert action is not None
    assert action.model_dump(by_alias=True)["format"] == JOURNAL_FORMAT


EXIT_93_RULE = {"rules": [{"onExitCodes": [93], "action": "FailJob"}]}


@pytest.mark.parametrize(
    ("rank_seen_after", "phase", "attempt"),
    [
        pytest.param(5, JobPhase.FAILED, 1, id="rank-seen-within-the-wait-fails-the-job"),
        pytest.param(None, JobPhase.PENDING, 2, id="rank-never-seen-gang-restart-after-the-wait"),
    ],
)
def test_a_failed_job_waits_for_its_failed_rank_before_the_policy_decides(
    rank_seen_after: float | None, phase: JobPhase, attempt: int
) -> None:
    """The Job watch can deliver the failure before the pod watch delivers the rank whose exit
    code (93: FailJob) decides: no restart on the Job's word alone while the rank may come."""
    w = running_world(failurePolicy=EXIT_93_RULE)
    w.finish_job(1, failed=True, failed_at=w.now)

    held = decide_now(w)
    assert (held.plan.status.attempt, held.plan.status.in_flight) == (1, None)
    assert held.plan.requeue_after is not None and held.plan.requeue_after <= 1

    if rank_seen_after is not None:
        w.advance(rank_seen_after)
        w.fail_rank(1, 0, exit_code=93, reason="Error", message="bad reward config")
    else:
        w.advance(11)
    decided = decide_now(w)
    status = decided.plan.status
    assert (status.phase, status.attempt) == (phase, attempt)


def test_a_trainer_job_deleted_by_hand_starts_the_next_attempt() -> None:
    w = running_world()
    journal(w, decide_now(w))  # the pass that saw the Job recorded its uid
    (record,) = w.job.status.attempts
    assert record.job_uid == w.children[("Job", trainer_job_name(w.name, 1))].uid
    del w.children[("Job", trainer_job_name(w.name, 1))]
    w.pods = {name: p for name, p in w.pods.items() if p.role != "trainer"}

    decision = decide_now(w)

    status = decision.plan.status
    assert status.attempt == 2
    assert [(r.attempt, r.end_reason) for r in status.attempts] == [(1, "JobDeleted")]
    assert [e.reason for e in decision.events] == ["TrainerJobDeleted"]
    assert status.restarts is not None and status.restarts.total == 0, "the user's, not counted"


def test_an_attempt_held_back_by_the_store_is_not_recorded_as_started() -> None:
    """Until its Job is created an attempt has not started: a suspend meanwhile must not end
    it, or the resume would skip it and lose its marker's lineage."""
    w = running_world()
    fail_trainer(w)
    journal(w, decide_now(w))
    w.settle()
    store_down = AttemptGathered(2, error="connection refused")

    decision = decide_now(w, attempt=store_down)

    assert decision.plan.status.attempt == 2
    assert [r.attempt for r in decision.plan.status.attempts] == [1]
    assert not any(e.reason == "Created" for e in decision.events)


def test_a_manual_trainer_restart_before_the_attempt_started_is_that_attempt() -> None:
    """Attempt 2 (after the trainer Job was deleted by hand) waits for the store; a restart
    request meanwhile is handled by attempt 2 itself (it resumes from the newest checkpoint
    when it starts): no attempt is skipped."""
    w = running_world()
    journal(w, decide_now(w))
    del w.children[("Job", trainer_job_name(w.name, 1))]
    w.pods = {name: p for name, p in w.pods.items() if p.role != "trainer"}
    journal(w, decide_now(w, attempt=AttemptGathered(2, error="connection refused")))
    request_restart(w, "trainer/n1")

    decision = decide_now(w, attempt=AttemptGathered(2, error="connection refused"))

    status = decision.plan.status
    assert status.attempt == 2
    assert status.last_restart_request is not None and status.last_restart_request.id == "n1"
    assert [event.reason for _, event in decision.reports] == ["RestartRequested"]


@pytest.mark.parametrize(
    ("source", "error", "status", "reason", "says"),
    [
        pytest.param(None, None, "False", "NoMetricsSource", "detection is off", id="no-source"),
        pytest.param(
            "Prometheus at http://p (the operator default)",
            None,
            "True",
            "SourceAnswers",
            "signals from Prometheus at http://p (the operator default)",
            id="default-answers",
        ),
        pytest.param(
            "direct scraping (spec.health.source)",
            "connection refused",
            "False",
            "SourceUnavailable",
            "direct scraping (spec.health.source): connection refused",
            id="own-source-fails",
        ),
    ],
)
def test_the_signals_condition_names_the_source_and_why_detection_is_off(
    source: str | None, error: str | None, status: str, reason: str, says: str
) -> None:
    w = running_world()
    decision = decide_now(w, watched=True, signals_source=source, signals_error=error)
    (condition,) = [
        c for c in decision.plan.status.conditions if c.type == "HealthSignalsAvailable"
    ]
    assert (condition.status, condition.reason) == (status, reason)
    assert says in condition.message


@pytest.mark.parametrize(
    ("detectors", "says"),
    [
        pytest.param(None, "signals from direct scraping", id="no-round-yet"),
        pytest.param((), "signals from direct scraping; no detector has data yet", id="none"),
        pytest.param(
            ("reward_hacking", "trainer_stall"),
            "; detectors with data: reward_hacking, trainer_stall",
            id="some",
        ),
    ],
)
def test_the_signals_condition_names_the_detectors_with_data(
    detectors: tuple[str, ...] | None, says: str
) -> None:
    decision = decide_now(
        running_world(), watched=True, signals_source="direct scraping", signals_detectors=detectors
    )
    (condition,) = [
        c for c in decision.plan.status.conditions if c.type == "HealthSignalsAvailable"
    ]
    assert condition.message.endswith(says)


TORCHRUN_EXIT_93 = """train.py FAILED
Failures:
  <NO_OTHER_FAILURES>
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_06:31:51
  host      : grpo-demo-trainer-a1-0
  rank      : 2 (local_rank: 0)
  exitcode  : 93 (pid: 22241)
  traceback : <N/A>
exit code 1"""


def test_a_worker_exit_93_under_torchrun_fails_the_job() -> None:
    """torchrun exits 1 whatever its worker did: the policy's exit code is the worker's 93, which
    the wrapper's summary names (the default policy's no-requeue rule)."""
    w = running_world()
    w.body["spec"]["failurePolicy"] = {"rules": [{"onExitCodes": [93], "action": "FailJob"}]}
    w.fail_rank(1, 0, exit_code=1, reason="Error", message=TORCHRUN_EXIT_93)
    w.finish_job(1, failed=True)

    decision = decide_now(w)

    assert decision.plan.status.phase == JobPhase.FAILED
    (failed,) = [e for e in decision.events if e.reason == "FailJob"]
    assert "rank 2" in failed.message and "exited 93" in failed.message


def colocated_world(*rules: dict[str, Any]) -> World:
    """The demo with its engines inside a Ray-launched trainer gang: no rollout role."""
    body = example_body()
    del body["spec"]["roles"]["rollout"]
    body["spec"]["roles"]["trainer"].update(
        launcher="ray", command=["python3", "-m", "verl.trainer.main_ppo"], engines={}
    )
    body["spec"]["failurePolicy"]["rules"] = list(rules)
    w = World(body)
    w.settle()
    w.ready()
    w.settle()
    return w


GANG_DRIFT_RULE = {
    "roles": ["trainer"],
    "onReasons": ["KVCacheDrift"],
    "action": "RestartTrainerGang",
}


@pytest.mark.parametrize(
    ("rules", "gang_restart"),
    [
        pytest.param((), False, id="reported-by-default"),
        pytest.param((GANG_DRIFT_RULE,), True, id="gang-restart-by-rule"),
    ],
)
def test_a_drifting_engine_inside_the_gang_is_reported_or_restarts_the_gang_by_rule(
    rules: tuple[dict[str, Any], ...], gang_restart: bool
) -> None:
    w = colocated_world(*rules)
    assert not [c for c in w.children.values() if c.role == "rollout"], "no rollout children"
    rank = f"{trainer_job_name(w.name, 1)}-1"
    drift = finding("kv_drift", rank, FailureReason.KV_CACHE_DRIFT, "down 35% at its load", {})

    decision = decide_now(w, findings=(drift,))

    action = decision.plan.status.in_flight
    if gang_restart:
        assert action is not None and action.kind == ActionKind.RESTART_TRAINER_GANG
        assert decision.plan.status.attempt == 2
    else:
        assert action is None and decision.plan.status.attempt == 1
        (report,) = decision.reports
        assert report[1].reason == "KVCacheDrift" and rank in report[0]
        assert report[1].message.endswith("a rule on role trainer may restart it)")


def test_a_resume_refused_for_another_node_count_fails_the_job_saying_why() -> None:
    """The entrypoint refuses a version saved by 2 nodes on 3 (exit 3, WorldSizeMismatch): a
    gang restart would be refused the same way (before, it restarted until noProgressRestarts),
    so the job fails at once with the entrypoint's reason and remedy."""
    w = running_world()
    refusal = (
        "WorldSizeMismatch: v000000000020-a000001 was saved by 2 trainer node(s) in the verl "
        "layout, whose shards are tied to the world size; this attempt has 3: resume with 2 "
        "node(s) or start from scratch"
    )
    w.fail_rank(1, 0, exit_code=3, reason="Error", message=refusal)
    w.finish_job(1, failed=True)

    decision = decide_now(w)

    status = decision.plan.status
    assert (status.phase, status.attempt, status.in_flight) == (JobPhase.FAILED, 1, None)
    (failed,) = [c for c in status.conditions if c.type == "Failed"]
    assert "WorldSizeMismatch" in failed.message and "resume with 2 node(s)" in failed.message


@pytest.mark.parametrize(
    ("written", "restarted"),
    [
        pytest.param("trainer/n1", False, id="an-older-nonce-set-back"),
        pytest.param("trainer/n2", False, id="the-last-nonce"),
        pytest.param("trainer/n3", True, id="a-new-nonce"),
    ],
)
def test_a_restart_request_is_carried_out_once_per_nonce(written: str, restarted: bool) -> None:
    """A GitOps tool re-applying an older manifest sets the annotation back to a handled nonce:
    that is not a new request."""
    w = running_world(checkpoint=None)
    for nonce in ("trainer/n1", "trainer/n2"):
        request_restart(w, nonce)
        journal(w, decide_now(w))
        w.body["status"].pop("inFlight", None)  # its gang restart done
    request_restart(w, written)

    decision = decide_now(w)

    handled = decision.plan.status.last_restart_request
    assert handled is not None
    assert (handled.id, handled.earlier) == (("n3", ["n1", "n2"]) if restarted else ("n2", ["n1"]))
