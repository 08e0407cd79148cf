"""One reconcile pass of one RLJob: parse -> pure plan -> adapters -> status -> events.

The Runtime owns the shared clients and the per-job workers; kopf handlers only feed it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog

from rljob.adapters.checkpoints import Checkpoints
from rljob.adapters.events import post_event
from rljob.adapters.kube import Kube, KubeError, connect
from rljob.adapters.leadership import Leadership
from rljob.adapters.metrics import MetricsSources
from rljob.adapters.observe import JobKey, observed_from
from rljob.adapters.paths import api_version_of, object_path
from rljob.api import (
    API_VERSION,
    KIND,
    ActionKind,
    FailureAction,
    FailureReason,
    InvalidRLJobError,
    JobPhase,
    RLJob,
    RLJobStatus,
    RoleName,
    parse_rljob,
)
from rljob.checkpoints.errors import StoreError
from rljob.crashpoints import crash_point
from rljob.health.evaluation import CHECKPOINT_STEP_EVIDENCE, Evaluation
from rljob.health.policy import Failure, decide
from rljob.health.termination import DISRUPTION_REASONS, CrashRepeatTracker
from rljob.health_scheduler import HealthScheduler, pods_by_role
from rljob.observability import (
    ACTION_LATENCY,
    CHECKPOINT_ERRORS,
    JOBS_BY_PHASE,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    RESTARTS,
    SPEC_REJECTIONS,
    TRAINER_STEP,
    TRAINER_STEP_RATE,
)
from rljob.reconcile.acceptance import invalid_spec_status, with_accepted
from rljob.reconcile.checkpoint_status import (
    AttemptCheckpoint,
    checkpoint_conditions,
    checkpoint_status,
    store_down,
    with_latest,
)
from rljob.reconcile.conditions import ConditionState, set_condition
from rljob.reconcile.events import REPORT_REPEAT_SECONDS, EventSpec
from rljob.reconcile.expectations import Recent, with_deletes_issued
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.plan import Plan, ReconcileExtras, reconcile, status_patch
from rljob.reconcile.progress import (
    ProgressReading,
    StepSample,
    engine_policy_env,
    progress_reading,
    step_rate,
    step_window,
    with_progress,
)
from rljob.reconcile.remediation import (
    TrainerRemedy,
    crash_findings,
    disrupted_serving_pods,
    failed_attempt,
    journal_serving_restart,
    journaled_event,
    pod_to_delete,
    remedy_for,
    remedy_for_finding,
    role_to_roll,
    settle_journal,
    stuck_pods,
)
from rljob.reconcile.requests import RestartOrder, mark_handled, pending_restart
from rljob.workers import JobWorkers

log = structlog.get_logger("rljob.controller")
_INDEXES = ("deployments_idx", "jobs_idx", "services_idx", "pods_idx")
_STALE_RETRY_SECONDS = 0.2
_STORE_RETRY_SECONDS = 15.0
_REJECTED_RETRY_SECONDS = 60.0
SIGNALS = "HealthSignalsAvailable"
RESTARTED_AT = "rljob.io/restarted-at"
RESTART_FIELD_MANAGER = "rljob-operator-restart"


@dataclass(frozen=True)
class RuntimeOptions:
    """How the operator process was started."""

    kubeconfig: str | None = None
    namespace: str | None = None
    resync_seconds: float = 300.0
    api_timeout: float = 10.0
    lease_namespace: str | None = None  # leader election on: the Lease lives there


# Tests only: stands in for "a new operator version renders templates differently".
RENDER_MARKER_ENV = "RLJOB_TEST_RENDER_MARKER"


_CRASH_PREFIXES = {
    ActionKind.RESTART_TRAINER_GANG: "gang-restart",
    ActionKind.RESTART_POD: "pod-restart",
    ActionKind.RESTART_ROLE: "role-restart",
}


def _remediate_trainer(
    job: RLJob, observed: Observed, now: dt.datetime
) -> tuple[RLJob, ReconcileExtras, TrainerRemedy | None]:
    """A failed trainer attempt through the failure policy (see reconcile.remediation)."""
    job = _with_status(job, settle_journal(job.status, observed, job.metadata.name))
    found = failed_attempt(job, observed) if job.status.in_flight is None else None
    extras = ReconcileExtras(policy_env=engine_policy_env(job))
    if found is None:
        return job, extras, None
    remedy = remedy_for(job, *found, now)
    if remedy.status is not None:
        job = _with_status(job, remedy.status)
    return job, replace(extras, trainer_hold=remedy.hold), remedy


def _failed_by_policy(
    status: RLJobStatus, remedy: TrainerRemedy, now: dt.datetime, job: RLJob
) -> RLJobStatus:
    state = ConditionState.of("Failed", True, "FailurePolicy", remedy.decision.message)
    return _with_condition(status, state, now, job)


def _count_restarts(body: dict[str, Any], status: RLJobStatus) -> None:
    """rljob_restarts_total for the restarts this write recorded (the ledger's new entries)."""
    before = ((body.get("status") or {}).get("restarts") or {}).get("total", 0)
    ledger = status.restarts
    if ledger is None or ledger.total <= before:
        return
    meta = body["metadata"]
    for record in ledger.recent[-(ledger.total - before) :]:
        RESTARTS.labels(meta["namespace"], meta["name"], record.reason.value, record.role.value,
                        record.action.value).inc()  # fmt: skip


def _observe_settled(body: dict[str, Any], status: RLJobStatus, now: dt.datetime) -> None:
    """rljob_action_latency_seconds for the journaled action this write completed."""
    before = (body.get("status") or {}).get("inFlight") or {}
    if not before or (status.in_flight is not None and status.in_flight.id == before.get("id")):
        return
    with contextlib.suppress(KeyError, ValueError):
        started = dt.datetime.fromisoformat(before["startedAt"].replace("Z", "+00:00"))
        ACTION_LATENCY.labels(before["kind"]).observe(max((now - started).total_seconds(), 0.0))


def _signals_condition(job: RLJob, error: str | None, now: dt.datetime) -> RLJobStatus:
    """HealthSignalsAvailable: False (no restart from metrics) while the source fails."""
    if error is None:
        state = ConditionState.of(SIGNALS, True, "SourceAnswers", "the metrics source answers")
    else:
        state = ConditionState.of(SIGNALS, False, "SourceUnavailable", error[:200])
    return _with_condition(job.status, state, now, job)


def _with_status(job: RLJob, status: RLJobStatus) -> RLJob:
    return job.model_copy(update={"status": status})


def _with_condition(
    status: RLJobStatus, state: ConditionState, now: dt.datetime, job: RLJob
) -> RLJobStatus:
    conditions = set_condition(status.conditions or [], state, now, job.metadata.generation)
    return status.model_copy(update={"conditions": conditions})


def _with_render_marker(body: dict[str, Any]) -> dict[str, Any]:
    marker = os.environ.get(RENDER_MARKER_ENV)
    template = body.get("spec", {}).get("template")
    if not marker or template is None:
        return body
    template.setdefault("metadata", {}).setdefault("annotations", {})["rljob.io/render-marker"] = (
        marker
    )
    return body


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)  # status times in whole seconds


@dataclass(frozen=True)
class _Decided:
    """What one pass decided: `events` follow from the status it writes (posted only once that
    write happens), `reports` are said once per crash or throttled per finding (posted whether
    or not it writes)."""

    job: RLJob
    observed: Observed
    plan: Plan
    events: list[EventSpec]
    reports: list[EventSpec]
    order: RestartOrder | None


class Runtime:
    """Shared clients, the child indexes and the per-job workers of one operator process."""

    def __init__(self, kube: Kube, options: RuntimeOptions, leadership: Leadership) -> None:
        self.kube = kube
        self.leadership = leadership
        self.checkpoints = Checkpoints(timeout=options.api_timeout)
        self.options = options
        self.workers = JobWorkers(self.run_pass, resync_seconds=options.resync_seconds)
        self._indexes: dict[str, Mapping[Any, Iterable[Any]]] = {}
        self._written: dict[str, dict[str, Any]] = {}  # uid -> last status we wrote
        self._phases: dict[str, str] = {}
        self._crash_trackers: dict[str, CrashRepeatTracker] = {}
        self._findings: dict[JobKey, list[Evaluation]] = {}
        self._saved_steps: dict[JobKey, int] = {}  # the trainer's checkpoint-step metric
        self._listed: dict[JobKey, int] = {}  # the saved step we last listed the store for
        self._step_windows: dict[JobKey, list[StepSample]] = {}
        self._progress: dict[JobKey, ProgressReading] = {}  # the latest health round's
        self._disruptions_reported: dict[JobKey, set[str]] = {}  # pod uids
        self._reported = Recent(REPORT_REPEAT_SECONDS)  # "ns/job/reason/target" of reports
        self._deletes_issued = Recent()  # uids: the watch may not show them deleting yet
        self._journal_posted = Recent()  # a journaled action's Event names
        self.health = HealthScheduler(MetricsSources(), self._on_health)
        self._health_task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, options: RuntimeOptions) -> Runtime:
        api = await connect(options.kubeconfig)
        leadership = Leadership(api, options.lease_namespace)
        runtime = cls(
            Kube(api, timeout=options.api_timeout, may_write=leadership.acting),
            options,
            leadership,
        )
        runtime.leadership.start(runtime._elected)
        runtime._health_task = asyncio.create_task(runtime.health.run(), name="rljob:health")
        return runtime

    async def _on_health(self, key: JobKey, evaluations: list[Evaluation]) -> None:
        """One health round of a job: keep its findings for its next pass, and wake it."""
        self._note_saved_step(key, evaluations)
        reading = progress_reading(evaluations)
        self._progress[key] = reading
        if reading.step is not None:
            self._export_step(key, StepSample(reading.step, time.time()))
        findings = [e for e in evaluations if e.is_finding]
        if findings or key in self._findings:
            self._findings[key] = findings
            self.workers.wake(key)

    async def _elected(self) -> None:
        self.workers.wake_all()  # a standby that takes over acts on every job at once

    def _export_step(self, key: JobKey, sample: StepSample) -> None:
        """rljob_job_trainer_step and its rate over the last few minutes."""
        window = step_window(self._step_windows.get(key, []), sample)
        self._step_windows[key] = window
        TRAINER_STEP.labels(*key).set(sample.step)
        rate = step_rate(window)
        if rate is not None:
            TRAINER_STEP_RATE.labels(*key).set(rate)

    def _forget_metrics(self, key: JobKey) -> None:
        self._step_windows.pop(key, None)
        for gauge in (TRAINER_STEP, TRAINER_STEP_RATE):
            with contextlib.suppress(KeyError):
                gauge.remove(*key)

    def _note_saved_step(self, key: JobKey, evaluations: list[Evaluation]) -> None:
        """The trainer's checkpoint-step metric: a new save wakes the job to refresh latest."""
        steps = [e.evidence.get(CHECKPOINT_STEP_EVIDENCE) for e in evaluations]
        saved = max((int(s) for s in steps if isinstance(s, int | float)), default=None)
        if saved is not None and self._saved_steps.get(key) != saved:
            self._saved_steps[key] = saved
            self.workers.wake(key)

    async def _refresh_latest(self, job: RLJob, now: dt.datetime) -> RLJob:
        """Lists the store only when the trainer reported a save newer than status knows."""
        key = (job.metadata.namespace or "", job.metadata.name)
        saved = self._saved_steps.get(key)
        latest = job.status.checkpoint.latest if job.status.checkpoint else None
        if saved is None or job.spec.checkpoint is None or self._listed.get(key) == saved:
            return job
        if latest is not None and latest.step >= saved:
            return job
        self._listed[key] = saved
        try:
            ref = await self.checkpoints.newest(job, now)
        except StoreError as exc:
            CHECKPOINT_ERRORS.labels(kind=type(exc).__name__).inc()
            self._listed.pop(key, None)  # try again on the next report
            return job
        if ref is None:
            return job
        return _with_status(
            job,
            job.status.model_copy(update={"checkpoint": with_latest(job.status.checkpoint, ref)}),
        )

    async def stop(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
        await self.leadership.stop()
        await self.workers.stop()
        await self.kube.close()

    def bind_indexes(self, kwargs: Mapping[str, Any]) -> None:
        """kopf hands its indexes to handlers only; keep a reference for the workers."""
        if not self._indexes:
            self._indexes = {name: kwargs[name] for name in _INDEXES if name in kwargs}

    def observed(self, key: JobKey) -> Observed:
        def values(name: str) -> list[Any]:
            index = self._indexes.get(name)
            return list(index.get(key, ())) if index is not None else []

        children: list[ObservedChild] = [
            *values("deployments_idx"),
            *values("jobs_idx"),
            *values("services_idx"),
        ]
        pods: list[ObservedPod] = values("pods_idx")
        return observed_from(children, pods)

    async def run_pass(self, body: dict[str, Any]) -> float | None:
        if not self.leadership.acting():
            return None  # a standby observes and waits; the leader acts
        meta = body["metadata"]
        bound = log.bind(namespace=meta["namespace"], name=meta["name"])
        with RECONCILE_SECONDS.time():
            try:
                return await self._reconcile(body)
            except InvalidRLJobError as exc:
                SPEC_REJECTIONS.labels(reason="InvalidSpec").inc()
                await self._write_status(body, invalid_spec_status(body, exc.violations, _now()))
                bound.warning("invalid spec", violations=[str(v) for v in exc.violations])
                return None
            except KubeError as exc:
                if exc.conflict:  # our copy of the RLJob was stale: the fresh one is on its way
                    return _STALE_RETRY_SECONDS
                if exc.namespace_terminating:  # the job goes with its namespace: nothing to do
                    bound.info("namespace is being deleted; not acting", error=exc.message)
                    return _REJECTED_RETRY_SECONDS
                if exc.status in (400, 422):  # a child the API rejects: say so, retry slowly
                    await self._report_rejection(body, exc.message)
                    bound.warning("child rejected by the API", error=exc.message)
                    return _REJECTED_RETRY_SECONDS
                RECONCILE_ERRORS.labels(kind=f"api_{exc.status}").inc()
                bound.warning("API call failed; retrying", status=exc.status, error=exc.message)
                raise

    async def _reconcile(self, body: dict[str, Any]) -> float | None:
        now = _now()
        decided = await self._decide(parse_rljob(body), now)
        job, plan, events = decided.job, decided.plan, decided.events
        # Status first, guarded by resourceVersion: what we are about to do is recorded before
        # we do it, and a stale copy of the job can never act twice.
        wrote = await self._write_status(body, with_accepted(plan.status, job, now))
        if wrote:
            _count_restarts(body, plan.status)
            _observe_settled(body, plan.status, now)
        await self._act(body, job, plan, decided.observed, now)
        events += plan.events
        if decided.order is not None:
            events.append(await self._carry_out(job, decided.order))
        if not (wrote or plan.apply or plan.delete):
            events = []  # a repeated pass (our write not yet seen) repeats no status-derived Event
        for event in events + decided.reports:
            await post_event(self.kube, body, event, now)
        meta = body["metadata"]
        self._count_phase(meta["uid"], plan.status.phase)
        if plan.delete_job:
            await self.kube.delete(API_VERSION, KIND, meta["namespace"], meta["name"], meta["uid"])
        return plan.requeue_after

    async def _decide(self, job: RLJob, now: dt.datetime) -> _Decided:
        """Everything this pass will do, as a plan and a status (no Kubernetes writes yet)."""
        key = (job.metadata.namespace or "", job.metadata.name)
        order = pending_restart(job.metadata.annotations, job.status)
        if order is not None:
            job = _with_status(job, mark_handled(job.status, order, now))
        job, events = await self._continue_attempts(job)
        job = await self._refresh_latest(job, now)
        job = _with_status(job, with_progress(job.status, self._progress.get(key), now))
        issued = self._deletes_issued.current(time.monotonic())
        observed = with_deletes_issued(self.observed(key), issued)
        job, extras, remedy = _remediate_trainer(job, observed, now)
        job, crash_reports = self._remediate_pods(job, observed, now)
        job, health_reports = self._act_on_health(job, observed, now)
        plan: Plan = reconcile(job, observed, now, extras)
        if any(child.kind == "Job" for child in plan.apply) and job.spec.checkpoint is not None:
            job, plan, checkpoint_events = await self._start_attempt(
                job, observed, plan, extras, now
            )
            events += checkpoint_events
        if remedy is not None and remedy.decision.action == FailureAction.FAIL_JOB:
            events.append(EventSpec("Warning", "FailJob", remedy.decision.message))
            plan = replace(plan, status=_failed_by_policy(plan.status, remedy, now, job))
        return _Decided(job, observed, plan, events, crash_reports + health_reports, order)

    async def _act(
        self, body: dict[str, Any], job: RLJob, plan: Plan, observed: Observed, now: dt.datetime
    ) -> None:
        """The plan's side effects, each idempotent (uid preconditions, deterministic names),
        with the crash points of a journaled gang restart between them."""
        meta = body["metadata"]
        journaled = journaled_event(plan.status)
        action = plan.status.in_flight
        gang = action is not None and action.kind == ActionKind.RESTART_TRAINER_GANG
        if journaled is not None and action is not None:
            crash_point(f"{_CRASH_PREFIXES[action.kind]}:journaled")
            name = f"{meta['name']}.{journaled[0]}"
            posted = f"{meta['namespace']}/{name}"
            if posted not in self._journal_posted.current(time.monotonic()):
                await post_event(self.kube, body, journaled[1], now, name=name)
                self._journal_posted.add(posted, time.monotonic())
        for doomed in plan.delete:
            kind = doomed.kind
            await self.kube.delete(
                api_version_of(kind), kind, meta["namespace"], doomed.name, doomed.uid
            )
            self._deletes_issued.add(doomed.uid, time.monotonic())
        if plan.delete and gang:
            crash_point("gang-restart:old-job-deleted")
        victim = pod_to_delete(plan.status, observed)
        if victim is not None:
            await self.kube.delete("v1", "Pod", meta["namespace"], victim.name, victim.uid)
            self._deletes_issued.add(victim.uid, time.monotonic())
            crash_point("pod-restart:pod-deleted")
        rolling = role_to_roll(plan.status)
        if rolling is not None:
            await self._roll(meta["namespace"], *rolling)
            crash_point("role-restart:rolled")
        await self._force_delete(body, _with_status(job, plan.status), observed, now)
        await self._report_disruptions(body, observed, now)
        for child in plan.apply:
            await self.kube.apply(_with_render_marker(child.body))
        if gang and any(c.kind == "Job" for c in plan.apply):
            crash_point("gang-restart:new-job-created")

    async def _force_delete(
        self, body: dict[str, Any], job: RLJob, observed: Observed, now: dt.datetime
    ) -> None:
        """Old attempts' pods stuck terminating past teardownTimeout (their node no longer
        confirms deletions) are force-deleted, each with a Warning Event, so the next attempt
        can start; the attempt never overlaps a live old pod before that."""
        meta = body["metadata"]
        for pod in stuck_pods(job, observed, now):
            await self.kube.delete(
                "v1", "Pod", meta["namespace"], pod.name, pod.uid, grace_period_seconds=0
            )
            timeout = job.spec.failure_policy.teardown_timeout
            message = (
                f"pod {pod.name} on node {pod.node or '?'} still terminating after {timeout} "
                "(teardownTimeout): force-deleted"
            )
            event = EventSpec("Warning", "PodForceDeleted", message)
            await post_event(self.kube, body, event, now, name=f"{meta['name']}.force-{pod.uid}")

    async def _report_disruptions(
        self, body: dict[str, Any], observed: Observed, now: dt.datetime
    ) -> None:
        """One Event per disrupted serving pod (its ReplicaSet replaces it)."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        reported = self._disruptions_reported.get(key, set())
        current = disrupted_serving_pods(observed)
        for pod in current:
            if pod.uid in reported:
                continue
            reason = DISRUPTION_REASONS.get(pod.disruption, FailureReason.EVICTED).value
            message = (
                f"{pod.role} pod {pod.name} on {pod.node or 'no node'}: {pod.disruption}: "
                f"{pod.disruption_message} (replaced by its Deployment; not counted)"
            )[:1000]
            name = f"{meta['name']}.disrupted-{pod.uid}"
            await post_event(self.kube, body, EventSpec("Warning", reason, message), now, name=name)
            reported.add(pod.uid)
        self._disruptions_reported[key] = reported & {pod.uid for pod in current}

    async def _roll(self, namespace: str, deployment: str, nonce: str) -> None:
        """Rolls a Deployment the way `kubectl rollout restart` does, under a field manager of
        its own so that our server-side applies leave the annotation alone; the same nonce
        twice is a no-op."""
        patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: nonce}}}}}
        await self.kube.request(
            "patch",
            object_path("apps/v1", "Deployment", namespace, deployment),
            patch,
            content_type="application/merge-patch+json",
            field_manager=RESTART_FIELD_MANAGER,
        )

    def _act_on_health(
        self, job: RLJob, observed: Observed, now: dt.datetime
    ) -> tuple[RLJob, list[EventSpec]]:
        """Registers the job with the health scheduler and acts on its latest findings through
        the policy: an engine restart or a trainer gang restart, journaled like any other; a
        finding it only reports is said again at most every 10 minutes."""
        key = (job.metadata.namespace or "", job.metadata.name)
        if job.spec.suspend or job.status.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
            self.health.forget(key)
            self._findings.pop(key, None)
            self._progress.pop(key, None)
            self._forget_metrics(key)
            return job, []
        self.health.register(job, pods_by_role(observed.pods))
        job = _with_status(job, _signals_condition(job, self.health.source_error(key), now))
        findings = self._findings.pop(key, [])
        if not findings or job.status.in_flight is not None:
            return job, []
        finding = findings[0]
        remedy = remedy_for_finding(job, observed, finding, now)
        if remedy.status is not None:
            job = _with_status(job, remedy.status)
            role, pod = remedy.restarted
            self.health.note_restart(key, role, pod, now.timestamp())
        said = f"{key[0]}/{key[1]}/{finding.reason or ''}/{finding.target}"
        if remedy.events and self._reported.admit(said, now.timestamp()):
            return job, list(remedy.events)
        return job, []

    def _remediate_pods(
        self, job: RLJob, observed: Observed, now: dt.datetime
    ) -> tuple[RLJob, list[EventSpec]]:
        """Serving pods that keep crashing in place (OOMKilled, CrashLoop): the policy decides;
        a pod restart is journaled with the ledger before the pod is deleted."""
        tracker = self._crash_trackers.setdefault(job.metadata.uid or "", CrashRepeatTracker())
        findings = crash_findings(tracker, observed, now)
        if not findings or job.status.in_flight is not None:
            return job, []
        pod, evaluation = findings[0]
        reason = evaluation.reason or FailureReason.CRASH_LOOP
        failure = Failure(reason, RoleName(pod.role), pod.name, pod.exit_code, evaluation.message)
        decision = decide(failure, job.spec.failure_policy, job.status.restarts, now)
        serving = journal_serving_restart(job, decision, pod, now)
        if serving is not None:
            return _with_status(job, serving), []
        return job, [EventSpec("Warning", decision.reason.value, decision.message)]

    async def _continue_attempts(self, job: RLJob) -> tuple[RLJob, list[EventSpec]]:
        """A new RLJob of an old name continues attempt numbers after the highest marker, so the
        old name's checkpoints are fenced by the same lineage rule."""
        if job.status.attempt is not None or job.spec.checkpoint is None:
            return job, []
        try:
            first = await self.checkpoints.first_attempt(job)
        except StoreError:
            return job, []  # the attempt start below reports the outage and waits
        if first <= 1:
            return job, []
        message = (
            f"checkpoints of an earlier {job.metadata.name} exist: continuing at attempt {first}"
        )
        continued = _with_status(job, job.status.model_copy(update={"attempt": first}))
        return continued, [EventSpec("Normal", "AttemptsContinued", message)]

    async def _start_attempt(
        self,
        job: RLJob,
        observed: Observed,
        plan: Plan,
        extras: ReconcileExtras,
        now: dt.datetime,
    ) -> tuple[RLJob, Plan, list[EventSpec]]:
        """Before a trainer attempt's Job is created: its marker and its resume checkpoint.
        With the store down the attempt waits (the other children still reconcile)."""
        attempt = plan.status.attempt or 1
        try:
            start = await self.checkpoints.start_attempt(job, attempt, now)
            crash_point("attempt:marker-written")
        except StoreError as exc:
            CHECKPOINT_ERRORS.labels(kind=type(exc).__name__).inc()
            status = _with_condition(plan.status, store_down(attempt, str(exc)), now, job)
            if not job.status.attempts:  # nothing started: the attempt number is not settled
                status = status.model_copy(update={"attempt": job.status.attempt, "attempts": []})
            waiting = tuple(child for child in plan.apply if child.kind != "Job")
            plan = replace(plan, apply=waiting, status=status, requeue_after=_STORE_RETRY_SECONDS)
            return job, plan, []
        outcome = AttemptCheckpoint(
            start.attempt,
            start.resumed_from,
            start.capabilities,
            start.problem,
            start.retention_problem,
        )
        checkpoint = checkpoint_status(job.status.checkpoint, outcome)
        job = _with_status(job, job.status.model_copy(update={"checkpoint": checkpoint}))
        plan = reconcile(job, observed, now, replace(extras, resume_env=start.resume_env))
        status = plan.status
        for state in checkpoint_conditions(job.status.conditions or [], outcome):
            status = _with_condition(status, state, now, job)
        return job, replace(plan, status=status), list(start.events)

    async def _carry_out(self, job: RLJob, order: RestartOrder) -> EventSpec:
        """A trainer restart is already in the plan (attempt + 1); a serving role is rolled."""
        if order.gang:
            return EventSpec(
                "Normal",
                "RestartRequested",
                f"trainer gang restart {order.nonce}: attempt {job.status.attempt}",
            )
        if getattr(job.spec.roles, order.role.value) is None:
            return EventSpec(
                "Warning",
                "RestartRequested",
                f"no {order.role.value} role to restart ({order.nonce})",
            )
        meta = job.metadata
        await self._roll(meta.namespace or "", f"{meta.name}-{order.role.value}", order.nonce)
        return EventSpec(
            "Normal", "RestartRequested", f"rolling {order.role.value} ({order.nonce})"
        )

    async def _report_rejection(self, body: dict[str, Any], message: str) -> None:
        job = parse_rljob(body)
        state = ConditionState.of("Degraded", True, "ChildRejected", message)
        await self._write_status(body, _with_condition(job.status, state, _now(), job))

    async def _write_status(self, body: dict[str, Any], status: RLJobStatus) -> bool:
        """Patches status only when it differs from both the observed and our last write, and
        only while this replica still holds the lease."""
        if not self.leadership.acting():
            raise KubeError(0, "no longer the leader")
        meta = body["metadata"]
        observed = RLJobStatus.model_validate(body.get("status") or {})
        patch = status_patch(observed, status)
        if patch is None or self._written.get(meta["uid"]) == patch:
            return False
        updated = await self.kube.patch_status(
            meta["namespace"], meta["name"], patch, resource_version=meta.get("resourceVersion")
        )
        self._written[meta["uid"]] = patch
        self.workers.refresh(updated)
        return True

    def _count_phase(self, uid: str, phase: object) -> None:
        new = str(getattr(phase, "value", phase) or "Pending")
        old = self._phases.get(uid)
        if old == new:
            return
        if old is not None:
            JOBS_BY_PHASE.labels(phase=old).dec()
        JOBS_BY_PHASE.labels(phase=new).inc()
        self._phases[uid] = new
