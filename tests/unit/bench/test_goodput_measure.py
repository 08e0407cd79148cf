"""The goodput benchmark's pure parts: the world's specs and failure plans (bench/goodput/world.py),
the arms' manifests (arms.py), and the measurement (measure.py) on hand-made records."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.goodput import arms
from bench.goodput.arms import Arm
from bench.goodput.measure import (
    GANG,
    JOBSET_RESTART,
    POD,
    REPORT,
    ROLE,
    Action,
    ArmRecord,
    Injected,
    Progress,
    RoleFacts,
    Sample,
    analyse,
    attempts_started,
    attribute,
    healthy_step_seconds,
    real_ett,
)
from bench.goodput.trace import FailureClass, FailureEvent, Role
from bench.goodput.world import Effect, World, plan, stops_trainer

from rljob.api.failure_policy import MAX_RESTARTS_LIMIT
from rljob.api.spec import RLJobSpec
from rljob.dev.sim.pods import parse_pod
from rljob.vocabulary.enums import FailureReason

WORLD = World(60)
ROLES = {
    Role.ROLLOUT: RoleFacts(4, 1.0),
    Role.TRAINER: RoleFacts(4, 2.0),
    Role.VERIFIER: RoleFacts(4),
}


def _steady(t0: float, t1: float, step_s: float, first: int = 0, attempt: int = 1) -> list[Sample]:
    """Samples every 0.5 s of a trainer stepping every step_s from t0."""
    samples = []
    t = t0
    while t < t1:
        samples.append(Sample(t, attempt, first + int((t - t0) // step_s)))
        t += 0.5
    return samples


@pytest.mark.parametrize("arm", [Arm.OPERATOR_DEFAULTS, Arm.RESTART_EVERYTHING])
def test_the_operator_arms_are_valid_rljobs(arm: Arm) -> None:
    body = arms.rljob(arm, WORLD, "http://127.0.0.1:9090", "s3://goodput/x")
    spec = RLJobSpec.model_validate(body["spec"])
    assert spec.health.interval == "1.000s"  # 30 s / 60 clamped at the API's floor
    assert bool(spec.failure_policy.rules) is (arm is Arm.RESTART_EVERYTHING)


def test_restart_everything_covers_every_reason_of_every_role() -> None:
    covered: dict[str, set[str]] = {}
    for rule in arms.RESTART_EVERYTHING_RULES:
        for role in rule["roles"]:
            covered.setdefault(role, set()).update(rule["onReasons"])
    every = {r.value for r in FailureReason} - {FailureReason.RESTART_REQUESTED.value}
    assert covered == dict.fromkeys(("trainer", "rollout", "reference", "verifier"), every)
    assert {rule["action"] for rule in arms.RESTART_EVERYTHING_RULES} == {"RestartJob"}


def test_restart_everything_restarts_rather_than_fails_the_job() -> None:
    body = arms.rljob(Arm.RESTART_EVERYTHING, WORLD, "http://127.0.0.1:9090", "s3://goodput/x")
    policy = RLJobSpec.model_validate(body["spec"]).failure_policy
    assert policy.max_restarts == policy.no_progress_restarts == MAX_RESTARTS_LIMIT


def test_the_jobset_pods_are_served_by_the_simulator_as_an_rljobs() -> None:
    body = arms.jobset(WORLD, "s3://goodput/jobset")
    trainer = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod = {
        "metadata": {
            **trainer["metadata"],
            "namespace": Arm.JOBSET.namespace,
            "name": "rl-trainer-0-2-abcde",
            "uid": "u",
            "annotations": {"batch.kubernetes.io/job-completion-index": "2"},
            "labels": {**trainer["metadata"]["labels"], "jobset.sigs.k8s.io/restart-attempt": "3"},
        },
        "spec": trainer["spec"],
        "status": {"phase": "Running", "podIP": "127.1.0.2"},
    }
    info = parse_pod(pod)
    assert info is not None
    assert (info.role, info.job, info.attempt, info.completion_index) == ("trainer", "rl", 3, 2)
    assert info.metrics_port == arms.TRAINER_METRICS_PORT
    assert info.profile["resume_from_store"] is True
    assert info.env["RLJOB_CHECKPOINT_URI"] == "s3://goodput/jobset"


def test_trainer_failures_freeze_the_gang_and_fail_a_rank_with_the_classifiers_message() -> None:
    gpu = plan(FailureEvent(1.0, FailureClass.GPU_HARDWARE, Role.TRAINER, 2), WORLD)
    assert [s.effect for s in gpu] == [Effect.HANG_GANG, Effect.FAIL_RANK]
    assert "uncorrectable ECC error" in gpu[1].message and gpu[1].rank == 2
    hung = plan(FailureEvent(1.0, FailureClass.HUNG_RANK, Role.TRAINER, 3), WORLD)
    watchdog = hung[-1]
    assert (watchdog.rank, watchdog.delay_s) == (0, WORLD.nccl_timeout_s)  # another rank's
    assert "Watchdog caught collective operation timeout" in watchdog.message
    lost = plan(FailureEvent(1.0, FailureClass.NODE_LOST, Role.ROLLOUT, 1), WORLD)
    assert {s.effect for s in lost} == {Effect.STOP_NODE, Effect.UNREACHABLE, Effect.STALL}
    assert stops_trainer(FailureEvent(1.0, FailureClass.NODE_LOST, Role.TRAINER, 0))
    assert not stops_trainer(FailureEvent(1.0, FailureClass.NODE_LOST, Role.ROLLOUT, 0))


def test_the_drift_crosses_the_threshold_at_the_traces_onset() -> None:
    [drift] = plan(FailureEvent(1.0, FailureClass.ENGINE_DRIFT, Role.ROLLOUT, 0), WORLD)
    params = dict(drift.params)
    onset = params["over_seconds"] * 0.2 / params["drop"]
    assert onset == pytest.approx(WORLD.durations.drift_onset_to_threshold_s)


def test_healthy_step_time_is_the_calibrations_slope() -> None:
    samples = _steady(0.0, 100.0, 3.0)
    assert healthy_step_seconds(samples) == pytest.approx(3.0, abs=0.05)


def test_progress_interpolates_steady_steps_but_not_a_stall() -> None:
    samples = [Sample(0.0, 1, 0), Sample(3.0, 1, 1), Sample(6.0, 1, 2), Sample(30.0, 1, 3)]
    progress = Progress(samples, 3.0)
    assert progress.at(4.5) == pytest.approx(1.5)
    assert progress.at(20.0) == 2.0  # stalled between 6 and 30: no spreading
    assert progress.first_above(2, after=0.0) == 30.0


def test_a_gang_failure_costs_its_recomputed_steps_and_outage() -> None:
    step = 2.0
    # Steps to 10 at t=20, failure at t=21, the new attempt resumes from 5 at t=31 and steps on.
    samples = [*_steady(0.0, 21.0, step), *_steady(31.0, 80.0, step, first=5, attempt=2)]
    event = FailureEvent(21.0, FailureClass.GPU_HARDWARE, Role.TRAINER, 0)
    record = ArmRecord("arm", created=0.0, ended=80.0, samples=samples)
    record.injected.append(Injected(event, 21.0, pod="rank-0"))
    record.actions.append(Action(22.0, GANG, "trainer", "GPUHardwareError"))
    result = analyse(record, step, ROLES)
    [failure] = result.failures
    assert failure.detect_s == pytest.approx(1.0)
    assert failure.recomputed == 5  # 10 reached, resumed from 5
    assert failure.recover_s == pytest.approx(31.0 + 6 * step - 21.0, abs=0.6)  # past step 10
    # 59 s of slot, 10 + 5x2 s of outage and recomputation: ~20 s lost.
    assert failure.lost_s == pytest.approx(20.0, abs=step)
    assert not failure.without_gang
    assert result.ett == pytest.approx(result.steps * step / 80.0)


def test_an_engine_repaired_alone_is_counted_so_and_an_unrepaired_drift_is_not_recovered() -> None:
    step = 2.0
    samples = _steady(0.0, 100.0, step)
    event = FailureEvent(10.0, FailureClass.ENGINE_DRIFT, Role.ROLLOUT, 1)
    alone = ArmRecord("alone", created=0.0, ended=100.0, samples=samples)
    alone.injected.append(Injected(event, 10.0, pod="engine-1", instance="e1#0"))
    for other in ("e2#0", "e3#0", "e4#0"):  # the role's other engines, served throughout
        alone.seen(0.0, other, other, "rollout")
        alone.seen(100.0, other, other, "rollout")
    alone.seen(10.0, "e1#0", "engine-1", "rollout")
    alone.seen(40.0, "e1#0", "engine-1", "rollout")
    alone.seen(41.0, "e5#0", "engine-5", "rollout")
    alone.seen(100.0, "e5#0", "engine-5", "rollout")
    alone.actions.append(Action(40.0, POD, "rollout", "KVCacheDrift", "engine-1"))
    [repaired] = analyse(alone, step, ROLES).failures
    assert repaired.without_gang and repaired.detect_s == pytest.approx(30.0)
    # Gone at 40, the role whole again at 41 (the replacement served), loaded 1 s later.
    assert repaired.recover_s == pytest.approx(32.0)
    assert repaired.fixed_s == pytest.approx(1.0)  # the action to the replacement attached

    never = ArmRecord("never", created=0.0, ended=100.0, samples=samples)
    never.injected.append(Injected(event, 10.0, pod="engine-1", instance="e1#0"))
    never.seen(10.0, "e1#0", "engine-1", "rollout")
    never.seen(100.0, "e1#0", "engine-1", "rollout")
    [unrepaired] = analyse(never, step, ROLES).failures
    assert unrepaired.detect_s is None and unrepaired.recover_s is None
    assert not unrepaired.without_gang


def test_a_jobset_restart_repairs_anything_but_never_without_a_gang_restart() -> None:
    step = 2.0
    samples = [*_steady(0.0, 30.0, step), *_steady(35.0, 90.0, step, first=10, attempt=2)]
    event = FailureEvent(20.0, FailureClass.ENGINE_OOM, Role.ROLLOUT, 0)
    record = ArmRecord("jobset", created=0.0, ended=90.0, samples=samples)
    record.injected.append(Injected(event, 20.0, pod="engine-0", instance="e0#0"))
    record.seen(20.0, "e0#0", "engine-0", "rollout")
    record.seen(21.0, "e0#0", "engine-0", "rollout")
    record.actions.append(Action(29.0, JOBSET_RESTART, "all"))
    [failure] = analyse(record, step, ROLES).failures
    assert failure.action == JOBSET_RESTART and not failure.without_gang
    assert failure.recomputed == 4  # 14 reached, resumed from 10
    assert attempts_started(samples)[0][1:] == (2, 10, 14)


def test_real_ett_weighs_each_class_by_its_rate() -> None:
    lost = {FailureClass.GPU_HARDWARE: 600.0, FailureClass.ENGINE_DRIFT: 36.0}
    per_hour = {FailureClass.GPU_HARDWARE: 0.1, FailureClass.ENGINE_DRIFT: 1.0}
    assert real_ett(lost, per_hour) == pytest.approx(1 - (60 + 36) / 3600)


def test_an_action_goes_to_the_latest_failure_it_can_be_about() -> None:
    def injected(t: float, failure_class: FailureClass, role: Role, pod: str) -> Injected:
        return Injected(FailureEvent(t, failure_class, role, 0), t, pod=pod)

    failures = [
        injected(10.0, FailureClass.NODE_LOST, Role.ROLLOUT, "engine-1"),
        injected(20.0, FailureClass.ENGINE_DRIFT, Role.ROLLOUT, "engine-2"),
        injected(30.0, FailureClass.HUNG_RANK, Role.TRAINER, "rank-3"),
    ]
    role = Action(35.0, ROLE, "rollout", "KVCacheDrift")  # after the hang: still the drift's
    gang = Action(42.0, GANG, "trainer", "NCCLTimeout")
    report = Action(12.0, REPORT, "rollout", "NodeLost")
    restart_all = Action(45.0, JOBSET_RESTART, "all")
    given = attribute(failures, [role, gang, report, restart_all])
    assert given == [[report], [role], [gang, restart_all]]


def test_the_page_renders_from_records_saved_and_loaded_again(tmp_path: Path) -> None:
    from bench.goodput.report import Report, render, results
    from bench.goodput.run import Settings, load_records, save_records

    settings = Settings(60.0, 200.0 / 3600, 1, True)
    trace = [FailureEvent(50.0, FailureClass.ENGINE_OOM, Role.ROLLOUT, 0)]
    records = {}
    for arm in Arm:
        record = ArmRecord(arm.value, created=0.0, ended=200.0, samples=_steady(0.0, 200.0, 3.2))
        if arm is not Arm.CALIBRATION:
            record.injected.append(Injected(trace[0], 50.0, pod="engine-0", instance="e0#0"))
        records[arm] = record
    records[Arm.JOBSET].actions.append(Action(51.0, JOBSET_RESTART, "all"))
    records[Arm.OPERATOR_DEFAULTS].status_goodput = {"ratio": "0.9", "total": {}}
    save_records(tmp_path / "records.json", settings, trace, records, 300.0)
    loaded = load_records(tmp_path / "records.json")
    assert loaded[0] == settings and loaded[1] == trace
    world = WORLD
    assert loaded[4].startswith(("commit ", "an unknown commit")), "what ran is kept"
    ran = Report(settings, world, trace, results(world, loaded[2]), loaded[3], "commit abc1234")
    page = render(ran)
    assert "UTC, commit abc1234, " in page
    for heading in (
        "## Effective training time",
        "## Per failure class",
        "## Every failure",
        "## Measured against the operator's own accounting",
        "## Extrapolated",
    ):
        assert heading in page
    assert "| jobset | engine_oom | 1 |" in page
