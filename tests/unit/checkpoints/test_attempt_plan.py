"""An attempt's start as a pure plan: the resume choice, the marker, and retention's deletions
under the safety rules (nothing deleted on the strength of one listing; retention never blocks)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest

from rljob.api.status import AttemptRecord
from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.models import AttemptMarker
from rljob.checkpoint_protocol.validity import PendingUpload, Problem, Validity, VersionObjects
from rljob.checkpoints.attempt_plan import (
    AttemptEvent,
    AttemptInputs,
    CandidateCheck,
    missed_newer,
    plan_attempt_start,
    with_journaled_markers,
)
from rljob.checkpoints.retention import RetentionListing

from ._build import LOC, NOW, manifest, objects, v

GRACE = timedelta(minutes=10)
OLD = timedelta(days=1)  # far past GRACE


def marker(attempt: int, resumed: VersionId | None, uid: str = "uid-1") -> AttemptMarker:
    return AttemptMarker(
        job=LOC.job,
        namespace=LOC.namespace,
        job_uid=uid,
        attempt=attempt,
        started_at=NOW - timedelta(hours=1),
        resumed_from_step=None if resumed is None else resumed.step,
        resumed_from_version=None if resumed is None else resumed.name,
    )


def good(version: VersionId) -> Validity:
    return Validity(version, manifest=manifest(version), checked_at=NOW)


def bad(version: VersionId, age: timedelta = timedelta(minutes=1)) -> Validity:
    created = manifest(version, created_at=NOW - age)
    reason = "missing shard model/rank0.pt"
    return Validity(version, Problem.MISSING_SHARD, reason, created, NOW)


def check(*verdicts: Validity) -> CandidateCheck:
    return CandidateCheck(verdicts[0].version, verdicts)


def listing(*versions: VersionObjects, uploads: tuple[PendingUpload, ...] = ()) -> RetentionListing:
    """A listing in which every committed version is whole and was validated."""
    validities = {o.version: good(o.version) for o in versions if o.complete}
    return RetentionListing({o.version: o for o in versions}, validities, uploads)


FIRST = {1: marker(1, None)}
RETRIED = {**FIRST, 2: marker(2, v(100, 1))}  # attempt 2's start wrote its marker, then crashed


def inputs(
    attempt: int = 2,
    *,
    markers: Mapping[int, AttemptMarker] = FIRST,
    candidates: tuple[CandidateCheck, ...] = (),
    retention: RetentionListing | None = None,
    **fields: object,
) -> AttemptInputs:
    return AttemptInputs(
        location=LOC,
        attempt=attempt,
        now=NOW,
        job_uid="uid-1",
        keep=3,
        incomplete_grace=GRACE,
        markers=markers,
        candidates=candidates,
        retention=retention,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("given", "resumes", "problem"),
    [
        pytest.param(inputs(candidates=(check(good(v(200, 1))),)), v(200, 1), "", id="newest"),
        pytest.param(
            inputs(candidates=(check(bad(v(200, 1)), good(v(200, 1))),)),
            v(200, 1),
            "",
            id="broken-in-one-listing-valid-in-the-next",
        ),
        pytest.param(
            inputs(candidates=(check(*[bad(v(200, 1))] * 3), check(good(v(100, 1))))),
            v(100, 1),
            "v000000000200-a000001: missing shard model/rank0.pt (in 3 listings); fell back to "
            "v000000000100-a000001",
            id="broken-in-every-listing-falls-back",
        ),
        pytest.param(
            inputs(candidates=(check(bad(v(200, 1))),)),
            None,
            "no valid checkpoint: v000000000200-a000001: missing shard model/rank0.pt",
            id="nothing-valid",
        ),
        pytest.param(
            inputs(candidates=(check(good(v(200, 1))),), resume="None"),
            None,
            "",
            id="resume-none-starts-from-scratch",
        ),
        pytest.param(inputs(1, markers={}), None, "", id="first-attempt-of-a-new-name"),
        pytest.param(
            inputs(markers=RETRIED, candidates=(check(good(v(100, 1))),)),
            v(100, 1),
            "",
            id="retried-start-keeps-its-marker",
        ),
        pytest.param(
            inputs(markers={**FIRST, 2: marker(2, None)}, candidates=(check(good(v(200, 1))),)),
            None,
            "",
            id="retried-start-keeps-a-scratch-start",
        ),
        pytest.param(
            inputs(journaled=v(100, 1).name, candidates=(check(good(v(100, 1))),)),
            v(100, 1),
            "",
            id="retry-keeps-the-journaled-choice",
        ),
        pytest.param(
            inputs(
                markers={**FIRST, 2: marker(2, v(50, 1), uid="other")},
                candidates=(check(good(v(200, 1))),),
            ),
            v(200, 1),
            "",
            id="another-jobs-marker-is-not-a-recorded-choice",
        ),
    ],
)
def test_resume_choice(given: AttemptInputs, resumes: VersionId | None, problem: str) -> None:
    plan = plan_attempt_start(given)
    assert (None if plan.chosen is None else plan.chosen.version) == resumes
    assert plan.problem == problem
    assert plan.marker.attempt == given.attempt
    assert plan.marker.resumed_from_version == (None if resumes is None else resumes.name)
    assert plan.marker.resumed_from_step == (None if resumes is None else resumes.step)
    reasons = [e.reason for e in plan.events]
    assert reasons == ["CheckpointFallback"] * bool(problem) + ["Resuming"] * bool(resumes)
    if resumes is not None:
        assert plan.resume_env["RLJOB_RESUME_VERSION"] == resumes.name
        assert plan.resumed_from is not None and plan.resumed_from.version == resumes.name


def test_a_retried_start_writes_the_marker_it_wrote_before() -> None:
    plan = plan_attempt_start(inputs(markers=RETRIED, candidates=(check(good(v(100, 1))),)))
    assert plan.marker is RETRIED[2]


def test_events_unpack_into_event_specs() -> None:
    plan = plan_attempt_start(inputs(candidates=(check(good(v(200, 1))),)))
    message = "attempt 2 resumes from v000000000200-a000001 (step 200)"
    assert plan.events == (AttemptEvent("Normal", "Resuming", message),)
    kind, reason, said = plan.events[0]
    assert (kind, reason, said) == ("Normal", "Resuming", message)


FENCED_LATER = {**FIRST, 2: marker(2, v(100, 1))}  # attempt 2 fell back past v200


# Retention's listing after a choice of v100: v200 hidden from the candidates' listing by a
# lagging store, shown by retention's (its files all there, found valid).
LAGGED = listing(objects(v(100, 1)), objects(v(200, 1)))


@pytest.mark.parametrize(
    ("given", "again"),
    [
        pytest.param(
            inputs(candidates=(check(good(v(100, 1))),), retention=LAGGED),
            True,
            id="a-newer-valid-version-the-choice-did-not-see",
        ),
        pytest.param(
            inputs(candidates=(check(bad(v(200, 1))), check(good(v(100, 1)))), retention=LAGGED),
            True,
            id="one-the-candidates-found-broken-and-retention-whole",
        ),
        pytest.param(
            inputs(candidates=(check(good(v(200, 1))),), retention=LAGGED),
            False,
            id="the-newest-chosen",
        ),
        pytest.param(
            inputs(
                candidates=(check(good(v(100, 1))),),
                retention=RetentionListing(LAGGED.versions, {v(200, 1): bad(v(200, 1))}),
            ),
            False,
            id="retention-found-it-broken-too",
        ),
        pytest.param(
            inputs(markers=RETRIED, candidates=(check(good(v(100, 1))),), retention=LAGGED),
            False,
            id="a-recorded-choice-is-kept",
        ),
        pytest.param(
            inputs(candidates=(check(good(v(100, 1))),), retention=LAGGED, resume="None"),
            False,
            id="resume-none",
        ),
        pytest.param(
            inputs(candidates=(check(good(v(100, 1))),), resume=v(100, 1).name, retention=LAGGED),
            False,
            id="a-pinned-version",
        ),
        pytest.param(
            inputs(
                3,
                markers={**FIRST, 2: marker(2, v(100, 1))},
                candidates=(check(good(v(100, 1))),),
                retention=LAGGED,
            ),
            False,
            id="newer-but-outside-the-lineage",
        ),
        pytest.param(inputs(candidates=(check(good(v(100, 1))),)), False, id="no-listing"),
    ],
)
def test_a_newer_version_retention_saw_is_read_again(given: AttemptInputs, again: bool) -> None:
    assert missed_newer(given) is again


def later_start(fenced: Validity) -> AttemptInputs:
    """Attempt 3's start, with `fenced` (of attempt 1, above attempt 2's resume point) listed."""
    versions = {v(100, 1): objects(v(100, 1)), fenced.version: objects(fenced.version)}
    return inputs(
        3,
        markers=FENCED_LATER,
        candidates=(check(good(v(100, 1))),),
        retention=RetentionListing(versions, {fenced.version: fenced}),
    )


def after_an_incomplete_save(age: timedelta) -> AttemptInputs:
    """Attempt 2's start; attempt 1 died `age` ago while saving step 150."""
    partial = objects(v(150, 1), with_manifest=False, age=age)
    return inputs(
        candidates=(check(good(v(200, 1))),), retention=listing(objects(v(200, 1)), partial)
    )


@pytest.mark.parametrize(
    ("given", "deleted", "held"),
    [
        pytest.param(
            inputs(
                candidates=(check(good(v(50, 1))),),
                retention=listing(*(objects(v(s, 1)) for s in (10, 20, 30, 40, 50))),
            ),
            [v(10, 1), v(20, 1)],
            {},
            id="beyond-keep-is-deleted",
        ),
        pytest.param(
            inputs(
                candidates=(check(*[bad(v(200, 1), OLD)] * 3), check(good(v(100, 1)))),
                retention=listing(objects(v(100, 1)), objects(v(200, 1))),
            ),
            [],
            {v(200, 1): "newer than the resume point (v000000000100-a000001)"},
            id="fenced-by-this-start-never-deleted-by-it",
        ),
        pytest.param(
            inputs(
                candidates=(check(good(v(200, 1))),),
                retention=listing(objects(v(100, 1)), objects(v(200, 1)), objects(v(300, 1))),
                resume=v(200, 1).name,
            ),
            [],
            {v(300, 1): "newer than the resume point (v000000000200-a000001)"},
            id="a-pinned-rollback-deletes-nothing-newer",
        ),
        pytest.param(
            later_start(bad(v(200, 1), timedelta(minutes=5))),
            [],
            {v(200, 1): "missing shard model/rank0.pt: kept as evidence for 10m (5m old)"},
            id="broken-and-fenced-kept-as-evidence-within-grace",
        ),
        pytest.param(
            later_start(bad(v(200, 1), timedelta(hours=1))),
            [v(200, 1)],
            {},
            id="broken-and-fenced-deleted-after-grace",
        ),
        pytest.param(
            later_start(good(v(260, 1))),
            [v(260, 1)],
            {},
            id="a-zombies-valid-commit-goes-at-once",
        ),
        pytest.param(
            after_an_incomplete_save(timedelta(minutes=2)),
            [],
            {v(150, 1): "incomplete: kept as evidence for 10m (2m old)"},
            id="incomplete-of-a-finished-attempt-kept-within-grace",
        ),
        pytest.param(
            after_an_incomplete_save(timedelta(hours=1)),
            [v(150, 1)],
            {},
            id="incomplete-of-a-finished-attempt-deleted-after-grace",
        ),
    ],
)
def test_retention_deletes_nothing_on_one_listing(
    given: AttemptInputs, deleted: list[VersionId], held: dict[VersionId, str]
) -> None:
    plan = plan_attempt_start(given)
    assert sorted(plan.retention.deleted_versions) == deleted
    assert plan.retention_problem == ""
    left = dict(plan.retention.left)
    for version, reason in held.items():
        assert reason in left[version]


@pytest.mark.parametrize(
    "error",
    [
        pytest.param("retention not planned: list_multipart_uploads: AccessDenied", id="denied"),
        pytest.param("retention not planned: list_objects_v2: timed out", id="timeout"),
    ],
)
def test_a_failed_retention_listing_never_blocks_the_attempt(error: str) -> None:
    plan = plan_attempt_start(
        inputs(candidates=(check(good(v(200, 1))),), retention=None, retention_error=error)
    )
    assert plan.chosen is not None and plan.chosen.version == v(200, 1)
    assert plan.marker.resumed_from_version == v(200, 1).name
    assert plan.retention.empty and plan.retention_problem == error


def test_uploads_of_finished_attempts_are_aborted() -> None:
    upload = PendingUpload(LOC.shard_key(v(300, 1), "big"), "u1", NOW - timedelta(minutes=1))
    plan = plan_attempt_start(
        inputs(candidates=(check(good(v(200, 1))),), retention=listing(uploads=(upload,)))
    )
    assert [a.upload_id for a in plan.retention.aborts] == ["u1"]


def _record(attempt: int, step: int | None, *, seen: bool) -> AttemptRecord:
    return AttemptRecord(
        attempt=attempt, started_at=NOW, resumed_from_step=step, job_uid="job" if seen else None
    )


def _marker(attempt: int, step: int | None) -> AttemptMarker:
    return AttemptMarker(
        job=LOC.job, namespace=LOC.namespace, attempt=attempt, started_at=NOW,
        resumed_from_step=step,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("listed", "records", "lineage"),
    [
        pytest.param({1: None}, [_record(1, None, seen=True), _record(2, 100, seen=True)],
                     {1: None, 2: 100}, id="a-seen-attempts-marker-missing-from-a-lagging-listing"),
        pytest.param({1: None}, [_record(1, None, seen=True), _record(2, 100, seen=False)],
                     {1: None, 2: 100}, id="an-attempt-whose-job-was-not-seen-yet"),
        pytest.param({1: None, 2: 50}, [_record(2, 100, seen=True)], {1: None, 2: 50},
                     id="the-stores-marker-wins"),
    ],
)  # fmt: skip
def test_status_fills_in_the_markers_a_lagging_listing_misses(
    listed: Mapping[int, int | None], records: list[AttemptRecord], lineage: dict[int, int | None]
) -> None:
    markers = {attempt: _marker(attempt, step) for attempt, step in listed.items()}
    merged = with_journaled_markers(markers, records, LOC, "uid-1")
    assert {a: m.resumed_from_step for a, m in merged.items()} == lineage
