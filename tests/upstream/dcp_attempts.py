"""A trainer attempt's start as the operator makes it (Checkpoints.gather_attempt then
plan_attempt_start), on the synchronous store: markers, resume candidates, the plan, the
attempt's marker written, and the pod environment with its RLJOB_RESUME_* variables."""

from __future__ import annotations

from datetime import UTC, datetime

from rljob.checkpoints.attempt_plan import (
    RESUME_LATEST,
    AttemptInputs,
    AttemptPlan,
    CandidateCheck,
    discovery_lineage,
    needs_discovery,
    plan_attempt_start,
)
from rljob.checkpoints.s3 import OperatorStore
from tests.integration.s3_fixtures import S3Bucket


def start_attempt(store: OperatorStore, attempt: int) -> AttemptPlan:
    """Plans attempt's start from what the store holds and writes its marker."""
    markers = store.read_markers()
    candidates: tuple[CandidateCheck, ...] = ()
    if needs_discovery(RESUME_LATEST, attempt, markers):
        candidates = store.resume_candidates(discovery_lineage(markers, attempt))
    inputs = AttemptInputs(
        location=store.location,
        attempt=attempt,
        now=datetime.now(UTC),
        job_uid="uid-test",
        markers=markers,
        candidates=candidates,
    )
    plan = plan_attempt_start(inputs)
    store.write_marker(plan.marker)
    return plan


def pod_env(bucket: S3Bucket, store: OperatorStore, plan: AttemptPlan) -> dict[str, str]:
    """The trainer container's RLJOB_* and store variables for the planned attempt."""
    return {**bucket.env(store.location, plan.attempt), **plan.resume_env}
