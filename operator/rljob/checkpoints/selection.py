"""Choosing the version to resume from (pure): the newest eligible valid version, falling back to
the previous eligible one, with a reason naming what was wrong with each version skipped."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from rljob.api.status import CheckpointRef
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.validity import Problem, Validity
from rljob.checkpoints.lineage import Lineage


@dataclass(frozen=True)
class Selection:
    """The chosen version (None: nothing to resume from) and the newer eligible versions that
    were skipped because they failed validation, newest first."""

    chosen: Validity | None
    skipped: tuple[Validity, ...] = ()

    @property
    def fell_back(self) -> bool:
        """True when a newer eligible version was broken (warrants a Warning Event)."""
        return bool(self.skipped)

    @property
    def broken(self) -> tuple[Validity, ...]:
        """Skipped versions that are broken, not merely incomplete: an incomplete version is
        normal while a save is in progress or after a crash mid-save."""
        return tuple(v for v in self.skipped if v.problem is not Problem.INCOMPLETE)

    @property
    def version(self) -> VersionId | None:
        return None if self.chosen is None else self.chosen.version

    def message(self) -> str:
        """One line for an Event or a condition message."""
        broken = "; ".join(v.describe() for v in self.skipped)
        if self.chosen is None:
            return f"no valid checkpoint: {broken}" if broken else "no checkpoint yet"
        if not broken:
            return f"newest valid checkpoint is {self.chosen.version.name}"
        return f"{broken}; fell back to {self.chosen.version.name}"


def newest_eligible_first(versions: Iterable[VersionId], lineage: Lineage) -> list[VersionId]:
    """Distinct eligible versions, newest first."""
    return sorted({v for v in versions if lineage.eligible(v)}, reverse=True)


def summarize(checked: Sequence[Validity]) -> Selection:
    """The selection from verdicts checked newest first: the first valid one wins."""
    skipped: list[Validity] = []
    for verdict in checked:
        if verdict.valid:
            return Selection(verdict, tuple(skipped))
        skipped.append(verdict)
    return Selection(None, tuple(skipped))


def select_version(
    candidates: Iterable[VersionId],
    lineage: Lineage,
    validate: Callable[[VersionId], Validity],
    *,
    max_checks: int | None = None,
) -> Selection:
    """Validates eligible candidates newest first until one is valid (at most max_checks)."""
    checked: list[Validity] = []
    for version in newest_eligible_first(candidates, lineage):
        if max_checks is not None and len(checked) >= max_checks:
            break
        verdict = validate(version)
        checked.append(verdict)
        if verdict.valid:
            break
    return summarize(checked)


def checkpoint_ref(
    location: CheckpointLocation, verdict: Validity, validated_at: datetime | None = None
) -> CheckpointRef:
    """The status entry (`status.checkpoint.latest`, `resumedFrom`, `history`) of a verdict."""
    manifest = verdict.manifest
    return CheckpointRef(
        version=verdict.version.name,
        step=verdict.version.step,
        attempt=verdict.version.attempt,
        uri=location.version_uri(verdict.version),
        saved_at=None if manifest is None else manifest.created_at,
        validated_at=validated_at or verdict.checked_at,
    )
