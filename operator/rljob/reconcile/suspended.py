"""Whether a job is suspended, and by whom: the user (spec.suspend) or the failure policy
(status.suspension, action Suspend). Either stops every pod the same way (Deployments at 0, the
trainer Job deleted, the attempt closed as Suspended, not counted as a restart); only the words
differ. spec.suspend stays the user's: a GitOps tool would revert an operator's write to it, so
the policy's suspension lives in status and `rljob.io/resume-request` ends it.

Apart from rljob.reconcile.suspension (the policy's suspension and resume written): that imports
the events, whose lifecycle and render read this, so the two merged would be an import circle."""

from __future__ import annotations

from rljob.api import RLJob
from rljob.vocabulary.labels import RESUME_REQUEST_ANNOTATION

SPEC_SUSPENDED = "spec.suspend is true"


def suspended(job: RLJob) -> bool:
    """The one predicate for "the job is suspended": read it wherever spec.suspend was read."""
    return job.spec.suspend or job.status.suspension is not None


def resume_hint(name: str) -> str:
    return f"resume: kubectl annotate rljob {name} {RESUME_REQUEST_ANNOTATION}=$(date +%s)"


def suspended_because(job: RLJob) -> str:
    """Who suspended the job, in words ("" when nothing does): the policy's reason, rule and
    evidence with how to resume, and spec.suspend when the user's flag holds it too."""
    held = job.status.suspension
    said = [SPEC_SUSPENDED] if job.spec.suspend else []
    if held is not None:
        rule = f" (rule {held.rule})" if held.rule else ""
        hint = resume_hint(job.metadata.name)
        said.append(f"suspended by the failure policy{rule}: {held.message}; {hint}")
    return "; ".join(said)
