"""Which observed objects are this RLJob's. The operator's watches select by the job-name label,
which a deleted RLJob of the same name left on its children too (deleted with --cascade=orphan,
or not yet collected): an object is this job's only when its controller chain ends at this
RLJob's uid (a Deployment, Service or Job it controls; a pod its Job controls; a pod of a
ReplicaSet its Deployment controls). The rest are leftovers: never read as the job's, never
deleted or adopted by it (reconcile/names.py says how the job steps around the names they hold).
A trainer Job deleted by hand leaves its pods running until the garbage collector reaches them:
they stay the job's through the Job uids status.attempts recorded, so the next attempt waits for
them as before.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from rljob.api import RLJob
from rljob.reconcile.observed import Observed

MAX_CHAIN = 3  # pod -> ReplicaSet -> Deployment -> RLJob


def owned_by(
    observed: Observed, uid: str, recorded: Collection[str] = ()
) -> tuple[Observed, Observed]:
    """(the RLJob's own objects, the leftovers), each with the owner links it needs;
    `recorded`: the uids of the job's trainer Jobs its status remembers (gone ones too)."""
    owner_of: dict[str, str] = {child.uid: child.owner_uid for child in observed.children}
    owner_of.update(observed.owners)
    owner_of.update((job, uid) for job in recorded if job not in owner_of)
    ours_by_pod = {p.uid: _chain_ends_at(p.owner_uid, owner_of, uid) for p in observed.pods}
    ours = Observed(
        tuple(c for c in observed.children if c.owner_uid == uid),
        tuple(p for p in observed.pods if ours_by_pod[p.uid]),
        observed.owners,
    )
    if len(ours.children) == len(observed.children) and len(ours.pods) == len(observed.pods):
        return ours, Observed()
    foreign = Observed(
        tuple(c for c in observed.children if c.owner_uid != uid),
        tuple(p for p in observed.pods if not ours_by_pod[p.uid]),
    )
    return ours, foreign


def _chain_ends_at(owner: str, owner_of: Mapping[str, str], uid: str) -> bool:
    for _ in range(MAX_CHAIN):
        if not owner:
            return False
        if owner == uid:
            return True
        owner = owner_of.get(owner, "")
    return False


def recorded_jobs(job: RLJob) -> frozenset[str]:
    """The uids of the trainer Jobs the job's status recorded, one per attempt that started."""
    return frozenset(r.job_uid for r in job.status.attempts if r.job_uid)
