"""The operator's side of versioned checkpoints: before a trainer attempt starts, write its
attempt marker and pick the version it resumes from; then apply retention. Every S3 call runs
off the event loop under a deadline (AsyncCheckpointStore); S3 trouble raises StoreError and
never deletes anything."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from rljob.api import CheckpointRef, RLJob, StoreCapabilities, parse_duration
from rljob.checkpoints.layout import CheckpointLocation, VersionId, resume_env
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.models import AttemptMarker
from rljob.checkpoints.s3 import (
    AsyncCheckpointStore,
    CheckpointStore,
    ClientCache,
    StoreEndpoint,
)
from rljob.checkpoints.selection import checkpoint_ref
from rljob.checkpoints.validity import Validity
from rljob.observability import CHECKPOINT_SAVED, CHECKPOINT_STEP
from rljob.reconcile.events import EventSpec

RESUME_LATEST = "Latest"
RESUME_NONE = "None"


@dataclass(frozen=True)
class AttemptStart:
    """What the next trainer attempt starts with, and what the user should be told."""

    attempt: int
    resume_env: dict[str, str] = field(default_factory=dict)
    resumed_from: CheckpointRef | None = None
    capabilities: StoreCapabilities | None = None
    events: tuple[EventSpec, ...] = ()
    problem: str = ""  # why a newer version was not used ("" when none was skipped)
    retention_problem: str = ""  # a delete that failed (object lock, permissions), else ""


class Checkpoints:
    """One shared client per (endpoint, region, credentials); the operator's own identity."""

    def __init__(self, timeout: float = 10.0, default: StoreEndpoint | None = None) -> None:
        self._clients = ClientCache()
        self._default = default or StoreEndpoint.from_env()
        self._timeout = timeout

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
        endpoint = StoreEndpoint.from_spec(spec, credentials=self._default.credentials)
        if endpoint.url is None and self._default.url is not None:
            endpoint = StoreEndpoint(self._default.url, endpoint.region or self._default.region,
                                     endpoint.addressing_style, endpoint.credentials)  # fmt: skip
        sync = CheckpointStore(location, endpoint, clients=self._clients)
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

    async def start_attempt(self, job: RLJob, attempt: int, now: dt.datetime) -> AttemptStart:
        """Discovers the version to resume from, then writes the attempt's marker."""
        store, location = self.store(job), self.location(job)
        if store is None or location is None:
            return AttemptStart(attempt)
        capabilities = await store.probe_capabilities()
        markers = await store.read_markers()
        chosen, events, problem = await self._choose(job, store, markers, attempt)
        marker = AttemptMarker(
            job=job.metadata.name,
            namespace=job.metadata.namespace,
            job_uid=job.metadata.uid,
            attempt=attempt,
            started_at=now,
            resumed_from_step=None if chosen is None else chosen.version.step,
            resumed_from_version=None if chosen is None else chosen.version.name,
        )
        await store.write_marker(marker)
        markers[attempt] = marker
        retention = await self._retain(job, store, markers, attempt, chosen)
        if chosen is None:
            return AttemptStart(
                attempt, capabilities=capabilities, events=events, problem=problem,
                retention_problem=retention,
            )  # fmt: skip
        ref = checkpoint_ref(location, chosen, validated_at=now)
        CHECKPOINT_STEP.labels(namespace=job.metadata.namespace, job=job.metadata.name).set(
            ref.step
        )
        return AttemptStart(
            attempt,
            resume_env=resume_env(location, chosen.version),
            resumed_from=ref,
            capabilities=capabilities,
            events=(*events, _resuming(attempt, ref)),
            problem=problem,
            retention_problem=retention,
        )

    async def _retain(
        self,
        job: RLJob,
        store: AsyncCheckpointStore,
        markers: dict[int, AttemptMarker],
        attempt: int,
        in_use: Validity | None,
    ) -> str:
        """Retention under the lineage that now includes this attempt's marker."""
        spec = job.spec.checkpoint
        if spec is None:
            return ""
        lineage = Lineage(attempt, {m.attempt: m.resumed_from_step for m in markers.values()})
        plan = await store.plan_retention(
            lineage,
            keep=spec.keep,
            incomplete_grace=dt.timedelta(seconds=parse_duration(spec.incomplete_grace)),
            in_use=() if in_use is None else (in_use.version,),
        )
        result = await store.apply_retention(plan)
        return "" if result.ok else result.message()

    async def newest(self, job: RLJob, now: dt.datetime) -> CheckpointRef | None:
        """The newest eligible valid version of the current attempt's lineage (one pointer read
        and one listing after it): asked for only when the trainer reports a new save."""
        store, location = self.store(job), self.location(job)
        if store is None or location is None:
            return None
        markers = await store.read_markers()
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

    def _export(self, job: RLJob, ref: CheckpointRef) -> None:
        labels = {"namespace": job.metadata.namespace, "job": job.metadata.name}
        CHECKPOINT_STEP.labels(**labels).set(ref.step)
        if ref.saved_at is not None:
            CHECKPOINT_SAVED.labels(**labels).set(ref.saved_at.timestamp())

    async def _choose(
        self,
        job: RLJob,
        store: AsyncCheckpointStore,
        markers: dict[int, AttemptMarker],
        attempt: int,
    ) -> tuple[Validity | None, tuple[EventSpec, ...], str]:
        spec = job.spec.checkpoint
        if spec is None or spec.resume == RESUME_NONE or (attempt <= 1 and not markers):
            return None, (), ""
        existing = markers.get(attempt)
        if existing is not None:  # a retry of this attempt's start: keep what it chose then
            if existing.resumed_from_version is None:
                return None, (), ""
            return await store.validate(VersionId.parse(existing.resumed_from_version)), (), ""
        lineage = Lineage(attempt - 1, {m.attempt: m.resumed_from_step for m in markers.values()})
        pinned = None if spec.resume == RESUME_LATEST else VersionId.parse(spec.resume)
        history = [VersionId.parse(ref.version) for ref in _history(job)]
        discovery = await store.discover(lineage, history=history, pinned=pinned)
        selection = discovery.selection
        if not selection.fell_back:
            return selection.chosen, (), ""
        message = selection.message()
        return selection.chosen, (EventSpec("Warning", "CheckpointFallback", message),), message


def _resuming(attempt: int, ref: CheckpointRef) -> EventSpec:
    return EventSpec(
        "Normal", "Resuming", f"attempt {attempt} resumes from {ref.version} (step {ref.step})"
    )


def _history(job: RLJob) -> list[CheckpointRef]:
    checkpoint = job.status.checkpoint
    return [] if checkpoint is None else list(checkpoint.history)
