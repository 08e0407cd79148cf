"""Discovery: the newest eligible valid version of a job, from the pointer and one listing
after it (see `discover`); and the resume candidates of an attempt's start, where a version found
broken is listed again (bounded) before an older one is accepted: an eventually consistent
listing can miss a shard of a good version."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.models import Pointer
from rljob.checkpoint_protocol.validity import Validity, VersionObjects
from rljob.checkpoints.attempt_plan import CandidateCheck
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.selection import Selection, newest_eligible_first, summarize

RELISTS = 2  # listings of a broken version's prefix after the first (3 in all)
RECHECKED = 3  # broken candidates listed again per attempt start, newest first


class VersionStore(Protocol):
    """What discovery reads of a store (rljob.checkpoints.s3.store.OperatorStore is one): a
    protocol, so that this module does not import the store that imports it."""

    @property
    def location(self) -> CheckpointLocation: ...

    @property
    def requests(self) -> int: ...

    def read_pointer(self) -> tuple[Pointer, str | None] | None: ...

    def list_versions(
        self, start_after: str | None = None, *, stop_at: str | None = None
    ) -> dict[VersionId, VersionObjects]: ...

    def validate(self, version: VersionId, objects: VersionObjects | None = None) -> Validity: ...


@dataclass(frozen=True)
class Discovery:
    """The outcome of discovery: the selection, and how it was reached."""

    selection: Selection
    pointer: VersionId | None = None
    pointer_note: str = ""  # why the pointer was not used, if it was not
    start_after: str | None = None  # where the listing started (None: from the first version)
    listed_versions: int = 0
    full_scan: bool = False  # whether it had to list the versions before start_after too
    requests: int = 0

    @property
    def chosen(self) -> Validity | None:
        return self.selection.chosen


def discover(
    store: VersionStore,
    lineage: Lineage,
    *,
    history: Iterable[VersionId] = (),
    pinned: VersionId | None = None,
    full_scan: bool = True,
) -> Discovery:
    """The newest eligible valid version.

    Reads the pointer, then makes ONE listing (a page sequence) starting at the newest of:
    the pointer's version if it is eligible, the newest eligible version in `history`
    (status.checkpoint.history), and the step the current attempt resumed from (every
    eligible version of an older attempt is at or below it). Eligible versions in that window
    are validated newest first from the listing itself; `history` versions below it follow.
    Only when none of them is valid does it list the versions before the window (full_scan).
    `pinned` (spec resume: <version>) validates just that version."""
    before = store.requests
    if pinned is not None:
        return Discovery(summarize([store.validate(pinned)]), requests=store.requests - before)
    pointer, note, bounds = _pointer_bound(store, lineage)
    history_eligible = newest_eligible_first(history, lineage)
    if history_eligible:
        bounds.append(store.location.start_after_version(history_eligible[0]))
    resumed = lineage.resumed_from.get(lineage.current_attempt)
    if resumed is not None:
        bounds.append(store.location.start_after_step(resumed))
    start_after = max(bounds) if bounds else None

    window = store.list_versions(start_after)
    # The pointer's version is a candidate even when a lagging listing misses it: it is then
    # found incomplete, listed again, and only then passed over.
    named = [pointer] if pointer is not None and not note else []
    candidates = {*(v for v in window if lineage.eligible(v)), *history_eligible, *named}
    checked = _check_newest_first(store, candidates, window, start_after, [])
    scanned = False
    if not any(v.valid for v in checked) and full_scan and start_after is not None:
        scanned = True
        earlier = store.list_versions(stop_at=start_after)
        candidates = {v for v in earlier if lineage.eligible(v)}
        checked = _check_newest_first(store, candidates, earlier, None, checked)
    return Discovery(
        summarize(checked),
        pointer=pointer,
        pointer_note=note,
        start_after=start_after,
        listed_versions=len(window),
        full_scan=scanned,
        requests=store.requests - before,
    )


def _pointer_bound(
    store: VersionStore, lineage: Lineage
) -> tuple[VersionId | None, str, list[str]]:
    """(pointer version, why it is not used, [listing start]) from latest.json."""
    got = store.read_pointer()
    if got is None:
        return None, "no readable pointer", []
    try:
        version = got[0].version_id
    except ValueError:
        return None, "pointer names no version", []
    why = lineage.why_ineligible(version)
    if why is not None:
        return version, f"pointer {version.name} ignored: {why}", []
    return version, "", [store.location.start_after_version(version)]


def _check_newest_first(
    store: VersionStore,
    candidates: Iterable[VersionId],
    listed: Mapping[VersionId, VersionObjects],
    start_after: str | None,
    checked: list[Validity],
) -> list[Validity]:
    """Validates candidates newest first until one is valid; versions already checked are
    skipped, and a candidate inside the listed window that the listing lacks is incomplete."""
    done = {v.version for v in checked}
    result = list(checked)
    for version in sorted(candidates, reverse=True):
        if version in done:
            continue
        objects = listed.get(version)
        if objects is None and (
            start_after is None or store.location.version_prefix(version) > start_after
        ):
            objects = VersionObjects(version)
        verdict = store.validate(version, objects)
        result.append(verdict)
        if verdict.valid:
            break
    return result


def recheck(store: VersionStore, first: Validity, relists: int = RELISTS) -> CandidateCheck:
    """`first` and the verdicts of up to `relists` fresh listings of the version's prefix, until
    one is valid; only problems a stale listing can explain are listed again."""
    verdicts = [first]
    while not verdicts[-1].valid and verdicts[-1].may_be_stale and len(verdicts) <= relists:
        verdicts.append(store.validate(first.version))
    return CandidateCheck(first.version, tuple(verdicts))


def resume_candidates(
    store: VersionStore,
    lineage: Lineage,
    *,
    history: Iterable[VersionId] = (),
    pinned: VersionId | None = None,
) -> tuple[CandidateCheck, ...]:
    """Discovery's verdicts newest first, each broken one rechecked (the newest RECHECKED), and
    cut after the first valid one."""
    selection = discover(store, lineage, history=history, pinned=pinned).selection
    checks: list[CandidateCheck] = []
    for index, skipped in enumerate(selection.skipped):
        check = (
            recheck(store, skipped)
            if index < RECHECKED
            else CandidateCheck(skipped.version, (skipped,))
        )
        checks.append(check)
        if check.valid:
            return tuple(checks)
    if selection.chosen is not None:
        checks.append(CandidateCheck(selection.chosen.version, (selection.chosen,)))
    return tuple(checks)
