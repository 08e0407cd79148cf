"""status.goodput: every second from the job's creation lands in one bucket (training, a loss by
cause, a suspension), a failed attempt's detection starts at its failed container or else its
last step, recomputation ends where the attempt before had got to, ended attempts fold into
`closed` once, and the marks are stamped from the pass that saw them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from rljob.api import RLJob, RLJobStatus
from rljob.api.status import AttemptRecord, RolesStatus, RoleStatus
from rljob.reconcile.goodput import INFERRED_DETECTION, NO_STEP_SIGNAL, goodput, with_goodput
from rljob.reconcile.observed import Observed
from rljob.reconcile.progress import STEPS_KEPT, ProgressReading, StepSample, with_step
from tests.unit.reconcile.world import T0, example_job, pod


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def record(attempt: int, **marks: Any) -> AttemptRecord:
    """An attempt whose marks are given in minutes after T0 (steps as they are)."""
    times = {k: at(v) for k, v in marks.items() if k.endswith("_at") and v is not None}
    others = {k: v for k, v in marks.items() if not k.endswith("_at")}
    return AttemptRecord(attempt=attempt, **times, **others)


def created_at_t0() -> RLJob:
    job = example_job()
    return job.model_copy(
        update={"metadata": job.metadata.model_copy(update={"creation_timestamp": T0})}
    )


def figures(*records: AttemptRecord, now: float, queued: bool = False) -> dict[str, Any]:
    job = created_at_t0()
    status = RLJobStatus(attempt=records[-1].attempt, attempts=list(records))
    if queued:
        status = RLJobStatus.model_validate({**status.model_dump(by_alias=True), "queue": _queue()})
    result = goodput(job, status, at(now))
    total = result.total
    lost = {k: v // 60 for k, v in total.lost_seconds.model_dump().items() if v}
    suspended = {k: v // 60 for k, v in total.suspended_seconds.model_dump().items() if v}
    return {
        "productive": total.productive_seconds // 60,
        "lost": lost,
        "suspended": suspended,
        "steps": total.recomputed_steps,
        "ratio": result.ratio,
        "notes": result.notes,
    }


def _queue() -> dict[str, Any]:
    return {
        "workload": "w",
        "localQueue": "q",
        "state": "Admitted",
        "since": T0.isoformat(),
    }


HEALTHY = record(1, started_at=1, running_at=3, first_step_at=5, caught_up_at=5)
# Failed at minute 60 (a rank's container ended), last step read at 58, decided at 62.
CRASHED = record(
    1,
    started_at=1,
    running_at=3,
    first_step_at=5,
    caught_up_at=5,
    reached_step=100,
    healthy_at=58,
    failed_at=60,
    ended_at=62,
    end_reason="NCCLTimeout",
)
# Its successor: Job at 64, Ready at 66, first step at 70, past step 100 at 80.
RESUMED = record(
    2,
    started_at=64,
    running_at=66,
    first_step_at=70,
    caught_up_at=80,
    resumed_from_step=80,
    reached_step=130,
)


@pytest.mark.parametrize(
    ("records", "now", "expected"),
    [
        pytest.param(
            [HEALTHY], 65,
            {"productive": 60, "lost": {"scheduling": 3, "startup": 2}, "steps": 0},
            id="healthy-scheduling-then-startup-then-training",
        ),
        pytest.param(
            [CRASHED, RESUMED], 100,
            {"productive": 53 + 20,
             "lost": {"scheduling": 1 + 2 + 2, "startup": 2 + 4, "recomputation": 2 + 10,
                      "detection": 2, "teardown": 2},
             "steps": 20},
            id="crash-measured-detection-teardown-recomputation",
        ),
        pytest.param(
            [CRASHED.model_copy(update={"failed_at": None}), RESUMED], 100,
            {"productive": 53 + 20,
             "lost": {"scheduling": 5, "startup": 6, "recomputation": 10, "detection": 4,
                      "teardown": 2},
             "steps": 20},
            id="hang-detection-from-the-last-step-read",
        ),
        pytest.param(
            [CRASHED, RESUMED.model_copy(update={"caught_up_at": None, "reached_step": 90})], 75,
            {"productive": 53,
             "lost": {"scheduling": 5, "startup": 6, "recomputation": 2 + 5, "detection": 2,
                      "teardown": 2},
             "steps": 10},
            id="still-recomputing-counts-the-steps-redone-so-far",
        ),
    ],
)  # fmt: skip
def test_every_minute_lands_in_one_bucket(
    records: list[AttemptRecord], now: float, expected: dict[str, Any]
) -> None:
    result = figures(*records, now=now)

    assert {k: result[k] for k in expected} == expected
    assert result["productive"] + sum(result["lost"].values()) == now


def test_a_suspension_is_shown_apart_and_not_held_against_the_ratio() -> None:
    suspended = HEALTHY.model_copy(
        update={"ended_at": at(35), "end_reason": "Suspended", "healthy_at": at(35)}
    )
    after = record(2, started_at=95, running_at=97, first_step_at=98, caught_up_at=98)

    result = figures(suspended, after, now=125)

    assert result["suspended"] == {"user": 60}
    assert result["productive"] == 30 + 27
    assert result["ratio"] == pytest.approx(57 / 65, abs=0.001)


@pytest.mark.parametrize(
    ("end_reason", "bucket"),
    [
        pytest.param("Evicted", ("suspended", "queue"), id="evicted-by-kueue-is-the-queues"),
        pytest.param("Unschedulable", ("lost", "scheduling"), id="a-scheduling-timeout"),
        pytest.param("RestartRequested", ("lost", "teardown"), id="a-restart-the-user-asked"),
    ],
)
def test_the_gap_before_the_next_attempt_goes_by_how_the_last_ended(
    end_reason: str, bucket: tuple[str, str]
) -> None:
    ended = HEALTHY.model_copy(update={"ended_at": at(30), "end_reason": end_reason})
    after = record(2, started_at=40)

    result = figures(ended, after, now=40)

    assert result[bucket[0]].get(bucket[1], 0) >= 10


def test_a_queued_job_waiting_for_its_first_admission_is_suspended_by_the_queue() -> None:
    result = figures(record(1, started_at=30), now=30, queued=True)

    assert result["suspended"] == {"queue": 30} and result["ratio"] is None


def test_without_a_step_signal_ready_time_counts_as_training_and_says_so() -> None:
    result = figures(record(1, started_at=1, running_at=3), now=63)

    assert result["productive"] == 60 and result["lost"] == {"scheduling": 3}
    assert result["notes"] == [NO_STEP_SIGNAL]
    assert figures(record(1, started_at=1, running_at=3), now=8)["notes"] == [], (
        "a trainer still loading has no step yet: nothing to say about its signal"
    )


def test_an_inferred_failure_instant_is_noted() -> None:
    hung = CRASHED.model_copy(update={"failed_at": None})

    assert figures(hung, RESUMED, now=100)["notes"] == [INFERRED_DETECTION]
    assert figures(CRASHED, RESUMED, now=100)["notes"] == []


def running_status(records: list[AttemptRecord], *, ready: bool = True) -> RLJobStatus:
    trainer = RoleStatus(desired=2, ready=2 if ready else 1)
    return RLJobStatus(
        attempt=records[-1].attempt, attempts=records, roles=RolesStatus(trainer=trainer)
    )


def reading(step: int, minutes: float) -> ProgressReading:
    return ProgressReading(step=step, seen_step=step, step_at=at(minutes).timestamp())


def pass_at(
    status: RLJobStatus,
    minutes: float,
    progress: ProgressReading | None = None,
    *,
    pods: tuple[Any, ...] = (),
    refreshed: bool = False,
) -> RLJobStatus:
    job = created_at_t0()
    observed = Observed(pods=tuple(pods))
    return with_goodput(job, status, observed, progress, at(minutes), refreshed=refreshed)


def test_the_marks_are_stamped_from_the_passes_that_saw_them() -> None:
    status = running_status([record(1, started_at=1)], ready=False)
    status = pass_at(status, 2)
    assert status.attempts[0].running_at is None, "not every rank Ready yet"
    ready = status.model_copy(update={"roles": RolesStatus(trainer=RoleStatus(desired=2, ready=2))})

    status = pass_at(ready, 3)
    status = pass_at(status, 6, reading(1, 5))
    status = pass_at(status, 30, reading(40, 29))

    mark = status.attempts[0]
    assert (mark.running_at, mark.first_step_at, mark.caught_up_at) == (at(3), at(5), at(5))
    assert (mark.reached_step, mark.healthy_at) == (1, at(5)), "the step waits for a refresh"
    refreshed = pass_at(status, 31, reading(41, 31), refreshed=True).attempts[0]
    assert (refreshed.reached_step, refreshed.healthy_at) == (41, at(31))


def test_an_attempt_ending_takes_its_last_step_and_its_failed_container_then_folds_once() -> None:
    ran = record(1, started_at=1, running_at=3, first_step_at=5, caught_up_at=5, reached_step=10,
                 healthy_at=20)  # fmt: skip
    ended = ran.model_copy(update={"ended_at": at(62), "end_reason": "NCCLTimeout"})
    nxt = record(2, started_at=62, resumed_from_step=40)
    failed = pod("t-0", "trainer", attempt=1, exit_code=1,
                 finished_at=at(60), phase="Failed")  # fmt: skip
    status = running_status([ended, nxt])

    status = pass_at(status, 62, reading(50, 58), pods=(failed,))

    first = status.attempts[0]
    assert (first.reached_step, first.healthy_at, first.failed_at) == (50, at(58), at(60))
    assert status.goodput is not None and status.goodput.closed_through == 1
    closed = status.goodput.closed
    assert closed.lost_seconds.detection == 120 and closed.productive_seconds == 53 * 60
    again = pass_at(status, 63)
    assert again.goodput is not None and again.goodput.closed == closed, "folded once"


def test_a_step_left_from_the_attempt_before_is_not_the_new_ones() -> None:
    status = running_status([record(2, started_at=64)])

    status = pass_at(status, 66, reading(100, 58))

    assert status.attempts[0].first_step_at is None


def test_a_healthy_job_between_refreshes_is_not_rewritten() -> None:
    status = pass_at(running_status([HEALTHY]), 40, reading(50, 39), refreshed=True)

    assert pass_at(status, 41, reading(51, 41)) is status


def test_the_step_an_attempt_resumed_at_is_not_its_first_step() -> None:
    """A trainer says its resume step as it starts: startup lasts until it completes one."""
    status = pass_at(running_status([record(2, started_at=64, resumed_from_step=80)]), 66,
                     reading(80, 65))  # fmt: skip
    assert status.attempts[0].first_step_at is None

    status = pass_at(status, 70, reading(81, 69))

    assert status.attempts[0].first_step_at == at(69)


def read_over(*steps_at: tuple[int, float]) -> ProgressReading:
    """The rounds' readings as the runtime keeps them: each distinct step, first read when."""
    kept: tuple[StepSample, ...] = ()
    for step, minutes in steps_at:
        kept = with_step(kept, StepSample(step, at(minutes).timestamp()))
    last = kept[-1]
    return ProgressReading(step=last.step, seen_step=last.step, step_at=last.at, steps_seen=kept)


@pytest.mark.parametrize(
    ("rounds", "first_step_at"),
    [
        pytest.param([(80, 65), (81, 66), (82, 68), (83, 70)], 66,
                     id="the-round-that-read-the-first-step-past-the-resume-step"),
        pytest.param([(79, 63), (81, 66), (82, 68)], 66, id="not-a-step-read-before-it-started"),
        pytest.param([(80, 65), *((81 + n, 66 + n) for n in range(STEPS_KEPT + 1))], 67,
                     id="the-earliest-still-kept"),
    ],
)  # fmt: skip
def test_a_late_pass_stamps_the_first_step_when_a_round_first_read_it(
    rounds: list[tuple[int, float]], first_step_at: float
) -> None:
    """Passes come on a child's change, a checkpoint or the resync, not on every step: the mark
    is the time of the round that read it, not of the pass."""
    status = running_status([record(2, started_at=64, resumed_from_step=80)])

    status = pass_at(status, 80, read_over(*rounds))

    assert status.attempts[0].first_step_at == at(first_step_at)


@pytest.mark.parametrize(
    ("records", "caught_up_at"),
    [
        pytest.param([record(1, started_at=1)], 3, id="a-first-attempt-is-caught-up-at-once"),
        pytest.param([record(1, started_at=1, reached_step=84, ended_at=2),
                      record(2, started_at=2, resumed_from_step=80)], 6,
                     id="a-resumed-one-when-a-round-read-the-step-reached-before"),
    ],
)  # fmt: skip
def test_a_late_pass_counts_no_recomputation_the_rounds_did_not_see(
    records: list[AttemptRecord], caught_up_at: float
) -> None:
    status = pass_at(
        running_status(records), 20, read_over((81, 3), (82, 4), (83, 5), (84, 6), (85, 7))
    )

    mark = status.attempts[-1]
    assert (mark.first_step_at, mark.caught_up_at) == (at(3), at(caught_up_at))


def test_the_runtime_keeps_each_distinct_step_once_and_the_last_few() -> None:
    kept: tuple[StepSample, ...] = ()
    for step, t in [(1, 0.0), (1, 5.0), (2, 9.0), *((3 + n, 10.0 + n) for n in range(20))]:
        kept = with_step(kept, StepSample(step, t))

    assert len(kept) == STEPS_KEPT
    assert [s.step for s in kept] == list(range(23 - STEPS_KEPT, 23))
    assert with_step((StepSample(1, 0.0),), StepSample(1, 5.0)) == (StepSample(1, 0.0),)
