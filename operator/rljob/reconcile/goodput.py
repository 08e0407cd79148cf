"""status.goodput: wall-clock since the job's creation split into training, time lost by cause
and time suspended (docs/architecture.md section 12). Pure.

Each trainer attempt owns the time from the end of the attempt before (the job's creation for
the first) to its own end, split by the marks its record carries:

    end of the one before -> teardown (or suspended, or queueing before the first)
    startedAt (its Job)   -> scheduling
    runningAt (ranks Ready) -> startup
    firstStepAt           -> recomputation (redoing the steps since the checkpoint)
    caughtUpAt            -> productive
    healthyAt (last step) -> recomputation (the step in progress when it failed)
    failedAt              -> detection
    endedAt (the decision)

Outside the bed the failure instant is known only where a rank's container ended (failedAt);
a hang or a lost node gives none, so detection then runs from the last step read (healthyAt)
and the notes say so. Without a step signal the time from all ranks Ready counts as training.
An attempt's time is folded into `closed` once it ends, so the totals outlive the bounded
attempt history. The marks are stamped when seen (runningAt, firstStepAt, caughtUpAt: one write
each per attempt); reachedStep and healthyAt ride the 5-minute progress refresh and the pass
that ends the attempt, so a healthy job costs no extra writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rljob.api import FailureReason, RLJob, RLJobStatus, RoleName
from rljob.api.goodput import GoodputStatus, GoodputTotals, LostSeconds, SuspendedSeconds
from rljob.api.status import AttemptRecord
from rljob.reconcile.lifecycle import (
    EVICTED_END,
    FAIL_JOB_END,
    JOB_DELETED_END,
    RESTART_REQUESTED_END,
    SUCCEEDED_END,
    SUSPENDED_END,
)
from rljob.reconcile.observed import Observed
from rljob.reconcile.progress import ProgressReading

# Ends that are not a failure: no detection, and the time up to the end trained.
_CALM_ENDS = frozenset({SUCCEEDED_END, SUSPENDED_END, EVICTED_END, RESTART_REQUESTED_END})
# Ends that say nothing of a failure instant: the operator or a user ended it.
_NOT_FAILURES = frozenset({JOB_DELETED_END, FAIL_JOB_END})
INFERRED_DETECTION = (
    "detection of a failure with no failed container (a hang, a lost node) runs from the last "
    "step read: its instant is unknown"
)
NO_STEP_GRACE_SECONDS = 600.0
NO_STEP_SIGNAL = (
    "no step signal (the SDK or a framework bridge): time from all ranks Ready counts as "
    "training; startup and recomputation are unknown"
)


@dataclass
class _Split:
    """Seconds being added up, as floats; whole seconds only in status."""

    productive: float = 0.0
    lost: dict[str, float] = field(default_factory=dict)
    suspended: dict[str, float] = field(default_factory=dict)
    recomputed_steps: int = 0

    def lose(self, cause: str, seconds: float) -> None:
        self.lost[cause] = self.lost.get(cause, 0.0) + max(0.0, seconds)

    def suspend(self, by: str, seconds: float) -> None:
        self.suspended[by] = self.suspended.get(by, 0.0) + max(0.0, seconds)

    def totals(self, base: GoodputTotals | None = None) -> GoodputTotals:
        base = base or GoodputTotals()
        lost = {
            k: v + round(self.lost.get(k, 0.0)) for k, v in base.lost_seconds.model_dump().items()
        }
        suspended = {
            k: v + round(self.suspended.get(k, 0.0))
            for k, v in base.suspended_seconds.model_dump().items()
        }
        return GoodputTotals(
            productive_seconds=base.productive_seconds + round(max(0.0, self.productive)),
            lost_seconds=LostSeconds(**lost),
            suspended_seconds=SuspendedSeconds(**suspended),
            recomputed_steps=base.recomputed_steps + self.recomputed_steps,
        )


def with_goodput(
    job: RLJob,
    status: RLJobStatus,
    observed: Observed,
    reading: ProgressReading | None,
    now: datetime,
    *,
    refreshed: bool,
) -> RLJobStatus:
    """`status` with the attempts' marks stamped from this pass, ended attempts folded into
    status.goodput.closed, and status.goodput recomputed when anything it rests on moved (a
    mark, an attempt's end, the 5-minute progress refresh) or it is missing."""
    if not status.attempts:
        return status
    through = status.goodput.closed_through if status.goodput else 0
    attempts = [
        _stamped(
            record,
            _previous(status.attempts, record.attempt),
            status,
            observed,
            reading=reading,
            now=now,
            refreshed=refreshed,
        )
        if record.attempt > through
        else record
        for record in status.attempts
    ]
    ended = any(r.ended_at is not None and r.attempt > through for r in attempts)
    if not (ended or refreshed or status.goodput is None or attempts != status.attempts):
        return status
    marked = status.model_copy(update={"attempts": attempts})
    return marked.model_copy(update={"goodput": goodput(job, marked, now)})


def goodput(job: RLJob, status: RLJobStatus, now: datetime) -> GoodputStatus:
    """The figures at `now` from the attempts and what earlier ones left in `closed`."""
    old = status.goodput or GoodputStatus()
    records = list(status.attempts)
    context = _Context(
        queued=status.queue is not None,
        steps_known=any(r.first_step_at is not None for r in records),
    )
    closed, through = old.closed, old.closed_through
    before = _previous(records, through + 1)
    for record in records:
        if record.attempt <= through or record.ended_at is None:
            continue
        split = _attempt_split(record, before, _start_of(job, before), record.ended_at, context)
        closed, through, before = split.totals(closed), record.attempt, record
    live = _Split()
    for record in records:
        if record.attempt > through and record.ended_at is None:
            live = _attempt_split(record, before, _start_of(job, before), now, context)
    total = live.totals(closed)
    created = job.metadata.creation_timestamp or records[0].started_at
    wall = _seconds(created, now) - total.suspended_seconds.total()
    return GoodputStatus(
        ratio=min(1.0, total.productive_seconds / wall) if wall > 0 else None,
        total=total,
        closed=closed,
        closed_through=through,
        updated_at=now,
        notes=_notes(records, context, now),
    )


@dataclass(frozen=True)
class _Context:
    queued: bool  # Kueue admits the job: waits before an attempt are the queue's
    steps_known: bool  # a step was ever read: the job has a step signal


def _attempt_split(
    record: AttemptRecord,
    before: AttemptRecord | None,
    start: datetime | None,
    end: datetime,
    context: _Context,
) -> _Split:
    """One attempt's share: from the end of the one before (`start`) to its end (`end`)."""
    split = _Split()
    _gap(split, before, context.queued, _seconds(start, record.started_at))
    failed = _failed(record)
    # A failed attempt's detection starts at its failure instant, else at its last step read.
    cut = (_clip(record.failed_at or record.healthy_at, end) or end) if failed else end
    running = _clip(record.running_at, cut)
    split.lose("scheduling", _seconds(record.started_at, running or cut))
    if running is not None:
        _running(split, record, before, running=running, cut=cut, context=context, failed=failed)
    split.lose("detection", _seconds(cut, end))
    return split


def _running(
    split: _Split,
    record: AttemptRecord,
    before: AttemptRecord | None,
    *,
    running: datetime,
    cut: datetime,
    context: _Context,
    failed: bool,
) -> None:
    """From all ranks Ready to `cut`: startup, recomputation, training, the step in progress."""
    if not context.steps_known:
        split.productive += _seconds(running, cut)
        return
    first = _clip(record.first_step_at, cut)
    if first is None:
        split.lose("startup", _seconds(running, cut))
        return
    split.lose("startup", _seconds(running, first))
    caught = _clip(record.caught_up_at, cut) or cut
    split.lose("recomputation", _seconds(first, caught))
    split.recomputed_steps = _recomputed(record, before)
    healthy = max(_clip(record.healthy_at, cut) or cut, caught) if failed else cut
    split.productive += _seconds(caught, healthy)
    split.lose("recomputation", _seconds(healthy, cut))  # the step in progress when it failed


def _gap(split: _Split, before: AttemptRecord | None, queued: bool, seconds: float) -> None:
    """The time before an attempt's Job: queueing before the first, a suspension's, or the
    teardown of the one before."""
    by = "queue" if queued else "user"
    if before is None and queued:
        split.suspend("queue", seconds)
    elif before is None or before.end_reason == FailureReason.UNSCHEDULABLE.value:
        split.lose("scheduling", seconds)
    elif before.end_reason == EVICTED_END:
        split.suspend("queue", seconds)
    elif before.end_reason == SUSPENDED_END:
        split.suspend(by, seconds)
    else:
        split.lose("teardown", seconds)


def _recomputed(record: AttemptRecord, before: AttemptRecord | None) -> int:
    """Steps the attempt did again: from the step it resumed at to the one the attempt before
    had reached (or to its own, if it has not got there)."""
    if before is None or before.reached_step is None or record.resumed_from_step is None:
        return 0
    reached = before.reached_step
    if record.reached_step is not None:
        reached = min(reached, record.reached_step)
    return max(0, reached - record.resumed_from_step)


def _stamped(
    record: AttemptRecord,
    before: AttemptRecord | None,
    status: RLJobStatus,
    observed: Observed,
    *,
    reading: ProgressReading | None,
    now: datetime,
    refreshed: bool,
) -> AttemptRecord:
    """The record with the marks this pass saw: an open current attempt's Ready, first step,
    catching up and (at the progress refresh) its step; an attempt ending now, its last step
    and its failure instant."""
    step, step_at = _reading_of(record, reading)
    update: dict[str, object] = {}
    if record.ended_at is not None:
        if step is not None and step_at is not None and step_at <= record.ended_at:
            update |= {"reached_step": step, "healthy_at": step_at}
        if _failed(record) and record.failed_at is None:
            update["failed_at"] = _failure_instant(observed, record.attempt)
    elif record.attempt == status.attempt:
        running = record.running_at or (now if _ranks_ready(status) else None)
        update["running_at"] = running
        # A step past the one it resumed at (or past 0): one it completed, not its start.
        done = step is not None and step > (record.resumed_from_step or 0)
        if (
            step is not None
            and step_at is not None
            and running is not None
            and (done or record.first_step_at is not None)
        ):
            resumed = record.resumed_from_step or 0
            first = record.first_step_at or _first_read(record, reading, resumed) or step_at
            update["first_step_at"] = first
            if record.caught_up_at is None and _caught_up(step, before):
                reached = before.reached_step if before is not None else None
                when = first if reached is None else _first_read(record, reading, reached - 1)
                update["caught_up_at"] = max(when or step_at, first)
            if refreshed or record.reached_step is None:
                update |= {"reached_step": step, "healthy_at": step_at}
    update = {k: v for k, v in update.items() if v is not None and getattr(record, k) != v}
    return record.model_copy(update=update) if update else record


def _reading_of(
    record: AttemptRecord, reading: ProgressReading | None
) -> tuple[int | None, datetime | None]:
    """The reading's step and when it was first read, if it is this attempt's (read after its
    Job was created: a step left from the attempt before is not)."""
    if reading is None or reading.seen_step is None or reading.step_at is None:
        return None, None
    at = _read_in(record, reading.step_at)
    return (reading.seen_step, at) if at is not None else (None, None)


def _read_in(record: AttemptRecord, read_at: float) -> datetime | None:
    """A reading's time (status times in whole seconds) if this attempt's: read after its Job
    was created."""
    at = datetime.fromtimestamp(int(read_at), UTC)
    return at if at >= record.started_at else None


def _first_read(
    record: AttemptRecord, reading: ProgressReading | None, past: int
) -> datetime | None:
    """When a round of this attempt first read a step above `past`, if the steps the reading
    keeps still hold it."""
    for sample in reading.steps_seen if reading is not None else ():
        at = _read_in(record, sample.at)
        if sample.step > past and at is not None:
            return at
    return None


def _caught_up(step: int, before: AttemptRecord | None) -> bool:
    return before is None or before.reached_step is None or step >= before.reached_step


def _ranks_ready(status: RLJobStatus) -> bool:
    trainer = status.roles.trainer if status.roles is not None else None
    return trainer is not None and trainer.desired > 0 and trainer.ready >= trainer.desired


def _failure_instant(observed: Observed, attempt: int) -> datetime | None:
    """When the attempt's first failed rank's container ended, if one did."""
    ended = [
        pod.finished_at
        for pod in observed.pods
        if pod.role == RoleName.TRAINER.value
        and pod.attempt == attempt
        and pod.finished_at is not None
        and pod.exit_code not in (None, 0)
    ]
    return min(ended, default=None)


def _previous(records: Sequence[AttemptRecord], attempt: int) -> AttemptRecord | None:
    return next((r for r in reversed(records) if r.attempt < attempt), None)


def _start_of(job: RLJob, before: AttemptRecord | None) -> datetime | None:
    return before.ended_at if before is not None else job.metadata.creation_timestamp


def _notes(records: Sequence[AttemptRecord], context: _Context, now: datetime) -> list[str]:
    notes = []
    failures = [r for r in records if _failed(r) and r.end_reason not in _NOT_FAILURES]
    if any(r.failed_at is None for r in failures):
        notes.append(INFERRED_DETECTION)
    # A trainer still loading has read no step yet: said once it has run a while without one.
    ran = [_seconds(r.running_at, r.ended_at or now) for r in records]
    if not context.steps_known and max(ran, default=0.0) >= NO_STEP_GRACE_SECONDS:
        notes.append(NO_STEP_SIGNAL)
    return notes


def _failed(record: AttemptRecord) -> bool:
    return record.ended_at is not None and record.end_reason not in _CALM_ENDS


def _clip(at: datetime | None, end: datetime) -> datetime | None:
    return None if at is None else min(at, end)


def _seconds(start: datetime | None, end: datetime | None) -> float:
    if start is None or end is None:
        return 0.0
    return max(0.0, (end - start).total_seconds())
