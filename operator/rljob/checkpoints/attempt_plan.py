"""The start of a trainer attempt, decided without I/O: which version it resumes from, the marker
that records it, and what retention may delete now (docs/architecture.md section 4: gather -> decide
-> journal -> execute; the adapter gathers AttemptInputs read-only, this module decides, the runtime
journals the plan before it writes the marker or deletes anything).

- A choice made before is kept: this attempt's own marker (a retried start) wins, then the resume
  version the operator's status journaled for this attempt; otherwise the newest eligible version
  found valid, where a version found broken was listed again (bounded) before it was skipped.
- Retention plans under the lineage that includes the new marker, then holds back (never on the
  strength of one listing):
  * a version the new marker fences (eligible before it, newer than the resume point): a stale
    listing may be why it was skipped, so the start that fenced it never deletes it;
  * a broken or incomplete version younger than incompleteGrace, counted from its manifest's
    created time (without a readable manifest: its newest object), kept as evidence.
- A retention listing that failed becomes `retention_problem` and no deletion: retention never
  blocks an attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import NamedTuple

from rljob.api.status import AttemptRecord, CheckpointRef, StoreCapabilities
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId, resume_env
from rljob.checkpoint_protocol.models import AttemptMarker
from rljob.checkpoint_protocol.validity import Validity
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.retention import (
    RetentionListing,
    RetentionPlan,
    VersionDeletion,
    human,
    plan_retention,
)
from rljob.checkpoints.selection import Selection, checkpoint_ref

RESUME_LATEST = "Latest"
RESUME_NONE = "None"
DEFAULT_GRACE = timedelta(hours=6)


class AttemptEvent(NamedTuple):
    """An Event about the RLJob: EventSpec(*event) (checkpoints sits below reconcile, so it
    cannot name rljob.reconcile.events.EventSpec)."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class CandidateCheck:
    """Every verdict on one candidate version, in the order the listings were made: the first,
    then re-listings while it stayed broken in a way a stale listing could explain."""

    version: VersionId
    verdicts: tuple[Validity, ...]

    @property
    def valid(self) -> bool:
        return any(v.valid for v in self.verdicts)

    @property
    def verdict(self) -> Validity:
        """The first valid verdict; else the last, saying how many listings agreed."""
        for verdict in self.verdicts:
            if verdict.valid:
                return verdict
        last = self.verdicts[-1]
        if len(self.verdicts) == 1:
            return last
        return replace(last, reason=f"{last.reason} (in {len(self.verdicts)} listings)")


@dataclass(frozen=True)
class AttemptInputs:
    """What the adapter read for one attempt's start (nothing here was written)."""

    location: CheckpointLocation
    attempt: int
    now: datetime
    job_uid: str | None = None
    resume: str = RESUME_LATEST  # spec.checkpoint.resume: Latest, None or a version name
    keep: int = 5
    incomplete_grace: timedelta = DEFAULT_GRACE
    markers: Mapping[int, AttemptMarker] = field(default_factory=dict)
    capabilities: StoreCapabilities | None = None
    journaled: str | None = None  # the resume version status recorded for this attempt
    candidates: tuple[CandidateCheck, ...] = ()  # newest first, as checked
    retention: RetentionListing | None = None
    retention_error: str = ""  # why the retention listing could not be made


@dataclass(frozen=True)
class RecordedChoice:
    """A resume choice an earlier try of this attempt's start made (None: from scratch)."""

    version: VersionId | None
    marker: AttemptMarker | None = None  # this attempt's own marker, when it exists


@dataclass(frozen=True)
class ResumeChoice:
    chosen: Validity | None
    skipped: tuple[Validity, ...] = ()  # newer eligible versions found broken, newest first
    recorded: RecordedChoice | None = None


@dataclass(frozen=True)
class AttemptPlan:
    """Everything one attempt's start does, for the journal and then for execution."""

    attempt: int
    marker: AttemptMarker
    chosen: Validity | None = None
    resumed_from: CheckpointRef | None = None
    resume_env: dict[str, str] = field(default_factory=dict)
    capabilities: StoreCapabilities | None = None
    events: tuple[AttemptEvent, ...] = ()
    problem: str = ""  # why a newer version was not used ("" when none was skipped)
    retention: RetentionPlan = field(default_factory=RetentionPlan)
    retention_problem: str = ""  # why retention could not be planned ("" when it was)


def recorded_choice(
    markers: Mapping[int, AttemptMarker], attempt: int, job_uid: str | None, journaled: str | None
) -> RecordedChoice | None:
    """This attempt's own marker's choice, else the journaled one, else None. A marker of
    another job's uid is not ours: writing ours over it fails later, as it should."""
    own = markers.get(attempt)
    if own is not None and (own.job_uid is None or job_uid is None or own.job_uid == job_uid):
        return RecordedChoice(_parse(own.resumed_from_version), own)
    if journaled is not None:
        return RecordedChoice(_parse(journaled))
    return None


def with_journaled_markers(
    markers: Mapping[int, AttemptMarker],
    records: Iterable[AttemptRecord],
    location: CheckpointLocation,
    job_uid: str | None,
) -> dict[int, AttemptMarker]:
    """The store's markers, plus the one status implies for each attempt it recorded but a
    lagging listing does not show: a missing marker would drop that attempt's resume point
    from the lineage. The record is journaled before the marker and holds the same choice (a
    marker never written means the attempt never ran: its fence only stops a superseded
    attempt's late writes, as its marker would have)."""
    implied = {
        record.attempt: AttemptMarker(
            job=location.job,
            namespace=location.namespace,
            job_uid=job_uid,
            attempt=record.attempt,
            started_at=record.started_at,
            resumed_from_step=record.resumed_from_step,
            resumed_from_version=record.resumed_from_version,
        )
        for record in records
    }
    return {**implied, **markers}


def needs_discovery(resume: str, attempt: int, markers: Mapping[int, AttemptMarker]) -> bool:
    """Whether a fresh choice looks at the store at all (not for resume: None, nor for the
    first attempt of a name that left nothing)."""
    return resume != RESUME_NONE and (attempt > 1 or bool(markers))


def pinned_version(resume: str) -> VersionId | None:
    """spec.checkpoint.resume naming one version."""
    return None if resume in (RESUME_LATEST, RESUME_NONE) else VersionId.parse(resume)


def discovery_lineage(markers: Mapping[int, AttemptMarker], attempt: int) -> Lineage:
    """The lineage before this attempt's marker: the one its resume version is chosen under."""
    steps = {a: m.resumed_from_step for a, m in markers.items() if a < attempt}
    return Lineage(attempt - 1, steps)


def choose_resume(inputs: AttemptInputs) -> ResumeChoice:
    """A recorded choice as it was; else the newest candidate some listing found valid."""
    recorded = recorded_choice(inputs.markers, inputs.attempt, inputs.job_uid, inputs.journaled)
    if recorded is not None:
        if recorded.version is None:
            return ResumeChoice(None, recorded=recorded)
        found = [c.verdict for c in inputs.candidates if c.version == recorded.version]
        unchecked = Validity(recorded.version)  # not gathered: kept all the same, unvalidated
        return ResumeChoice(found[0] if found else unchecked, recorded=recorded)
    if not needs_discovery(inputs.resume, inputs.attempt, inputs.markers):
        return ResumeChoice(None)
    skipped: list[Validity] = []
    for candidate in inputs.candidates:
        if candidate.valid:
            return ResumeChoice(candidate.verdict, tuple(skipped))
        skipped.append(candidate.verdict)
    return ResumeChoice(None, tuple(skipped))


def missed_newer(inputs: AttemptInputs) -> bool:
    """Retention's listing, made after the resume choice, shows a committed version newer than
    the one chosen that the choice could have taken: a lagging listing hid its files from the
    candidates' check (worth reading them once more: resuming older recomputes its steps, and
    the newer version falls out of the lineage for good)."""
    listing, choice = inputs.retention, choose_resume(inputs)
    fresh = choice.recorded is None and pinned_version(inputs.resume) is None
    if (
        listing is None
        or not fresh
        or not needs_discovery(inputs.resume, inputs.attempt, inputs.markers)
    ):
        return False
    lineage = discovery_lineage(inputs.markers, inputs.attempt)
    chosen = choice.chosen.version if choice.chosen is not None else None
    return any(
        objects.complete
        and lineage.eligible(version)
        and (chosen is None or version > chosen)
        and (verdict := listing.validities.get(version)) is not None
        and verdict.valid
        for version, objects in listing.versions.items()
    )


def attempt_marker(inputs: AttemptInputs, choice: ResumeChoice) -> AttemptMarker:
    """The marker to write: the existing one on a retried start (the write is then a no-op)."""
    if choice.recorded is not None and choice.recorded.marker is not None:
        return choice.recorded.marker
    version = None if choice.chosen is None else choice.chosen.version
    return AttemptMarker(
        job=inputs.location.job,
        namespace=inputs.location.namespace,
        job_uid=inputs.job_uid,
        attempt=inputs.attempt,
        started_at=inputs.now,
        resumed_from_step=None if version is None else version.step,
        resumed_from_version=None if version is None else version.name,
    )


def retention_lineage(inputs: AttemptInputs) -> Lineage:
    """The lineage retention plans under: the markers and this attempt's, as it will be."""
    marker = attempt_marker(inputs, choose_resume(inputs))
    steps = {a: m.resumed_from_step for a, m in inputs.markers.items()}
    return Lineage(inputs.attempt, {**steps, inputs.attempt: marker.resumed_from_step})


def plan_attempt_start(inputs: AttemptInputs) -> AttemptPlan:
    """The whole start of inputs.attempt: marker, resume choice, events, retention."""
    choice = choose_resume(inputs)
    marker = attempt_marker(inputs, choice)
    retention, retention_problem = _retention(inputs, choice)
    selection = Selection(choice.chosen, choice.skipped)
    problem = selection.message() if selection.fell_back else ""
    events = [AttemptEvent("Warning", "CheckpointFallback", problem)] if problem else []
    if choice.chosen is None:
        return AttemptPlan(
            inputs.attempt, marker, capabilities=inputs.capabilities, events=tuple(events),
            problem=problem, retention=retention, retention_problem=retention_problem,
        )  # fmt: skip
    verdict = choice.chosen
    ref = checkpoint_ref(inputs.location, verdict)
    if not verdict.valid:  # a recorded choice that this start could not confirm
        ref = ref.model_copy(update={"validated_at": None})
    message = f"attempt {inputs.attempt} resumes from {ref.version} (step {ref.step})"
    events.append(AttemptEvent("Normal", "Resuming", message))
    return AttemptPlan(
        inputs.attempt,
        marker,
        chosen=verdict,
        resumed_from=ref,
        resume_env=resume_env(inputs.location, verdict.version),
        capabilities=inputs.capabilities,
        events=tuple(events),
        problem=problem,
        retention=retention,
        retention_problem=retention_problem,
    )


def _retention(inputs: AttemptInputs, choice: ResumeChoice) -> tuple[RetentionPlan, str]:
    listing = inputs.retention
    if listing is None:
        return RetentionPlan(), inputs.retention_error
    chosen = None if choice.chosen is None else choice.chosen.version
    plan = plan_retention(
        location=inputs.location,
        versions=listing.versions,
        lineage=retention_lineage(inputs),
        keep=inputs.keep,
        validities=listing.validities,
        now=inputs.now,
        incomplete_grace=inputs.incomplete_grace,
        in_use=() if chosen is None else (chosen,),
        uploads=listing.uploads,
    )
    hold = _Hold(inputs, chosen, discovery_lineage(inputs.markers, inputs.attempt))
    deletions: list[VersionDeletion] = []
    held: list[tuple[VersionId, str]] = []
    for deletion in plan.deletions:
        why = hold.why(deletion.version)
        if why is None:
            deletions.append(deletion)
        else:
            held.append((deletion.version, why))
    return replace(plan, deletions=tuple(deletions), left=(*plan.left, *held)), ""


@dataclass(frozen=True)
class _Hold:
    """Why a deletion retention planned must wait (None: it may go ahead)."""

    inputs: AttemptInputs
    chosen: VersionId | None
    before: Lineage  # the lineage without this attempt's marker

    def why(self, version: VersionId) -> str | None:
        if self.before.eligible(version) and (self.chosen is None or version > self.chosen):
            point = "none" if self.chosen is None else self.chosen.name
            return f"newer than the resume point ({point}): not deleted by the start that fences it"
        verdicts = self._verdicts(version)
        listed = self._listing().versions.get(version)
        incomplete = listed is not None and not listed.complete
        broken = bool(verdicts) and not any(v.valid for v in verdicts)
        if not incomplete and not broken:
            return None
        manifest = next((v.manifest for v in verdicts if v.manifest is not None), None)
        since = manifest.created_at if manifest is not None else None
        if since is None and listed is not None:
            since = listed.newest_modified
        what = verdicts[-1].reason if broken else "incomplete"
        grace = self.inputs.incomplete_grace
        if since is None:
            return f"{what}: kept as evidence (age unknown)"
        age = self.inputs.now - since
        if age < grace:
            return f"{what}: kept as evidence for {human(grace)} ({human(age)} old)"
        return None

    def _listing(self) -> RetentionListing:
        return self.inputs.retention or RetentionListing()

    def _verdicts(self, version: VersionId) -> list[Validity]:
        found = [v for c in self.inputs.candidates if c.version == version for v in c.verdicts]
        listed = self._listing().validities.get(version)
        return [*found, listed] if listed is not None else found


def _parse(name: str | None) -> VersionId | None:
    if name is None:
        return None
    try:
        return VersionId.parse(name)
    except ValueError:  # an unreadable recorded name: nothing to resume from
        return None
