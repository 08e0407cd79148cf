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

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from rljob.api import (
    ConditionType,
    JobPhase,
    RLJob,
    RLJobStatus,
)
from rljob.reconcile.admission import PodSetInfo
from rljob.reconcile.attempt_start import with_attempt_start
from rljob.reconcile.bottleneck import bottleneck_event, with_bottleneck
from rljob.reconcile.checkpoint_status import with_latest
from rljob.reconcile.conditions import ConditionState, with_condition
from rljob.reconcile.drain import gated, recheck_after
from rljob.reconcile.engine_health import with_engine_health
from rljob.reconcile.engine_readings import with_stopped_engines
from rljob.reconcile.events import EventSpec
from rljob.reconcile.gate import gate_recheck_after, generation_from_engine
from rljob.reconcile.goodput import with_goodput
from rljob.reconcile.in_turn import InTurnPass, advance_in_turn
from rljob.reconcile.inputs import PassInputs
from rljob.reconcile.journal import settle_journal
from rljob.reconcile.leftovers import with_renamed
from rljob.reconcile.lifecycle import FAIL_JOB_END, close_attempt
from rljob.reconcile.nodes import lost_nodes, lost_recheck_after
from rljob.reconcile.observed import Observed
from rljob.reconcile.ownership import owned_by, recorded_jobs
from rljob.reconcile.plan import Plan, ReconcileExtras, reconcile
from rljob.reconcile.progress import (
    engine_policy_env,
    with_progress,
)
from rljob.reconcile.queue import QueuePass, admission_conflict, queue_pass
from rljob.reconcile.remedy import Remedy, with_status
from rljob.reconcile.remedy import remedy as choose_remedy
from rljob.reconcile.serving import disruption_reports
from rljob.reconcile.steps import Step, execution_steps
from rljob.reconcile.suspended import suspended
from rljob.reconcile.suspension import handle_resume
from rljob.reconcile.unfinished import timed_out
from rljob.vocabulary.kueue import FAILED_TO_START

NO_SOURCE_MESSAGE = (
    "health detection is off: no metrics source (set spec.health.source, or give the operator "
    "a default: chart value health.prometheus.url or health.directScrape)"
)
MAX_SIGNALS_MESSAGE = 300
GATE_WITHOUT_SIGNALS_MESSAGE = (
    "weightSync Gated holds every new rollout engine NotReady until its reported policy "
    "generation opens its rljob.io/policy-current gate, and the job has no metrics source to "
    "read it from: no engine can turn Ready (set spec.health.source, give the operator a "
    "default: chart value health.prometheus.url or health.directScrape, or have vLLM or SGLang "
    "engines read directly: spec.roles.rollout.generationFrom engine)"
)


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
    """`observed`: every object with the job's name label; what the RLJob does not own (a
    leftover of a deleted namesake) is set apart first and never read as the job's. A queued
    job's Workload is read first: until Kueue admits it, it is held as a suspended one is."""
    observed, leftovers = owned_by(observed, job.metadata.uid or "", recorded_jobs(job))
    queued = queue_pass(job, observed.pods, inputs.queue, inputs.now)
    job = with_status(job, queued.status)
    decision = _decide(job, observed, replace(inputs, leftovers=leftovers), queued.infos)
    return _with_workload_steps(decision, queued, inputs, ended=_finished(job))


def _with_workload_steps(
    decision: Decision, queued: QueuePass, inputs: PassInputs, *, ended: bool
) -> Decision:
    """The Workload's writes after the pass's own; a job this pass ended tells its Workload."""
    steps = queued.steps
    if not ended and decision.plan.status.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
        ended_status = decision.plan.status
        final = with_status(decision.job, ended_status)
        steps = queue_pass(final, decision.observed.pods, inputs.queue, inputs.now).steps
    return replace(decision, steps=(*decision.steps, *steps))


def _decide(
    job: RLJob, observed: Observed, inputs: PassInputs, admission: Mapping[str, PodSetInfo]
) -> Decision:
    now = inputs.now
    leftovers = inputs.leftovers
    readings = with_stopped_engines(inputs.engine_readings, observed.pods, now)
    inputs = replace(inputs, engine_readings=readings, leftovers=leftovers)
    diagnosed = job.status.bottleneck
    job = _continued(job, inputs)
    job = with_status(job, _refreshed(job, inputs))
    job = with_status(job, settle_journal(job.status, observed))
    turn = advance_in_turn(job, observed, now, inputs.engine_readings)
    job = with_status(job, turn.status)
    notes: tuple[tuple[str, EventSpec], ...] = ()
    if (stalled := timed_out(job, observed, now)) is not None:
        job, notes = with_status(job, stalled.status), ((stalled.key, stalled.event),)
    resume = handle_resume(job, now)
    job = with_status(job, resume.status)
    notes += resume.reports
    extras = ReconcileExtras(
        policy_env=engine_policy_env(job),
        engine_readings=inputs.engine_readings,
        lost_nodes=lost_nodes(job, inputs.node_states, now),
        default_store=inputs.default_store,
        admission=admission,
    )
    events: list[EventSpec] = []
    if (changed := bottleneck_event(diagnosed, job.status.bottleneck)) is not None:
        events.append(changed)
    if inputs.continued_attempt is not None and job.status.attempts == []:
        events.append(_continued_event(job))
    if _finished(job) or suspended(job):
        return _decided(job, observed, inputs, extras, events, turn=turn, watch=False, notes=notes)
    if (conflict := admission_conflict(job, admission)) is not None:
        refused = with_status(job, _failed(job, conflict.message(), now, FAILED_TO_START))
        events.append(EventSpec("Warning", FAILED_TO_START, conflict.message()))
        return _decided(refused, observed, inputs, extras, events, watch=False)
    job = with_status(job, _signals(job, inputs))
    remedy = choose_remedy(job, observed, inputs)
    if remedy.fail is not None:
        failed = with_status(remedy.job, _failed(remedy.job, remedy.fail, now))
        events.append(EventSpec("Warning", "FailJob", remedy.fail))
        return _decided(failed, observed, inputs, extras, events, remedy=remedy, watch=False)
    extras = replace(extras, trainer_hold=remedy.hold)
    # A suspension journaled now stops the pods in this pass; the job stays watched until the
    # write lands, so a lost write (409) loses no finding.
    return _decided(
        remedy.job, observed, inputs, extras, events, remedy=remedy, turn=turn, notes=notes
    )


def _decided(
    job: RLJob,
    observed: Observed,
    inputs: PassInputs,
    extras: ReconcileExtras,
    events: list[EventSpec],
    *,
    remedy: Remedy | None = None,
    turn: InTurnPass | None = None,
    watch: bool = True,
    notes: tuple[tuple[str, EventSpec], ...] = (),
) -> Decision:
    live = inputs.progress.policy_generation if inputs.progress is not None else None
    extras = replace(extras, trainer_generation=live)  # a joining Gated engine's target
    job, renamed = with_renamed(job, observed, inputs.leftovers, inputs.taken)
    events = [*events, *renamed]
    plan = reconcile(job, observed, inputs.now, extras)
    started = with_attempt_start(
        job, observed, plan, extras, gathered=inputs.attempt, now=inputs.now
    )
    job, plan = started.job, started.plan
    plan = replace(plan, status=_with_goodput(job, plan.status, observed, inputs))
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


def _with_goodput(
    job: RLJob, status: RLJobStatus, observed: Observed, inputs: PassInputs
) -> RLJobStatus:
    """status.goodput, recomputed with the progress refresh (this pass wrote its time)."""
    progress = status.progress
    refreshed = progress is not None and progress.updated_at == inputs.now
    return with_goodput(job, status, observed, inputs.progress, inputs.now, refreshed=refreshed)


def _overriding_states(job: RLJob, inputs: PassInputs) -> list[ConditionState]:
    """Conditions the pass's inputs decide over the plan's: a retention apply that failed, and a
    Gated job whose gate can never open (Degraded, whatever the roles' counts say)."""
    states = []
    if inputs.retention_problem:
        states.append(
            ConditionState.of(
                ConditionType.CHECKPOINT_RETENTION_FAILED,
                True,
                "DeleteFailed",
                inputs.retention_problem,
            )
        )
    # generationFrom engine: the gate reads the engines themselves, not the metrics source.
    blind = not generation_from_engine(job) and inputs.signals_source is None
    if gated(job) and inputs.watched and blind:
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
    """A drain that waits, a Gated engine awaiting its gate, or a rank whose node is not
    answering yet lost, is looked at again soon."""
    lost = lost_recheck_after(job, observed, inputs.node_states, inputs.now)
    return _sooner(
        _sooner(recheck_after(job, inputs.engine_readings, inputs.now), lost),
        gate_recheck_after(job, observed),
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
    return with_status(job, job.status.model_copy(update={"attempt": inputs.continued_attempt}))


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
        state = ConditionState.of(
            ConditionType.HEALTH_SIGNALS_AVAILABLE, False, "NoMetricsSource", NO_SOURCE_MESSAGE
        )
    elif inputs.signals_error is None:
        message = f"signals from {source}{_with_data(inputs.signals_detectors)}"
        state = ConditionState.of(
            ConditionType.HEALTH_SIGNALS_AVAILABLE,
            True,
            "SourceAnswers",
            message,  # the detector list is bounded; the source's description is ours
        )
    else:
        message = f"{source}: {inputs.signals_error}"[:MAX_SIGNALS_MESSAGE]
        state = ConditionState.of(
            ConditionType.HEALTH_SIGNALS_AVAILABLE, False, "SourceUnavailable", message
        )
    return with_condition(job.status, state, inputs.now, job.metadata.generation)


def _with_data(detectors: tuple[str, ...] | None) -> str:
    """Which detectors have had data so far: the others have none (a framework that exports
    nothing for them, docs/frameworks.md)."""
    if detectors is None:
        return ""
    if not detectors:
        return "; no detector has data yet"
    return f"; detectors with data: {', '.join(detectors)}"


def _failed(job: RLJob, message: str, now: datetime, reason: str = "FailurePolicy") -> RLJobStatus:
    """A decided FailJob ends the job wherever it came from: phase Failed, the journal closed,
    and the children stopped as for any finished job. `reason`: FailurePolicy, or Kueue's
    FailedToStart for an admission its pods cannot take."""
    state = ConditionState.of("Failed", True, reason, message)
    status = with_condition(job.status, state, now, job.metadata.generation)
    return status.model_copy(
        update={
            "phase": JobPhase.FAILED,
            "completion_time": status.completion_time or now,
            "in_flight": None,
            "attempts": close_attempt(status.attempts, status.attempt or 1, FAIL_JOB_END, now),
        }
    )
