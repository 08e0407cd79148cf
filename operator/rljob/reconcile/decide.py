"""One pass's whole decision, pure: `decide(job, observed, inputs)` -> a Decision.

Reads top-down with early returns, like a Kubernetes controller's reconcile: settle the journal
(or carry an in-turn role restart one pod further), take a resume request, stop at a suspended
or finished job, take a manual restart, remediate a failed trainer attempt, crash-looping
serving pods and health findings through the failure policy, end the job on a FailJob or
suspend it on a Suspend, then the children and the next attempt's start. Everything it
decides is in the Decision: the status to journal (one resourceVersion-guarded write) and the
steps to execute after that write, in order. Nothing here has a side effect, so a pass whose
write fails (409) decided nothing that happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from rljob.api import (
    CheckpointRef,
    ConditionType,
    FailureAction,
    JobPhase,
    RLJob,
    RLJobStatus,
)
from rljob.api.diagnosis import Bottleneck
from rljob.api.status import EngineHealth
from rljob.health.evaluation import Evaluation
from rljob.reconcile.attempt_start import AttemptGathered, with_attempt_start
from rljob.reconcile.bottleneck import bottleneck_event, with_bottleneck
from rljob.reconcile.checkpoint_status import RETENTION_FAILED, with_latest
from rljob.reconcile.conditions import ConditionState, with_condition
from rljob.reconcile.drain import gated, recheck_after
from rljob.reconcile.engine_health import with_engine_health
from rljob.reconcile.engine_readings import EngineReading, with_stopped_engines
from rljob.reconcile.events import EventSpec
from rljob.reconcile.findings import crash_remedy, finding_remedy
from rljob.reconcile.gate import gate_recheck_after
from rljob.reconcile.in_turn import InTurnPass, advance_in_turn, preemptable
from rljob.reconcile.in_turn import preempted as preempted_in_turn
from rljob.reconcile.journal import settle_journal, unknown_format
from rljob.reconcile.lifecycle import FAIL_JOB_END, TrainerHold, close_attempt
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.plan import Plan, ReconcileExtras, reconcile
from rljob.reconcile.policy import Decision as PolicyDecision
from rljob.reconcile.progress import (
    ProgressReading,
    engine_policy_env,
    with_progress,
)
from rljob.reconcile.remediation import (
    awaiting_root_cause,
    failed_attempt,
    held_by_action,
    remedy_for,
)
from rljob.reconcile.requests import journal_manual_restart, not_started_note, pending_restart
from rljob.reconcile.serving import disruption_reports
from rljob.reconcile.steps import Step, execution_steps
from rljob.reconcile.suspended import suspended
from rljob.reconcile.suspension import handle_resume, journal_suspension

SIGNALS = "HealthSignalsAvailable"
NO_SOURCE_MESSAGE = (
    "health detection is off: no metrics source (set spec.health.source, or give the operator "
    "a default: chart value health.prometheus.url or health.directScrape)"
)
MAX_SIGNALS_MESSAGE = 300
GATE_WITHOUT_SIGNALS_MESSAGE = (
    "weightSync Gated holds every new rollout engine NotReady until its reported policy "
    "generation opens its rljob.io/policy-current gate, and the job has no metrics source to "
    "read it from: no engine can turn Ready (set spec.health.source, or give the operator a "
    "default: chart value health.prometheus.url or health.directScrape)"
)


@dataclass(frozen=True)
class PassInputs:
    """What the runtime gathered for this pass besides the RLJob and its children."""

    now: datetime
    findings: tuple[Evaluation, ...] = ()  # pending health findings, consumed once journaled
    crashes: tuple[tuple[ObservedPod, Evaluation], ...] = ()  # serving pods crashing in place
    progress: ProgressReading | None = None
    latest_checkpoint: CheckpointRef | None = None  # listed after the trainer reported a save
    continued_attempt: int | None = None  # a re-created name continues after the old markers
    attempt: AttemptGathered | None = None  # the store's answer for the attempt about to start
    watched: bool = False  # the health loop watches this job
    signals_error: str | None = None
    signals_source: str | None = None  # which source, described; None: none configured
    node_states: dict[str, str] = field(default_factory=dict)  # node -> Ready|NotReady|Gone|...
    retention_problem: str = ""  # the last retention apply's failure, to say in a condition
    engine_summaries: tuple[EngineHealth, ...] | None = None  # detector state to keep in status
    bottleneck: Bottleneck | None = None  # the health loop's latest diagnosis
    engine_readings: tuple[EngineReading, ...] = ()  # rollout engines: running, generation


@dataclass(frozen=True)
class Decision:
    """The status to journal and the steps to execute after it; `consumed`: the pending
    findings and crashes this decision acted on (dropped only once the journal is written)."""

    job: RLJob
    observed: Observed
    plan: Plan
    steps: tuple[Step, ...]
    events: tuple[EventSpec, ...]  # status-derived: posted only when the pass changed something
    reports: tuple[tuple[str, EventSpec], ...]  # (throttle key, Event): said at most every 10 min
    consumed: str = ""  # "finding" | "crash": what the runtime drops once journaled
    restarted: tuple[str, str | None] | None = None  # (role, pod) whose detectors start afresh
    watch: bool = True  # keep the job in the health loop


def decide(job: RLJob, observed: Observed, inputs: PassInputs) -> Decision:
    now = inputs.now
    readings = with_stopped_engines(inputs.engine_readings, observed.pods, now)
    inputs = replace(inputs, engine_readings=readings)
    diagnosed = job.status.bottleneck
    job = _continued(job, inputs)
    job = _with_status(job, _refreshed(job, inputs))
    job = _with_status(job, settle_journal(job.status, observed, job.metadata.name))
    turn = advance_in_turn(job, observed, now, inputs.engine_readings)
    job = _with_status(job, turn.status)
    resume = handle_resume(job, now)
    job = _with_status(job, resume.status)
    extras = ReconcileExtras(
        policy_env=engine_policy_env(job), engine_readings=inputs.engine_readings
    )
    events: list[EventSpec] = []
    if (changed := bottleneck_event(diagnosed, job.status.bottleneck)) is not None:
        events.append(changed)
    if inputs.continued_attempt is not None and job.status.attempts == []:
        events.append(_continued_event(job))
    if _finished(job) or suspended(job):
        return _decided(
            job, observed, inputs, extras, events, turn=turn, watch=False, notes=resume.reports
        )
    job = _with_status(job, _signals(job, inputs))
    remedy = _remedy(job, observed, inputs)
    if remedy.fail is not None:
        failed = _with_status(remedy.job, _failed(remedy.job, remedy.fail, now))
        events.append(EventSpec("Warning", "FailJob", remedy.fail))
        return _decided(failed, observed, inputs, extras, events, remedy=remedy, watch=False)
    extras = replace(extras, trainer_hold=remedy.hold)
    # A suspension journaled now stops the pods in this pass; the job stays watched until the
    # write lands, so a lost write (409) loses no finding.
    return _decided(
        remedy.job, observed, inputs, extras, events, remedy=remedy, turn=turn, notes=resume.reports
    )


@dataclass(frozen=True)
class _Remedy:
    """What remediation made of this pass: the job with its journaled action, a hold on a
    failed attempt, a FailJob message, reports to say, and what the detectors must forget."""

    job: RLJob
    hold: TrainerHold | None = None
    fail: str | None = None
    reports: tuple[tuple[str, EventSpec], ...] = ()
    consumed: str = ""
    restarted: tuple[str, str | None] | None = None


def _remedy(job: RLJob, observed: Observed, inputs: PassInputs) -> _Remedy:
    """Manual restarts, then the trainer, then serving pods, then health findings: one new
    action at most, and none while another is in flight (it is finished first; a failed
    trainer attempt preempts a Gated in-turn restart of the rollout instead)."""
    now = inputs.now
    failed = failed_attempt(job, observed)
    if failed is not None and (held := held_by_action(job, observed)) is not None:
        return _Remedy(job, hold=held)
    if failed is not None and (waiting := awaiting_root_cause(*failed, now)) is not None:
        return _Remedy(job, hold=waiting)
    if failed is not None and (trainer := _trainer_remedy(job, observed, failed, now)) is not None:
        return trainer
    if job.status.in_flight is not None:
        unknown = unknown_format(job.status)
        return _Remedy(job, reports=(("journal-format", unknown),) if unknown else ())
    order = pending_restart(job.metadata.annotations, job.status)
    if order is not None:
        status = journal_manual_restart(job, order, observed, now)
        merged = order.gang and status.in_flight is None
        notes = ((f"restart-{order.nonce}", not_started_note(order, status)),) if merged else ()
        return _Remedy(_with_status(job, status), reports=notes)
    for pod, evaluation in inputs.crashes:
        crash = crash_remedy(job, observed, pod, evaluation, now)
        if crash.fail is not None:
            return _Remedy(job, fail=crash.fail, consumed="crash")
        if crash.suspend is not None:
            return _Remedy(_suspended(job, crash.suspend, now), consumed="crash")
        status = crash.status or job.status
        return _Remedy(_with_status(job, status), reports=crash.reports, consumed="crash")
    return _health_remedy(job, observed, inputs)


def _trainer_remedy(
    job: RLJob,
    observed: Observed,
    failed: tuple[ObservedChild, ObservedPod | None],
    now: datetime,
) -> _Remedy | None:
    """The failure policy on a failed attempt: a gang restart journaled (counted), a backoff
    hold, FailJob or Suspend, in the write that ends a Gated in-turn restart it preempts (with
    a Warning naming the pods left); None when the policy does none of these (the reconcile
    fails the job, the in-turn restart stopping with it)."""
    notes: tuple[tuple[str, EventSpec], ...] = ()
    preempted = preemptable(job, observed)
    if preempted is not None:
        ended, event = preempted_in_turn(job.status, preempted, observed)
        job, notes = _with_status(job, ended), ((f"preempted-{preempted.id}", event),)
    trainer = remedy_for(job, *failed, now)
    if trainer.decision.action == FailureAction.FAIL_JOB:
        return _Remedy(job, fail=trainer.decision.message, reports=notes)
    if trainer.decision.action == FailureAction.SUSPEND:
        return _Remedy(_suspended(job, trainer.decision, now), reports=notes)
    if trainer.status is not None:
        restarted = _with_status(job, trainer.status)
        return _Remedy(restarted, reports=notes, restarted=("trainer", None))
    if trainer.hold is not None:
        return _Remedy(job, hold=trainer.hold, reports=notes)
    return None


def _health_remedy(job: RLJob, observed: Observed, inputs: PassInputs) -> _Remedy:
    if not inputs.findings:
        return _Remedy(job)
    found = finding_remedy(job, observed, inputs.findings[0], inputs.now)
    if found.fail is not None:
        return _Remedy(job, fail=found.fail, consumed="finding")
    if found.suspend is not None:
        return _Remedy(_suspended(job, found.suspend, inputs.now), consumed="finding")
    if found.status is None:  # reported, backing off, or waiting for maxUnavailable room
        return _Remedy(job, reports=found.reports, consumed="finding")
    status = _with_status(job, found.status)
    return _Remedy(status, consumed="finding", restarted=found.restarted)


def _decided(
    job: RLJob,
    observed: Observed,
    inputs: PassInputs,
    extras: ReconcileExtras,
    events: list[EventSpec],
    *,
    remedy: _Remedy | None = None,
    turn: InTurnPass | None = None,
    watch: bool = True,
    notes: tuple[tuple[str, EventSpec], ...] = (),
) -> Decision:
    live = inputs.progress.policy_generation if inputs.progress is not None else None
    extras = replace(extras, trainer_generation=live)  # a joining Gated engine's target
    plan = reconcile(job, observed, inputs.now, extras)
    started = with_attempt_start(
        job, observed, plan, extras, gathered=inputs.attempt, now=inputs.now
    )
    job, plan = started.job, started.plan
    for state in _overriding_states(job, inputs):
        plan = replace(
            plan, status=with_condition(plan.status, state, inputs.now, job.metadata.generation)
        )
    steps = execution_steps(
        job,
        plan,
        observed,
        attempt_plan=started.store_plan,
        node_states=inputs.node_states,
        now=inputs.now,
        settled=turn.settled if turn is not None else None,
        readings=inputs.engine_readings,
    )
    plan = replace(plan, requeue_after=_sooner(plan.requeue_after, _recheck(job, observed, inputs)))
    reports = (
        *notes,
        *(remedy.reports if remedy is not None else ()),
        *disruption_reports(observed),
    )
    restarted = remedy.restarted if remedy is not None else None
    if restarted is None and turn is not None and turn.turn is not None:
        restarted = (_in_turn_role(job), turn.turn)
    return Decision(
        job=job,
        observed=observed,
        plan=plan,
        steps=steps,
        events=(*events, *started.events, *plan.events),
        reports=reports,
        consumed=remedy.consumed if remedy is not None else "",
        restarted=restarted,
        watch=watch,
    )


def _overriding_states(job: RLJob, inputs: PassInputs) -> list[ConditionState]:
    """Conditions the pass's inputs decide over the plan's: a retention apply that failed, and a
    Gated job whose gate can never open (Degraded, whatever the roles' counts say)."""
    states = []
    if inputs.retention_problem:
        states.append(
            ConditionState.of(RETENTION_FAILED, True, "DeleteFailed", inputs.retention_problem)
        )
    if gated(job) and inputs.watched and inputs.signals_source is None:
        states.append(
            ConditionState.of(
                ConditionType.DEGRADED.value,
                True,
                "PolicyGateWithoutSignals",
                GATE_WITHOUT_SIGNALS_MESSAGE,
            )
        )
    return states


def _recheck(job: RLJob, observed: Observed, inputs: PassInputs) -> float | None:
    """A drain that waits, or a Gated engine awaiting its gate, is looked at again soon."""
    return _sooner(
        recheck_after(job, inputs.engine_readings, inputs.now), gate_recheck_after(job, observed)
    )


def _sooner(first: float | None, second: float | None) -> float | None:
    return min((s for s in (first, second) if s is not None), default=None)


def _in_turn_role(job: RLJob) -> str:
    action = job.status.in_flight
    return action.target.role.value if action is not None and action.target else ""


def _finished(job: RLJob) -> bool:
    return job.status.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED)


def _continued(job: RLJob, inputs: PassInputs) -> RLJob:
    if inputs.continued_attempt is None or job.status.attempt is not None:
        return job
    return _with_status(job, job.status.model_copy(update={"attempt": inputs.continued_attempt}))


def _continued_event(job: RLJob) -> EventSpec:
    message = (
        f"checkpoints of an earlier {job.metadata.name} exist: continuing at attempt "
        f"{job.status.attempt}"
    )
    return EventSpec("Normal", "AttemptsContinued", message)


def _refreshed(job: RLJob, inputs: PassInputs) -> RLJobStatus:
    """Progress and the newest checkpoint from the health rounds and the store."""
    status = with_progress(job.status, inputs.progress, inputs.now)
    refreshed = status.progress != job.status.progress
    if inputs.engine_summaries is not None and refreshed:  # rides the 5-minute refresh only
        status = with_engine_health(status, inputs.engine_summaries, inputs.now)
    status = with_bottleneck(status, inputs.bottleneck, refreshed=refreshed)
    if inputs.latest_checkpoint is not None:
        checkpoint = with_latest(status.checkpoint, inputs.latest_checkpoint)
        status = status.model_copy(update={"checkpoint": checkpoint})
    return status


def _signals(job: RLJob, inputs: PassInputs) -> RLJobStatus:
    """HealthSignalsAvailable: which source the job uses; False (no restart from metrics) while
    it fails or when there is none."""
    if not inputs.watched:
        return job.status
    source = inputs.signals_source
    if source is None:
        state = ConditionState.of(SIGNALS, False, "NoMetricsSource", NO_SOURCE_MESSAGE)
    elif inputs.signals_error is None:
        state = ConditionState.of(SIGNALS, True, "SourceAnswers", f"signals from {source}")
    else:
        message = f"{source}: {inputs.signals_error}"[:MAX_SIGNALS_MESSAGE]
        state = ConditionState.of(SIGNALS, False, "SourceUnavailable", message)
    return with_condition(job.status, state, inputs.now, job.metadata.generation)


def _failed(job: RLJob, message: str, now: datetime) -> RLJobStatus:
    """A decided FailJob ends the job wherever it came from: phase Failed, the journal closed,
    and the children stopped as for any finished job."""
    state = ConditionState.of("Failed", True, "FailurePolicy", message)
    status = with_condition(job.status, state, now, job.metadata.generation)
    return status.model_copy(
        update={
            "phase": JobPhase.FAILED,
            "completion_time": status.completion_time or now,
            "in_flight": None,
            "attempts": close_attempt(status.attempts, status.attempt or 1, FAIL_JOB_END, now),
        }
    )


def _suspended(job: RLJob, decision: PolicyDecision, now: datetime) -> RLJob:
    """The policy's Suspend journaled: no restart, nothing in the ledger (suspension.py)."""
    return _with_status(job, journal_suspension(job.status, decision, now))


def _with_status(job: RLJob, status: RLJobStatus) -> RLJob:
    return job.model_copy(update={"status": status})
