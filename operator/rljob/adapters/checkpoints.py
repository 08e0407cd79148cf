"""The operator's side of versioned checkpoints. An attempt's start is gather -> plan -> journal
-> execute: `gather_attempt` reads the store (markers, resume candidates, the retention listing),
rljob.checkpoints.attempt_plan decides, the runtime journals the plan, then `write_marker` and
`apply_retention` carry it out. Every S3 call runs off the event loop under a deadline
(AsyncCheckpointStore); an unreachable store raises StoreError before anything is written, and
retention's trouble comes back as a message, never as an exception."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from rljob.api import Checkpoint, CheckpointRef, RLJob, StoreCapabilities, parse_duration
from rljob.checkpoint_protocol.errors import StoreError
from rljob.checkpoint_protocol.layout import CheckpointLocation, DefaultStore, VersionId
from rljob.checkpoint_protocol.models import AttemptMarker
from rljob.checkpoint_protocol.s3 import Capabilities, ClientCache, StoreCredentials, StoreEndpoint
from rljob.checkpoints.attempt_plan import (
    AttemptInputs,
    CandidateCheck,
    discovery_lineage,
    missed_newer,
    needs_discovery,
    pinned_version,
    plan_attempt_start,
    recorded_choice,
    retention_lineage,
    with_journaled_markers,
)
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.retention import RetentionPlan
from rljob.checkpoints.s3 import AsyncCheckpointStore, OperatorStore
from rljob.checkpoints.selection import checkpoint_ref
from rljob.observability import CHECKPOINT_SAVED, CHECKPOINT_STEP, JOB_SERIES
from rljob.reconcile.events import EventSpec


@dataclass(frozen=True)
class AttemptStart:
    """What the next trainer attempt starts with, and what the user should be told."""

    attempt: int
    resume_env: dict[str, str] = field(default_factory=dict)
    resumed_from: CheckpointRef | None = None
    capabilities: StoreCapabilities | None = None
    events: tuple[EventSpec, ...] = ()
    problem: str = ""  # why a newer version was not used ("" when none was skipped)
    retention_problem: str = ""  # why retention could not be planned or a delete failed, else ""


def endpoint_from_spec(
    spec: Checkpoint, credentials: StoreCredentials | None = None, ca_bundle: str | None = None
) -> StoreEndpoint:
    """The store endpoint a job's spec.checkpoint names (the protocol knows no RLJob types)."""
    return StoreEndpoint(
        url=spec.endpoint,
        region=spec.region,
        addressing_style=str(spec.addressing_style.value),
        credentials=credentials,
        ca_bundle=ca_bundle,
    )


def status_capabilities(probed: Capabilities) -> StoreCapabilities:
    """A capability probe's result as the RLJob's status records it."""
    return StoreCapabilities(
        conditional_writes=probed.conditional_writes, probed_at=probed.probed_at
    )


class Checkpoints:
    """One shared client per (endpoint, region, credentials); the operator's own identity."""

    def __init__(
        self,
        timeout: float = 10.0,
        default: StoreEndpoint | None = None,
        *,
        clients: ClientCache | None = None,
    ) -> None:
        self._clients = clients or ClientCache()
        self._default = default or StoreEndpoint.from_env()
        self._timeout = timeout

    @property
    def default_endpoint(self) -> str | None:
        """The operator's configured S3 endpoint for jobs that name none (None: AWS)."""
        return self._default.url

    @property
    def defaults(self) -> DefaultStore:
        """What a job that names no endpoint gets: the same for its trainers as for the operator."""
        return DefaultStore(self._default.url, self._default.region)

    def location(self, job: RLJob) -> CheckpointLocation | None:
        spec = job.spec.checkpoint
        meta = job.metadata
        if spec is None:
            return None
        return CheckpointLocation.from_uri(spec.uri, meta.namespace or "", meta.name)

    def store(self, job: RLJob) -> AsyncCheckpointStore | None:
        location, spec = self.location(job), job.spec.checkpoint
        if location is None or spec is None:
            return None
        endpoint = endpoint_from_spec(spec, credentials=self._default.credentials)
        url, region = self.defaults.resolve(endpoint.url, endpoint.region)
        endpoint = replace(endpoint, url=url, region=region)
        sync = OperatorStore(location, endpoint, clients=self._clients)
        return AsyncCheckpointStore(sync, timeout=self._timeout)

    async def first_attempt(self, job: RLJob) -> int:
        """1 for a new name; a new RLJob of an old name continues after the highest marker;
        this very RLJob's own newest marker (written before a crash kept status from recording
        it) is that attempt again, not a reason for the next."""
        store = self.store(job)
        if store is None:
            return 1
        following = await store.next_attempt()
        markers = await store.read_markers()
        own = [a for a, m in markers.items() if m.job_uid and m.job_uid == job.metadata.uid]
        return max(own) if own and max(own) == following - 1 else following

    async def gather_attempt(
        self, job: RLJob, attempt: int, journaled_version: str | None, now: dt.datetime
    ) -> AttemptInputs:
        """Everything attempt's start is decided from, read-only (the capability probe writes
        and deletes a scratch object once per endpoint, outside the protocol's keys). Raises
        StoreError when the markers or the resume candidates cannot be read; a failed retention
        listing is kept in the inputs. ValueError: the job keeps no checkpoints."""
        store, location, spec = self.store(job), self.location(job), job.spec.checkpoint
        if store is None or location is None or spec is None:
            raise ValueError(f"{job.metadata.name} has no spec.checkpoint")
        capabilities = status_capabilities(await store.probe_capabilities())
        markers = await self._markers(job, store, location)
        inputs = AttemptInputs(
            location=location,
            attempt=attempt,
            now=now,
            job_uid=job.metadata.uid,
            resume=spec.resume,
            keep=spec.keep,
            incomplete_grace=dt.timedelta(seconds=parse_duration(spec.incomplete_grace)),
            markers=markers,
            capabilities=capabilities,
            journaled=journaled_version,
        )
        inputs = await self._chosen_and_retention(job, store, inputs, spec.keep)
        if missed_newer(inputs):  # a lagging listing hid a newer version from the choice: once
            inputs = await self._chosen_and_retention(job, store, inputs, spec.keep)
        return inputs

    async def _chosen_and_retention(
        self, job: RLJob, store: AsyncCheckpointStore, inputs: AttemptInputs, keep: int
    ) -> AttemptInputs:
        """The resume candidates read, then retention's listing under the lineage they give."""
        inputs = replace(inputs, candidates=await self._candidates(job, store, inputs))
        try:  # retention never blocks an attempt: its listing's failure is only reported
            listing = await store.retention_listing(retention_lineage(inputs), keep=keep)
        except StoreError as exc:
            return replace(inputs, retention=None, retention_error=f"retention not planned: {exc}")
        return replace(inputs, retention=listing, retention_error="")

    async def _candidates(
        self, job: RLJob, store: AsyncCheckpointStore, inputs: AttemptInputs
    ) -> tuple[CandidateCheck, ...]:
        recorded = recorded_choice(inputs.markers, inputs.attempt, inputs.job_uid, inputs.journaled)
        if recorded is not None:  # an earlier try's choice is kept; checked for status only
            return () if recorded.version is None else (await store.recheck(recorded.version),)
        if not needs_discovery(inputs.resume, inputs.attempt, inputs.markers):
            return ()
        return await store.resume_candidates(
            discovery_lineage(inputs.markers, inputs.attempt),
            history=[VersionId.parse(ref.version) for ref in _history(job)],
            pinned=pinned_version(inputs.resume),
        )

    @staticmethod
    async def _markers(
        job: RLJob, store: AsyncCheckpointStore, location: CheckpointLocation
    ) -> dict[int, AttemptMarker]:
        """The store's markers, filled in from status where a lagging listing misses one."""
        listed = await store.read_markers()
        return with_journaled_markers(listed, job.status.attempts, location, job.metadata.uid)

    async def write_marker(self, job: RLJob, marker: AttemptMarker) -> None:
        """Writes the attempt's marker; an existing one of this job is left as is. Raises
        StoreError (PreconditionFailed: the marker belongs to another job uid)."""
        store = self.store(job)
        if store is not None:
            await store.write_marker(marker)

    async def apply_retention(self, job: RLJob, deletions: RetentionPlan) -> str:
        """Carries out retention's deletions: "" when done, else what went wrong (a refused
        delete, object lock, permissions, the store unreachable). Never raises StoreError."""
        store = self.store(job)
        if store is None or deletions.empty:
            return ""
        try:
            result = await store.apply_retention(deletions)
        except StoreError as exc:
            return f"retention: {exc}"
        return "" if result.ok else result.message()

    async def start_attempt(self, job: RLJob, attempt: int, now: dt.datetime) -> AttemptStart:
        """gather -> plan -> marker -> retention in one call, for callers without a journal."""
        if job.spec.checkpoint is None:
            return AttemptStart(attempt)
        plan = plan_attempt_start(await self.gather_attempt(job, attempt, None, now))
        await self.write_marker(job, plan.marker)
        applied = await self.apply_retention(job, plan.retention)
        if plan.resumed_from is not None:
            self._export(job, plan.resumed_from, saved=False)
        return AttemptStart(
            attempt,
            resume_env=dict(plan.resume_env),
            resumed_from=plan.resumed_from,
            capabilities=plan.capabilities,
            events=tuple(EventSpec(*event) for event in plan.events),
            problem=plan.problem,
            retention_problem="; ".join(p for p in (plan.retention_problem, applied) if p),
        )

    async def newest(self, job: RLJob, now: dt.datetime) -> CheckpointRef | None:
        """The newest eligible valid version of the current attempt's lineage (one pointer read
        and one listing after it): asked for only when the trainer reports a new save."""
        store, location = self.store(job), self.location(job)
        if store is None or location is None:
            return None
        markers = await self._markers(job, store, location)
        lineage = Lineage(
            job.status.attempt or 1, {m.attempt: m.resumed_from_step for m in markers.values()}
        )
        history = [VersionId.parse(ref.version) for ref in _history(job)]
        chosen = (await store.discover(lineage, history=history)).chosen
        if chosen is None:
            return None
        ref = checkpoint_ref(location, chosen, validated_at=now)
        self._export(job, ref)
        return ref

    def _export(self, job: RLJob, ref: CheckpointRef, *, saved: bool = True) -> None:
        key = (job.metadata.namespace or "", job.metadata.name)
        JOB_SERIES.set(key, CHECKPOINT_STEP, ref.step)
        if saved and ref.saved_at is not None:
            JOB_SERIES.set(key, CHECKPOINT_SAVED, ref.saved_at.timestamp())


def _history(job: RLJob) -> list[CheckpointRef]:
    checkpoint = job.status.checkpoint
    return [] if checkpoint is None else list(checkpoint.history)
