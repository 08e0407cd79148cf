"""Whether a job is suspended, and by whom: the user (spec.suspend), the failure policy
(status.suspension, action Suspend) or Kueue (status.queue: not admitted, or evicted). Each
stops every pod the same way (Deployments at 0, the
trainer Job deleted, the attempt closed as Suspended, not counted as a restart); only the words
differ. spec.suspend stays the user's: a GitOps tool would revert an operator's write to it, so
the policy's suspension lives in status and `rljob.io/resume-request` ends it.

Apart from rljob.reconcile.suspension (the policy's suspension and resume written): that imports
the events, whose lifecycle and render read this, so the two merged would be an import circle."""

from __future__ import annotations

from rljob.api import QueueState, QueueStatus, RLJob
from rljob.vocabulary.labels import RESUME_REQUEST_ANNOTATION

SPEC_SUSPENDED = "spec.suspend is true"


def suspended(job: RLJob) -> bool:
    """The one predicate for "the job is suspended": read it wherever spec.suspend was read."""
    return job.spec.suspend or job.status.suspension is not None or queue_holds(job.status.queue)


def queue_holds(queue: QueueStatus | None) -> bool:
    """Kueue has not admitted the job (yet, or again after an eviction): no pod of it runs."""
    return queue is not None and queue.state in (QueueState.PENDING, QueueState.EVICTED)


def queued_because(queue: QueueStatus) -> str:
    """Why Kueue holds the job, in Kueue's words."""
    words = f": {queue.message}" if queue.message else ""
    if queue.state == QueueState.EVICTED:
        return (
            f"evicted by Kueue ({queue.reason or 'Evicted'}){words}; it resumes from its newest "
            "checkpoint when admitted again"
        )
    return f"queued in Kueue LocalQueue {queue.local_queue}{words}"


def resume_hint(name: str) -> str:
    return f"resume: kubectl annotate rljob {name} {RESUME_REQUEST_ANNOTATION}=$(date +%s)"


def suspended_because(job: RLJob) -> str:
    """Who suspended the job, in words ("" when nothing does): the policy's reason, rule and
    evidence with how to resume, and spec.suspend when the user's flag holds it too."""
    held = job.status.suspension
    said = [SPEC_SUSPENDED] if job.spec.suspend else []
    if queue_holds(job.status.queue) and job.status.queue is not None:
        said.append(queued_because(job.status.queue))
    if held is not None:
        rule = f" (rule {held.rule})" if held.rule else ""
        hint = resume_hint(job.metadata.name)
        said.append(f"suspended by the failure policy{rule}: {held.message}; {hint}")
    return "; ".join(said)
